"""SpanBERT's span selection (Joshi et al., 2020), vectorised over rows.

Repeatedly, until the row's budget is met: draw a length L in words from Geometric(span_p)
truncated to 1..span_max_words and renormalised, as SpanBERT's code does (p = 0.2, 10 words:
mean 3.8 words, the paper's figure; clipping min(L, 10) would give 4.5); place the span
uniformly among every placement of L consecutive words that overlaps a run of free (not yet
selected) words of one sequence, and truncate it to that run. The last span is cut at the
budget, possibly inside a word (as SpanBERT does), so rows get exactly their budget. Spans never
overlap or cross a special token or sequence boundary. One 80/10/10 decision per span.

Placement. SpanBERT anchors a span uniformly and truncates it at the right boundary; a span
that must fit whole (this module's first version) can never end at a sequence's last word
unless it starts exactly L - 1 words before, and starting-only-inside placements leave the first
word covered only when anchored there: both under-mask the ends of every sequence. Counting the
placements that start up to L - 1 words before a run too gives every word of a free run the
same chance, L / (run length + L - 1), of being covered by a span.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data.masking import uniforms
from mlmjax.data.masking import units


def length_cdf(span_p: float, span_max_words: int) -> np.ndarray:
  """[span_max_words] CDF of the span length in words (truncated geometric, renormalised)."""
  lens = np.arange(1, span_max_words + 1)
  pmf = span_p * (1.0 - span_p) ** (lens - 1)
  cdf = np.cumsum(pmf / pmf.sum())
  cdf[-1] = 1.0
  return cdf


def draw_lengths(u: np.ndarray, cdf: np.ndarray) -> np.ndarray:
  """Uniforms -> span lengths in words, 1..len(cdf)."""
  return 1 + np.searchsorted(cdf, u, side="right")


def select(ids, seg, maskable, starts, budget, draws: uniforms.Draws, cdf: np.ndarray):
  """-> (selected [R, T], head_col [R, T]: the column where each token's span starts)."""
  num_rows, length = ids.shape
  r = np.arange(num_rows)[:, None]
  n_words = starts.sum(axis=1)
  nw = max(int(n_words.max()), 1)
  wcol = np.argsort(~starts, axis=1, kind="stable")[:, :nw]  # start column of each word
  wvalid = np.arange(nw) < n_words[:, None]
  widx = np.cumsum(starts, axis=1) - 1
  member = maskable & (widx >= 0)
  size = np.bincount((r * nw + widx)[member], minlength=num_rows * nw).reshape(num_rows, nw)
  wseg = np.take_along_axis(seg, wcol, axis=1)
  link = np.zeros((num_rows, nw), bool)  # word w+1 directly continues word w
  link[:, :-1] = (wvalid[:, 1:] & (wcol[:, :-1] + size[:, :-1] == wcol[:, 1:])
                  & (wseg[:, :-1] == wseg[:, 1:]))
  free = wvalid.copy()
  remaining = np.asarray(budget, np.int64).copy()
  rounds = max(int(remaining.max()), 1)
  u_len = draws.u(uniforms.SPAN_LENGTH, rounds)
  u_anchor = draws.u(uniforms.SPAN_ANCHOR, rounds)
  words = np.arange(nw)
  j = np.arange(len(cdf))
  diff = np.zeros((num_rows, length + 1), np.int32)
  span_head = np.zeros((num_rows, length), bool)
  for k in range(rounds):
    cont = np.zeros_like(free)  # free word w continues into free word w + 1
    cont[:, :-1] = free[:, :-1] & link[:, :-1] & free[:, 1:]
    run_start = free & ~units.shift_right(cont, False)
    run_end = np.minimum.accumulate(np.where(cont, nw, words)[:, ::-1], axis=1)[:, ::-1]
    run_len = np.where(run_start, run_end - words + 1, 0)
    active = (remaining > 0) & run_start.any(axis=1)
    if not active.any():
      break
    span_len = draw_lengths(u_len[:, k], cdf)
    # Placements per run: its length + L - 1 (spans may start up to L - 1 words before it).
    places = np.where(run_start, run_len + span_len[:, None] - 1, 0)
    cum = np.cumsum(places, axis=1)
    pick = np.floor(u_anchor[:, k] * np.maximum(cum[:, -1], 1)).astype(np.int64)
    run = np.argmax(cum > pick[:, None], axis=1)  # the run's first word
    offset = pick - (cum[np.arange(num_rows), run] - places[np.arange(num_rows), run])
    first = np.maximum(run, run + offset - (span_len - 1))  # truncated to the run
    last = np.minimum(run + offset, run_end[np.arange(num_rows), run])
    in_span = j[None, :] <= (last - first)[:, None]
    wj = np.minimum(first[:, None] + j, nw - 1)
    sz = np.where(in_span, size[r, wj], 0)
    cum_sz = np.cumsum(sz, axis=1)
    take = np.where(active, np.minimum(cum_sz[:, -1], remaining), 0)
    touched = in_span & (cum_sz - sz < take[:, None])
    remaining -= take
    tr, tj = np.nonzero(touched)
    free[tr, first[tr] + tj] = False
    act = np.nonzero(take > 0)[0]
    start = wcol[act, first[act]]
    np.add.at(diff, (act, start), 1)
    np.add.at(diff, (act, start + take[act]), -1)
    span_head[act, start] = True
  selected = (np.cumsum(diff, axis=1)[:, :length] > 0) & maskable
  return selected, units.head_cols(span_head)
