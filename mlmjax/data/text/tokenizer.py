"""SentencePiece tokenizer: train one on the training split, or load a user's `.model`.

Special ids are fixed (models/special_ids.py) so every part of mlmjax can rely on them.
[CLS]/[SEP]/[MASK] are control symbols: sentencepiece never produces them from raw text, so a
literal "[MASK]" typed into a document is just text. A user-supplied model must use the same ids.

A Hugging Face tokenizer (a folder: a run started from a Hugging Face checkpoint, or
`tokenizer.path` naming one) is used through data/text/hf_tokenizer.py, which maps its special
tokens onto the same ids. Both kinds offer the same methods; `load` and `from_bytes` pick the
kind, so the rest of mlmjax never asks which one it has.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

from absl import logging
import numpy as np
import sentencepiece as spm

from mlmjax import errors
from mlmjax import paths
from mlmjax.models import special_ids



class TokenizerError(errors.UserError):
  """A tokenizer that mlmjax cannot use, with a message a user can act on."""


class Tokenizer:
  """Thin wrapper over a SentencePieceProcessor with mlmjax's special ids."""

  kind = "sentencepiece"

  def __init__(self, model_proto: bytes, path: str = "<memory>"):
    self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self.model_proto = model_proto
    self.path = path
    pieces = tuple(self.sp.id_to_piece(i) for i in range(min(special_ids.NUM_SPECIAL, len(self))))
    if pieces != special_ids.PIECES:
      raise TokenizerError(
          f"{path}: the first pieces are {pieces}, mlmjax needs {special_ids.PIECES} at ids 0-4"
          " (train with pad_id=0, unk_id=1, control_symbols=[CLS],[SEP],[MASK])")

  def __len__(self) -> int:
    return self.sp.get_piece_size()

  @property
  def vocab_size(self) -> int:
    return len(self)

  def encode(self, texts: list[str]) -> list[list[int]]:
    """Batched encode (sentencepiece's fast path)."""
    return self.sp.encode(texts)

  def encode_offsets(self, texts: list[str]) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """encode, with each piece's [start, end) in characters of its text (annotation.py)."""
    out = []
    for text, proto in zip(texts, self.sp.encode(texts, return_type="proto")):
      # sentencepiece counts bytes of UTF-8: map them to characters.
      char_at = np.repeat(np.arange(len(text) + 1),
                          [len(c.encode()) for c in text] + [1])
      pieces = proto.pieces
      out.append(([p.id for p in pieces], char_at[[p.begin for p in pieces]],
                  char_at[[p.end for p in pieces]]))
    return out

  def id_to_piece(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def decode(self, ids: Iterable[int]) -> str:
    return self.sp.decode([int(i) for i in ids])

  def special_mask(self) -> np.ndarray:
    """[V] bool: ids that are not text (specials, control, unknown, unused, byte pieces)."""
    sp = self.sp
    return np.array([i < special_ids.NUM_SPECIAL or sp.is_control(i) or sp.is_unknown(i)
                     or sp.is_unused(i) or sp.is_byte(i) for i in range(len(self))], bool)

  def word_pieces(self) -> list[str]:
    """Every id's piece; a piece that starts a word begins with U+2581."""
    return [self.sp.id_to_piece(i) for i in range(len(self))]

  def to_bytes(self) -> bytes:
    """Everything needed to rebuild this tokenizer (grain workers build their own)."""
    return self.model_proto

  def save(self, path: str) -> None:
    paths.write_atomic(path, self.model_proto)  # a crash never leaves a half-written tokenizer

  @classmethod
  def load(cls, path: str) -> "Tokenizer":
    if not paths.isfile(path):
      raise TokenizerError(f"tokenizer model {path!r} does not exist")
    proto = paths.read_bytes(path)
    try:
      return cls(proto, path)
    except RuntimeError as e:  # sentencepiece's parse failure
      raise TokenizerError(f"{path}: not a sentencepiece model ({e})") from None


def load(path: str):
  """A sentencepiece `.model` file, or a folder of Hugging Face tokenizer files."""
  if paths.isdir(path):
    from mlmjax.data.text import hf_tokenizer  # pylint: disable=g-import-not-at-top  # [hf] extra
    return hf_tokenizer.HFTokenizer.load(path)
  return Tokenizer.load(path)


def from_bytes(data: bytes):
  """The tokenizer of `tok.to_bytes()`, whichever its kind."""
  from mlmjax.data.text import hf_tokenizer  # pylint: disable=g-import-not-at-top
  if hf_tokenizer.is_serialized(data):
    return hf_tokenizer.HFTokenizer.from_bytes(data)
  return Tokenizer(data)


def _sentences(documents: Iterable[str], max_sentences: int) -> Iterator[str]:
  n = 0
  for doc in documents:
    for line in doc.split("\n"):
      line = line.strip()
      if line:
        yield line
        n += 1
        if n >= max_sentences:
          return


_SAMPLE_PROBE = 100  # documents read to estimate lines per document


def sample(documents, max_sentences: int):
  """Documents spread evenly over the whole of `documents` (a sequence), about enough for
  `max_sentences` lines: a tokenizer of a large corpus trains on a bounded sample of all of it
  rather than on its beginning. A corpus within the budget is taken whole, in order."""
  if not hasattr(documents, "__len__") or not len(documents):
    return documents
  n = len(documents)
  probe = [documents[i] for i in range(min(n, _SAMPLE_PROBE))]
  lines = sum(sum(1 for line in d.split("\n") if line.strip()) for d in probe) / len(probe)
  stride = max(1, int(n * max(lines, 1.0) // max_sentences))
  return documents if stride == 1 else (documents[i] for i in range(0, n, stride))


def train_tokenizer(documents: Iterable[str], vocab_size: int, model_type: str,
                    max_sentences: int) -> Tokenizer:
  """Trains a sentencepiece model in memory on the lines of `documents` (a sequence: an even
  sample of it, see `sample`; any other iterable: its first `max_sentences` lines)."""
  buf = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=_sentences(sample(documents, max_sentences), max_sentences),
      model_writer=buf,
      vocab_size=vocab_size,
      model_type=model_type,
      # A small corpus may not support the requested size; take what it supports.
      hard_vocab_limit=False,
      character_coverage=0.9995,
      pad_id=special_ids.PAD_ID, unk_id=special_ids.UNK_ID, bos_id=-1, eos_id=-1,
      pad_piece="[PAD]", unk_piece="[UNK]",
      control_symbols=list(special_ids.PIECES[2:]),
      num_threads=1,  # faster than more threads for unigram on small machines (measured)
      minloglevel=2,
  )
  return Tokenizer(buf.getvalue())


def get_tokenizer(tokenizer_config, train_documents: Iterable[str], saved: dict[str, str]):
  """The run's tokenizer: the saved copy (the workdir's; `saved` maps each kind to its path
  there) on resume, else the user's model, else one trained on the training split.

  The chosen model is always copied to `saved[tok.kind]`, so a run (and predict/export)
  depends only on its workdir.
  """
  existing = [p for p in saved.values() if paths.exists(p)]
  if existing:
    tok = load(existing[0])
    if tokenizer_config.path and load(tokenizer_config.path).to_bytes() != tok.to_bytes():
      raise TokenizerError(
          f"config.tokenizer.path={tokenizer_config.path!r} is not the tokenizer this run was"
          f" trained with ({existing[0]}); drop the setting to resume, or use a new --workdir")
    logging.info("Reusing tokenizer %s (%d pieces)", existing[0], len(tok))
    return tok
  if tokenizer_config.path:
    tok = load(tokenizer_config.path)
    logging.info("Using tokenizer %s (%d pieces)", tokenizer_config.path, len(tok))
  else:
    logging.info("Training a %d-piece %s sentencepiece model on the training split...",
                 tokenizer_config.vocab_size, tokenizer_config.model_type)
    tok = train_tokenizer(train_documents, tokenizer_config.vocab_size,
                          tokenizer_config.model_type, tokenizer_config.max_training_sentences)
    logging.info("Trained tokenizer: %d pieces", len(tok))
  tok.save(saved[tok.kind])
  return tok

