"""Vectorised building blocks of the masking strategies, on [R, T] numpy arrays.

Units are what a strategy selects whole: a word, a span, an entity. A unit is described by its
head column (where it starts) and its member columns; `greedy_units` takes whole units in a
random order while they fit the budget of their row. `Gazetteer` finds phrase occurrences by
hashing token windows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# splitmix64's constants: every random draw of masking is a hash of its coordinates.
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
  """splitmix64's finaliser: a bijective, well-avalanched scramble of uint64 values."""
  x = (x ^ (x >> np.uint64(30))) * M1
  x = (x ^ (x >> np.uint64(27))) * M2
  return x ^ (x >> np.uint64(31))

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


def shift_right(x: np.ndarray, fill) -> np.ndarray:
  out = np.empty_like(x)
  out[:, 0] = fill
  out[:, 1:] = x[:, :-1]
  return out


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
