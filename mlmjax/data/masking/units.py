"""Units are what a strategy selects whole: a word, a span, an entity. Vectorised over [R, T].

A unit is described by its head column (where it starts) and its member columns;
`greedy_units` takes whole units in a random order while they fit the budget of their row.

Words: a word starts at a piece that begins with U+2581, at a punctuation piece, at the piece
after a punctuation piece, and after any special token or packed-sequence boundary; it continues
through the following pieces. So punctuation is always a word of its own (as BERT's
BasicTokenizer splits it): "don't" is [don]['][t], "God," is [God][,]. A piece that is exactly
"▁" starts the word of the pieces after it. Words never cross a special token or a
packed-sequence boundary.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.models import special_ids


def budget(num_maskable, mask_rate: float, max_predictions: int):
  """Tokens to mask in a row (or static sequence) with `num_maskable` maskable tokens:
  round-half-up(mask_rate * n), at least 1 (BERT), 0 for an empty row, at most
  max_predictions. The one formula of the masker, the phases and the config check (which ask
  it about a full row)."""
  n = np.asarray(num_maskable)
  want = np.where(n > 0, np.maximum(1, np.floor(n * mask_rate + 0.5)), 0).astype(np.int64)
  return np.minimum(want, max_predictions), want


def shift_right(x: np.ndarray, fill) -> np.ndarray:
  out = np.empty_like(x)
  out[:, 0] = fill
  out[:, 1:] = x[:, :-1]
  return out


def word_starts(ids: np.ndarray, seg: np.ndarray, maskable: np.ndarray,
                stats: vocab_stats_lib.VocabStats) -> np.ndarray:
  """[R, T] bool: the maskable tokens that start a word (module docstring)."""
  prev_ids = shift_right(ids, special_ids.PAD_ID)
  starts = (stats.word_start[ids] | stats.punctuation[prev_ids]
            | ~shift_right(maskable, False) | (seg != shift_right(seg, -1)))
  return starts & maskable


def head_cols(heads: np.ndarray) -> np.ndarray:
  """Column of the last head at or before each column (-1 if none)."""
  return np.maximum.accumulate(np.where(heads, np.arange(heads.shape[1]), -1), axis=1)


def unit_sizes(head_col: np.ndarray, member: np.ndarray) -> np.ndarray:
  """[R, T]: at a head's column, the number of member tokens whose head it is."""
  num_rows, length = head_col.shape
  ok = member & (head_col >= 0)
  flat = (np.arange(num_rows)[:, None] * length + head_col)[ok]
  return np.bincount(flat, minlength=num_rows * length).reshape(num_rows, length)


def expand(accepted_heads: np.ndarray, head_col: np.ndarray, member: np.ndarray) -> np.ndarray:
  """Tokens whose unit head was accepted."""
  return member & (head_col >= 0) & np.take_along_axis(
      accepted_heads, np.maximum(head_col, 0), axis=1)


def greedy_units(score, heads, sizes, budget) -> np.ndarray:
  """Units in ascending score; each is taken if it fits in what is left of the budget, else
  skipped (BERT's whole-word rule). +inf score = never. -> accepted heads [R, T] bool.

  Vectorised in rounds: each round takes the longest fitting prefix and drops every unit that
  no longer fits; the size of the unit that stops a round strictly decreases from round to
  round, so there are at most (largest unit size) rounds.
  """
  key = np.where(heads, score, np.inf)
  order = np.argsort(key, axis=1, kind="stable")
  s = np.take_along_axis(np.where(heads, sizes, 0), order, axis=1)
  valid = np.take_along_axis(key, order, axis=1) < np.inf
  remaining = np.asarray(budget, np.int64).copy()
  active = valid & (s <= remaining[:, None])
  taken = np.zeros_like(active)
  while active.any():
    cs = np.cumsum(np.where(active, s, 0), axis=1)
    take = active & (cs <= remaining[:, None])
    taken |= take
    remaining -= np.where(take, s, 0).sum(axis=1)
    active &= ~take & (s <= remaining[:, None])
  accepted = np.zeros_like(taken)
  np.put_along_axis(accepted, order, taken, axis=1)
  return accepted
