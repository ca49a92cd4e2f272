"""Per-token-id tables the masking strategies need, computed once and stored with the tokenizer.

`VocabStats` holds, for every id of the sentencepiece vocabulary, a few booleans read off the
piece's text and the token's count in (a sample of) the training corpus. Masking only ever
indexes these tables with token ids, so it stays vectorised numpy.

Piece tables (U+2581 "▁" is sentencepiece's word-boundary marker; specials, byte-fallback and
unused pieces are False everywhere):

  punctuation   the piece, without a leading ▁, is non-empty and every character is punctuation
                as BERT's BasicTokenizer defines it: ASCII `!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~`
                and any Unicode category P* character. Pieces mixing letters and punctuation
                ("s." in some vocabularies) are not punctuation.
  word_start    the piece begins with ▁, or it is punctuation. This is the per-id part of the
                word rule; masking adds the contextual part (a piece right after a punctuation
                piece, a special token or a sequence boundary also starts a word), so, as in
                BERT's whole-word masking, punctuation is always a word of its own:
                "don't" -> [don] ['] [t], "God," -> [God] [,].
  space_only    the piece is exactly "▁" (sentencepiece emits it before a word it cannot start
                with a ▁-piece, e.g. "▁ G o d"); such a word's first letter is in its next piece.
  capitalized   the piece's first character after the ▁ is an uppercase letter.
  sentence_end  the piece, without ▁ and without trailing closing quotes/brackets
                (`"'”’)]}»`), is non-empty and ends with . ! ? … or a full-width 。！？.
                Abbreviations ("Mr.") count as sentence ends too.
  counts        int64 occurrences in the sample (specials 0).
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import io
import unicodedata

from absl import logging
import numpy as np

from mlmjax import errors
from mlmjax import paths
from mlmjax.models import special_ids

_FORMAT_VERSION = 1
_SPACE = "\u2581"
_CLOSERS = "\"'”’)]}»"
_SENTENCE_END = ".!?…。！？"
_ENCODE_BATCH = 256  # documents per batched tok.encode call


class VocabStatsError(errors.UserError):
  """A stats file that does not fit the run's tokenizer, with the fix."""


@dataclasses.dataclass(frozen=True, eq=False)
class VocabStats:
  """Per-token-id tables ([V] numpy arrays); plain data, so a masker holding it pickles."""

  word_start: np.ndarray    # [V] bool
  punctuation: np.ndarray   # [V] bool
  capitalized: np.ndarray   # [V] bool
  sentence_end: np.ndarray  # [V] bool
  counts: np.ndarray        # [V] int64
  # Optional so hand-made tables (tests) may leave it out: then no piece is space-only.
  space_only: np.ndarray | None = None  # [V] bool

  def __post_init__(self):
    if self.space_only is None:
      object.__setattr__(self, "space_only", np.zeros(len(self.counts), bool))

  @property
  def vocab_size(self) -> int:
    return len(self.counts)


def _is_punctuation_char(ch: str) -> bool:
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def piece_tables(pieces: Sequence[str], special: Sequence[bool]) -> dict[str, np.ndarray]:
  """The boolean tables of `VocabStats` for a list of pieces (special ones all False)."""
  v = len(pieces)
  out = {k: np.zeros(v, bool) for k in
         ("word_start", "punctuation", "capitalized", "sentence_end", "space_only")}
  for i, (piece, is_special) in enumerate(zip(pieces, special)):
    if is_special or not piece:
      continue
    body = piece[1:] if piece.startswith(_SPACE) else piece
    punct = bool(body) and all(_is_punctuation_char(c) for c in body)
    out["punctuation"][i] = punct
    out["word_start"][i] = piece.startswith(_SPACE) or punct
    out["space_only"][i] = piece == _SPACE
    out["capitalized"][i] = bool(body) and body[0].isupper()
    stripped = body.rstrip(_CLOSERS)
    out["sentence_end"][i] = bool(stripped) and stripped[-1] in _SENTENCE_END
  return out


def compute(tok, documents: Sequence[str], max_documents: int) -> VocabStats:
  """Piece tables of `tok` and token counts over at most `max_documents` documents.

  When there are more documents, an evenly spaced sample of `max_documents` is counted (not
  the first ones, which may all be alike). Documents are encoded as the pipeline encodes
  them (lines joined by spaces), in batches.
  """
  v = len(tok)
  tables = piece_tables(tok.word_pieces(), tok.special_mask())
  n = len(documents)
  if n > max_documents:
    picked = [documents[i * n // max_documents] for i in range(max_documents)]
  else:
    picked = list(documents)
  counts = np.zeros(v, np.int64)
  for start in range(0, len(picked), _ENCODE_BATCH):
    texts = [d.replace("\n", " ") for d in picked[start:start + _ENCODE_BATCH]]
    flat = np.concatenate([np.asarray(ids, np.int64) for ids in tok.encode(texts)] + [[]])
    counts += np.bincount(flat.astype(np.int64), minlength=v)[:v]
  counts[:special_ids.NUM_SPECIAL] = 0
  return VocabStats(counts=counts, **tables)


def save(stats: VocabStats, path: str) -> None:
  """Writes `.npz` atomically: a crash never leaves a half-written file under `path`."""
  buf = io.BytesIO()
  np.savez(buf, version=np.int64(_FORMAT_VERSION),
           **{k.name: getattr(stats, k.name) for k in dataclasses.fields(VocabStats)})
  paths.write_atomic(path, buf.getvalue())  # per-process temporary: several hosts may write it


def load(path: str) -> VocabStats:
  try:
    with np.load(io.BytesIO(paths.read_bytes(path)), allow_pickle=False) as z:
      if "version" not in z or int(z["version"]) != _FORMAT_VERSION:
        raise VocabStatsError(f"{path}: not an mlmjax vocab stats file of format"
                              f" {_FORMAT_VERSION}; delete it to recompute it")
      fields = {k.name: z[k.name] for k in dataclasses.fields(VocabStats)}
  except (OSError, KeyError, ValueError) as e:
    if isinstance(e, VocabStatsError):
      raise
    raise VocabStatsError(f"{path}: unreadable vocab stats ({e}); delete it to recompute it"
                          ) from None
  return VocabStats(**fields)


def get_vocab_stats(tok, documents: Sequence[str], path: str, max_documents: int
                    ) -> VocabStats:
  """The run's stats: the file at `path` (the workdir's) if present, else computed and saved
  there.

  Like the tokenizer, the stats are computed once per run and reused on resume, so masks that
  depend on them (frequency, unigram replacement) never change under a run's feet.
  """
  if paths.exists(path):
    stats = load(path)
    if stats.vocab_size != len(tok):
      raise VocabStatsError(
          f"{path} has {stats.vocab_size} entries but the tokenizer has {len(tok)} pieces;"
          " it belongs to another tokenizer: delete it to recompute it")
    logging.info("Reusing vocab stats %s", path)
    return stats
  logging.info("Counting tokens of up to %d documents for vocab stats...", max_documents)
  stats = compute(tok, documents, max_documents)
  save(stats, path)
  logging.info("Saved vocab stats (%d tokens counted) to %s", int(stats.counts.sum()), path)
  return stats
