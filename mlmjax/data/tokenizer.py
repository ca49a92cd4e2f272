"""SentencePiece tokenizer: train one on the training split, or load a user's `.model`.

Special ids are fixed so every part of mlmjax can rely on them:
  [PAD]=0  [UNK]=1  [CLS]=2  [SEP]=3  [MASK]=4
[CLS]/[SEP]/[MASK] are control symbols: sentencepiece never produces them from raw text, so a
literal "[MASK]" typed into a document is just text. A user-supplied model must use the same ids.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator

from absl import logging
import sentencepiece as spm

from mlmjax import errors

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL = 5  # ids below this are never masked, predicted as random replacements, etc.
_SPECIAL_PIECES = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class TokenizerError(errors.UserError):
  """A tokenizer that mlmjax cannot use, with a message a user can act on."""


class Tokenizer:
  """Thin wrapper over a SentencePieceProcessor with mlmjax's special ids."""

  def __init__(self, model_proto: bytes, path: str = "<memory>"):
    self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self.model_proto = model_proto
    self.path = path
    pieces = tuple(self.sp.id_to_piece(i) for i in range(min(NUM_SPECIAL, len(self))))
    if pieces != _SPECIAL_PIECES:
      raise TokenizerError(
          f"{path}: the first pieces are {pieces}, mlmjax needs {_SPECIAL_PIECES} at ids 0-4"
          " (train with pad_id=0, unk_id=1, control_symbols=[CLS],[SEP],[MASK])")

  def __len__(self) -> int:
    return self.sp.get_piece_size()

  @property
  def vocab_size(self) -> int:
    return len(self)

  def encode(self, texts: list[str]) -> list[list[int]]:
    """Batched encode (sentencepiece's fast path)."""
    return self.sp.encode(texts)

  def id_to_piece(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def decode(self, ids: Iterable[int]) -> str:
    return self.sp.decode([int(i) for i in ids])

  def save(self, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
      f.write(self.model_proto)
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written tokenizer

  @classmethod
  def load(cls, path: str) -> "Tokenizer":
    if not os.path.isfile(path):
      raise TokenizerError(f"tokenizer model {path!r} does not exist")
    with open(path, "rb") as f:
      proto = f.read()
    try:
      return cls(proto, path)
    except RuntimeError as e:  # sentencepiece's parse failure
      raise TokenizerError(f"{path}: not a sentencepiece model ({e})") from None


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


def train_tokenizer(documents: Iterable[str], vocab_size: int, model_type: str,
                    max_sentences: int) -> Tokenizer:
  """Trains a sentencepiece model in memory on the lines of `documents`."""
  buf = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=_sentences(documents, max_sentences),
      model_writer=buf,
      vocab_size=vocab_size,
      model_type=model_type,
      # A small corpus may not support the requested size; take what it supports.
      hard_vocab_limit=False,
      character_coverage=0.9995,
      pad_id=PAD_ID, unk_id=UNK_ID, bos_id=-1, eos_id=-1,
      pad_piece="[PAD]", unk_piece="[UNK]",
      control_symbols=list(_SPECIAL_PIECES[2:]),
      num_threads=1,  # faster than more threads for unigram on small machines (measured)
      minloglevel=2,
  )
  return Tokenizer(buf.getvalue())


def get_tokenizer(tokenizer_config, train_documents: Iterable[str], saved: str) -> Tokenizer:
  """The run's tokenizer: the saved copy at `saved` (the workdir's) on resume, else the user's
  model, else one trained on the training split.

  The chosen model is always copied to `saved`, so a run (and predict/export) depends only on
  its workdir.
  """
  if os.path.exists(saved):
    tok = Tokenizer.load(saved)
    if tokenizer_config.path and Tokenizer.load(tokenizer_config.path).model_proto != (
        tok.model_proto):
      raise TokenizerError(
          f"config.tokenizer.path={tokenizer_config.path!r} is not the tokenizer this run was"
          f" trained with ({saved}); drop the setting to resume, or use a new --workdir")
    logging.info("Reusing tokenizer %s (%d pieces)", saved, len(tok))
    return tok
  if tokenizer_config.path:
    tok = Tokenizer.load(tokenizer_config.path)
    logging.info("Using tokenizer %s (%d pieces)", tokenizer_config.path, len(tok))
  else:
    logging.info("Training a %d-piece %s sentencepiece model on the training split...",
                 tokenizer_config.vocab_size, tokenizer_config.model_type)
    tok = train_tokenizer(train_documents, tokenizer_config.vocab_size,
                          tokenizer_config.model_type, tokenizer_config.max_training_sentences)
    logging.info("Trained tokenizer: %d pieces", len(tok))
  tok.save(saved)
  return tok

