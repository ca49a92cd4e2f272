"""Entity spans for the `entity` strategy (ERNIE-style): a gazetteer and/or a heuristic.

Gazetteer: one phrase per line, encoded like a document and matched on token ids,
case-sensitively, where the ids start at a word start and end at a word end inside one
sequence. A phrase starts with "▁", so an occurrence tokenised differently (glued to a
preceding quote or bracket, or split by sentencepiece's segmentation of an unusual context) is
missed.

Heuristic (`masking.entity_heuristic`): maximal runs of >= 2 adjacent capitalised words (first
letter uppercase; a leading bare "▁" piece is looked through) in one sequence, after dropping a
run's first word when it starts a sentence: it is the sequence's first word, follows a special
token (e.g. [UNK]), or, looking left past punctuation other than . ! ?, follows a sentence end.
Catches "LORD God" in "the LORD God", "Simon Peter" in "Then Simon Peter went", "New York" in
"to New York". Misses single-word names ("Moses"), names at a sentence start ("New York is
big." -> only "York" remains: not a run), names broken by lowercase words or punctuation
("Kingdom of Heaven" is two single words, "Beth-el" is [Beth][-][el]), lowercase-initial names
("iPhone"), and function words of names ("the" in "the LORD"). Wrongly catches capitalised
titles and headings, "I" before a name ("and I Daniel"), a capitalised word after a comma or
colon followed by a name ("said, Behold Jesus Christ"), and takes an abbreviation's period for
a sentence end ("Mr. John Smith": only "Smith" remains, so the name is missed).

Overlapping spans of both merge into one.
"""

from __future__ import annotations

from collections.abc import Sequence

from absl import logging
import numpy as np

from mlmjax import errors
from mlmjax import paths
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import units
from mlmjax.data.masking.uniforms import M1, mix64
from mlmjax.models import special_ids


class Gazetteer:
  """Phrases grouped by length, with sorted 64-bit hashes for vectorised window lookup."""

  def __init__(self, phrases: Sequence[np.ndarray]):
    self.tables = []  # (length, sorted hashes [n], phrases in the same order [n, length])
    by_len: dict[int, list[np.ndarray]] = {}
    for p in phrases:
      by_len.setdefault(len(p), []).append(np.asarray(p, np.int64))
    for length, group in sorted(by_len.items()):
      rows = np.unique(np.stack(group), axis=0)
      h = self._hash(rows, length)[:, 0]
      order = np.argsort(h, kind="stable")
      self.tables.append((length, h[order], rows[order]))

  @staticmethod
  def _hash(windows_of: np.ndarray, length: int) -> np.ndarray:
    """windows_of[..., s + j] for j < length -> polynomial hash of each window start s."""
    n = windows_of.shape[-1] - length + 1
    h = np.zeros(windows_of.shape[:-1] + (n,), np.uint64)
    with np.errstate(over="ignore"):
      for j in range(length):
        h = h * M1 + windows_of[..., j:j + n].astype(np.uint64)
      return mix64(h)

  def matches(self, ids, seg, starts, maskable):
    """-> (covered, linked) [R, T] bool: tokens inside a match; token joined to its left one."""
    num_rows, length_t = ids.shape
    covered = np.zeros(ids.shape, bool)
    linked = np.zeros(ids.shape, bool)
    word_end = np.ones((num_rows, length_t + 1), bool)  # a match may end before column c
    word_end[:, 1:length_t] = starts[:, 1:] | ~maskable[:, 1:]
    for length, hashes, phrases in self.tables:
      if length > length_t:
        break
      h = self._hash(ids, length)  # [R, S]
      n = h.shape[1]
      idx = np.minimum(np.searchsorted(hashes, h), len(hashes) - 1)
      cand = hashes[idx] == h
      if not cand.any():
        continue
      windows = np.lib.stride_tricks.sliding_window_view(ids, length, axis=1)  # [R, S, L]
      m = cand & np.all(windows == phrases[idx], axis=-1)
      m &= starts[:, :n] & word_end[:, length:length + n]
      m &= seg[:, :n] == seg[:, length - 1:length - 1 + n]
      for j in range(length):
        covered[:, j:j + n] |= m
        if j:
          linked[:, j:j + n] |= m
    return covered, linked


def load_gazetteer(path: str, tok: tokenizer_lib.Tokenizer) -> Gazetteer:
  """One phrase per line (blank lines skipped), encoded like documents. The file's existence
  and non-emptiness are config rules (config_check.py); phrases whose encoding contains [UNK]
  can never match a maskable span and are dropped."""
  text = paths.read_bytes(path).decode("utf-8", "replace")
  phrases = [line.strip() for line in text.split("\n") if line.strip()]
  encoded = [np.asarray(ids, np.int32) for ids in tok.encode(phrases)]
  kept = [ids for ids in encoded if len(ids) and ids.min() >= special_ids.NUM_SPECIAL]
  if len(kept) < len(encoded):
    logging.warning("masking.entity_gazetteer: %d of %d phrases contain unknown characters"
                    " and can never match; dropped", len(encoded) - len(kept), len(encoded))
  if not kept:
    raise errors.DataError(
        f"masking.entity_gazetteer: no phrase of {path!r} is representable by the tokenizer")
  return Gazetteer(kept)


def _capitalized_runs(ids, seg, maskable, starts, stats: vocab_stats_lib.VocabStats):
  num_rows, length = ids.shape
  r = np.arange(num_rows)[:, None]
  word_col = units.head_cols(starts)
  head = np.maximum(word_col, 0)
  nxt = np.minimum(head + 1, length - 1)
  first, second = ids[r, head], ids[r, nxt]
  second_ok = (head + 1 < length) & maskable[r, nxt] & ~starts[r, nxt]
  cap_word = stats.capitalized[first] | (
      stats.space_only[first] & second_ok & stats.capitalized[second])
  # Sentence-initial heads: looking left past punctuation other than . ! ?, the first token is
  # a sentence end, a special/padding token, another segment, or the row start.
  anchor = ~maskable | ~stats.punctuation[ids] | stats.sentence_end[ids]
  prev = units.shift_right(units.head_cols(anchor), -1)
  p = np.maximum(prev, 0)
  initial = ((prev < 0) | ~maskable[r, p] | stats.sentence_end[ids[r, p]] | (seg[r, p] != seg))
  eligible = maskable & (word_col >= 0) & cap_word & ~initial[r, head]
  linked = eligible & units.shift_right(eligible, False) & (seg == units.shift_right(seg, -1))
  run_col = units.head_cols(eligible & ~linked)
  words = units.unit_sizes(run_col, eligible & starts)  # words per run, at the run's head
  covered = eligible & (np.take_along_axis(words, np.maximum(run_col, 0), axis=1) >= 2)
  return covered, linked & covered


def entity_spans(ids, seg, maskable, starts, stats: vocab_stats_lib.VocabStats,
                 gazetteer: Gazetteer | None, heuristic: bool):
  """-> covered, linked [R, T]: entity tokens, and tokens in the same entity as their left."""
  covered = np.zeros(ids.shape, bool)
  linked = np.zeros(ids.shape, bool)
  if gazetteer is not None:
    covered, linked = gazetteer.matches(ids, seg, starts, maskable)
  if heuristic:
    c, l = _capitalized_runs(ids, seg, maskable, starts, stats)
    covered |= c
    linked |= l
  return covered, linked
