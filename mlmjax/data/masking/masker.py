"""The masker: turns packed batches into MLM batches with the configured strategy.

It composes the base strategies (strategies.py) into the two composite ones and applies the
replacement:

  mixture   per example, one base strategy drawn with the weights of `masking.mixture` from
            (seed, step, example id).
  static    BERT's original data: `dupe_factor` fixed masks per packed sequence, cycled by
            epoch (the mask of epoch e is that of epoch e % dupe_factor), made by
            `static_strategy` on each sequence alone. The budget is per sequence, not per row,
            so a sequence gets the same mask wherever it is packed; a row of several sequences
            may thus get a few more or fewer predictions than a dynamic row. If a row's
            sequences together want more than max_predictions_per_seq, whole units (tokens,
            words, spans) are dropped in a static random order until they fit: only then does a
            mask depend on its row.
  diffusion each token masked alone at its document's own rate, always by [MASK]
            (diffusion.py): the objective of masked diffusion, whatever the strategy.
  replacement  each selected token becomes [MASK] with probability mask_token_prob, a random
            non-special token with random_token_prob, else stays; decided per token, or per
            span for `span`. `replacement='uniform'` draws the random token uniformly,
            `'unigram'` by its corpus count (never-seen tokens are never drawn).

A warning is logged once if many rows want more than max_predictions_per_seq (the cap then
lowers the effective rate).
"""

from __future__ import annotations

from typing import Callable

from absl import logging
import numpy as np

from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import cooccurrence as cooccurrence_lib
from mlmjax.data.masking import diffusion as diffusion_lib
from mlmjax.data.masking import entities
from mlmjax.data.masking import rate_schedule
from mlmjax.data.masking import settings as settings_lib
from mlmjax.data.masking import strategies
from mlmjax.data.masking import uniforms
from mlmjax.data.masking import units
from mlmjax.models import special_ids

NS = special_ids.NUM_SPECIAL
_WARN_MIN_ROWS, _WARN_FRACTION = 256, 0.05
_STATIC_KEYS = ("segment_ids", "positions", "sequence_keys", "epochs")


class Masker:
  """Picklable (grain may copy it into worker processes).

  Batch keys: `input_ids` always; `segment_ids` when present (else every non-[PAD] token is one
  segment); `static` also needs `positions`, `sequence_keys`, `epochs` (data/rows/formats.py). Other
  keys pass through unchanged.
  """

  def __init__(self, settings: settings_lib.Settings, stats: vocab_stats_lib.VocabStats,
               gazetteer: entities.Gazetteer | None = None,
               token_weights: Callable[[int], np.ndarray | None] | None = None,
               span_boundaries: bool = False,
               mask_rates: rate_schedule.RateSchedule | None = None,
               cooccurrence: cooccurrence_lib.Cooccurrence | None = None,
               diffusion: diffusion_lib.Rates | None = None):
    """`settings`: the masking.* keys (settings.py).
    `token_weights(step)`: adaptive masking's weight table in force at that step.
    `span_boundaries`: also say where each masked slot's unit (span, word, entity, or the
    token itself) begins and ends, for SpanBERT's span-boundary objective.
    `mask_rates`: the rate as a function of the step (masking.mask_rate_schedule); None:
    masking.mask_rate at every step. Static masks are fixed, so they keep masking.mask_rate.
    `cooccurrence`: the word statistics of `semantic` and `contextual` (cooccurrence.py).
    `diffusion`: mask as masked diffusion does, at per-document rates drawn so (diffusion.py),
    and hand each slot's rate on (`DIFFUSION_RATES`); None: the strategy at the mask rate."""
    self.settings = settings
    self.diffusion = diffusion
    self.mask_rates = mask_rates
    self.span_boundaries = span_boundaries
    self._ctx = strategies.Context(self.settings, stats, gazetteer,
                                   token_weights or strategies.no_weights, cooccurrence)
    self._vocab_size = stats.vocab_size
    tail = np.cumsum(np.asarray(stats.counts, np.float64)[NS:])
    self._unigram_cdf = tail if tail[-1] > 0 else None
    self._rows_seen = self._rows_truncated = 0
    self._warned = False

  def __call__(self, batch: dict[str, np.ndarray], *, seed: int, step: int,
               example_ids: np.ndarray) -> dict[str, np.ndarray]:
    """-> a new dict: masked `input_ids`, plus the prediction slots of
    models/batch_schema.py (`PREDICTIONS`; P = max_predictions_per_seq) and, with
    `span_boundaries`, its `SPAN_BOUNDARIES`; with `diffusion`, its `DIFFUSION_RATES`."""
    ids = np.asarray(batch["input_ids"])
    example_ids = np.asarray(example_ids)
    s = self.settings
    rates = None
    if self.diffusion is not None:
      selected, new_ids, head_col, rates = self._diffuse(batch, seed, step, example_ids)
      want = selected.sum(axis=1)
    elif s.strategy == "mixture":
      selected, new_ids = np.zeros(ids.shape, bool), ids.copy()
      head_col = np.zeros(ids.shape, np.int64)
      want = np.zeros(len(ids), np.int64)
      cum = np.cumsum([w for _, w in s.mixture_weights])
      u = uniforms.uniform(seed, uniforms.MIXTURE, step, example_ids, 1)[:, 0]
      choice = np.minimum(np.searchsorted(cum, u, side="right"), len(cum) - 1)
      for i, (name, _) in enumerate(s.mixture_weights):
        rows = np.nonzero(choice == i)[0]
        if len(rows):
          sub = {k: np.asarray(v)[rows] for k, v in batch.items() if _is_row_array(v, ids)}
          selected[rows], new_ids[rows], head_col[rows], want[rows] = self._mask_rows(
              name, sub, seed, step, example_ids[rows])
    else:
      selected, new_ids, head_col, want = self._mask_rows(s.strategy, batch, seed, step,
                                                          example_ids)
    self._note_truncation(want)
    out = _outputs(batch, ids, new_ids, selected, s.max_predictions_per_seq)
    if self.span_boundaries:
      out.update(_span_boundaries(selected, head_col, out["masked_positions"],
                                  out["masked_weights"]))
    if rates is not None:
      slot_rates = np.take_along_axis(rates, out["masked_positions"], axis=1)
      out["masked_rates"] = np.where(out["masked_weights"] > 0, slot_rates, 0.0).astype(
          np.float32)
    return out

  def _diffuse(self, batch, seed, step, example_ids):
    """-> selected [R, T], input ids with [MASK] at them, each token its own unit, and each
    token's document rate [R, T]."""
    ids = np.asarray(batch["input_ids"])
    seg = _segments(batch, ids)
    draws = uniforms.Draws(seed, step, example_ids)
    rates = self.diffusion.of_documents(draws, seg)
    selected = diffusion_lib.select(ids, seg, draws, rates)
    new_ids = np.where(selected, special_ids.MASK_ID, ids).astype(ids.dtype)
    return selected, new_ids, np.broadcast_to(np.arange(ids.shape[1]), ids.shape), rates

  def _mask_rows(self, strategy, batch, seed, step, example_ids):
    """-> selected [R, T], new input ids [R, T], unit head column [R, T] (valid where
    selected), wanted count before the cap [R]."""
    if strategy == "static":
      return self._static(batch, seed)
    ids = np.asarray(batch["input_ids"])
    seg = _segments(batch, ids)
    rate = self.settings.mask_rate if self.mask_rates is None else self.mask_rates.at(step)
    rows = strategies.Rows.make(ids, seg, uniforms.Draws(seed, step, example_ids), rate,
                                self.settings.max_predictions_per_seq,
                                batch.get("annotations"))
    sel = strategies.SELECTORS[strategy](rows, self._ctx)
    return sel.selected, self._replace(rows, sel), sel.head_col, rows.want

  def _static(self, batch, seed):
    """Masks each packed sequence alone (placed at columns = its positions), keyed by
    (sequence key, epoch % dupe_factor), then maps back and truncates rows to the cap."""
    missing = [k for k in _STATIC_KEYS if k not in batch]
    if missing:
      raise ValueError(f"masking.strategy='static' needs batch keys {missing}")
    s = self.settings
    ids = np.asarray(batch["input_ids"])
    seg = np.asarray(batch["segment_ids"])
    pos = np.asarray(batch["positions"]).astype(np.int64)
    num_rows, length = ids.shape
    tok = seg > 0
    tr, tc = np.nonzero(tok)
    _, inv = np.unique(tr * (int(seg.max()) + 1) + seg[tok], return_inverse=True)
    inv = inv.reshape(-1)
    nv = int(inv.max()) + 1 if len(inv) else 0  # sequences in the batch
    vpos = pos[tok]
    vids = np.zeros((nv, length), ids.dtype)
    vids[inv, vpos] = ids[tok]
    vseg = np.zeros((nv, length), np.int32)
    vseg[inv, vpos] = 1
    keys = np.zeros(nv, np.uint64)
    keys[inv] = np.asarray(batch["sequence_keys"])[tok].astype(np.uint64)
    dupes = np.zeros(nv, np.int64)
    dupes[inv] = np.asarray(batch["epochs"])[tok].astype(np.int64) % s.dupe_factor
    vann = None
    if "annotations" in batch:
      ann = np.asarray(batch["annotations"])
      vann = np.zeros((nv, length, ann.shape[-1]), ann.dtype)
      vann[inv, vpos] = ann[tok]
    vrows = strategies.Rows.make(vids, vseg, uniforms.Draws(seed, sequence_keys=keys,
                                                            dupes=dupes),
                                 s.mask_rate, s.max_predictions_per_seq, vann)
    if nv == 0:  # a batch of padding only
      return (np.zeros(ids.shape, bool), ids.copy(), np.zeros(ids.shape, np.int64),
              np.zeros(num_rows, np.int64))
    vsel = strategies.SELECTORS[s.static_strategy](vrows, self._ctx)
    vnew = self._replace(vrows, vsel)
    selected = np.zeros(ids.shape, bool)
    selected[tok] = vsel.selected[inv, vpos]
    new_ids = ids.copy()
    new_ids[tok] = vnew[inv, vpos]
    head_col = np.full(ids.shape, -1, np.int64)
    head_col[tok] = tc - vpos + vsel.head_col[inv, vpos]
    trunc_score = np.ones(ids.shape)
    trunc_score[tok] = vrows.draws.u(uniforms.TRUNCATE, length)[
        inv, vsel.head_col[inv, vpos].clip(0)]
    seq_row = np.zeros(nv, np.int64)
    seq_row[inv] = tr
    want = np.bincount(seq_row, weights=vrows.budget, minlength=num_rows)  # per-sequence budgets
    over = np.nonzero(selected.sum(axis=1) > s.max_predictions_per_seq)[0]
    if len(over):
      sel_o, hc_o = selected[over], np.where(selected[over], head_col[over], -1)
      heads = sel_o & (hc_o == np.arange(length))
      sizes = units.unit_sizes(hc_o, sel_o)
      accepted = units.greedy_units(trunc_score[over], heads, sizes,
                                    np.full(len(over), s.max_predictions_per_seq))
      selected[over] = units.expand(accepted, hc_o, sel_o)
      new_ids = np.where(selected, new_ids, ids)
    return selected, new_ids, head_col, want.astype(np.int64)

  def _replace(self, rows: strategies.Rows, sel: strategies.Selection) -> np.ndarray:
    """Input ids with the 80/10/10 replacement applied at the selected tokens."""
    ids = rows.ids
    length = ids.shape[1]
    action = rows.draws.u(uniforms.ACTION, length)
    if sel.per_unit_decision:
      action = np.take_along_axis(action, np.maximum(sel.head_col, 0), axis=1)
    u = rows.draws.u(uniforms.REPLACEMENT, length)
    if self.settings.replacement == "unigram":
      cdf = self._unigram_cdf
      random_ids = NS + np.searchsorted(cdf, u * cdf[-1], side="right")
    else:
      random_ids = NS + np.floor(u * (self._vocab_size - NS)).astype(np.int64)
    pm, pr = self.settings.mask_token_prob, self.settings.random_token_prob
    replacement = np.where(action < pm, special_ids.MASK_ID,
                           np.where(action < pm + pr, random_ids, ids))
    return np.where(sel.selected, replacement, ids).astype(ids.dtype)

  def _note_truncation(self, want: np.ndarray) -> None:
    self._rows_seen += len(want)
    self._rows_truncated += int(np.sum(want > self.settings.max_predictions_per_seq))
    if (not self._warned and self._rows_seen >= _WARN_MIN_ROWS
        and self._rows_truncated > _WARN_FRACTION * self._rows_seen):
      self._warned = True
      logging.warning(
          "masking: %.0f%% of rows want more than masking.max_predictions_per_seq=%d"
          " predictions at mask_rate=%g and are capped, lowering the effective rate; raise"
          " max_predictions_per_seq to about mask_rate * data.seq_len",
          100.0 * self._rows_truncated / self._rows_seen, self.settings.max_predictions_per_seq,
          self.settings.mask_rate)


def _segments(batch, ids) -> np.ndarray:
  """The rows' segment ids; without them every non-[PAD] token is one segment."""
  seg = batch.get("segment_ids")
  return (ids != special_ids.PAD_ID).astype(np.int32) if seg is None else np.asarray(seg)


def _is_row_array(v, ids) -> bool:
  return isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == ids.shape[0]


def _outputs(batch, ids, new_ids, selected, max_predictions) -> dict[str, np.ndarray]:
  num_rows, _ = ids.shape
  order = np.argsort(~selected, axis=1, kind="stable")[:, :max_predictions]  # selected first
  if order.shape[1] < max_predictions:  # rows shorter than P
    order = np.pad(order, ((0, 0), (0, max_predictions - order.shape[1])))
  valid = np.arange(max_predictions)[None, :] < selected.sum(axis=1)[:, None]
  positions = np.where(valid, order, 0).astype(np.int32)
  original = np.where(valid, ids[np.arange(num_rows)[:, None], positions], 0).astype(np.int32)
  out = dict(batch)
  out.update(input_ids=new_ids.astype(np.int32), masked_positions=positions,
             masked_ids=original, masked_weights=valid.astype(np.float32))
  return out


def _span_boundaries(selected, head_col, positions, weights) -> dict[str, np.ndarray]:
  """For each masked slot: the positions just before and after its unit (the selected tokens
  sharing its head), clipped to the row, and its offset in the unit; 0 in padding slots."""
  num_rows, length = selected.shape
  rows, cols = np.nonzero(selected)
  end = np.zeros((num_rows, length), np.int64)
  np.maximum.at(end, (rows, head_col[rows, cols]), cols)
  r = np.arange(num_rows)[:, None]
  head = np.maximum(head_col[r, positions], 0)
  valid = weights > 0
  out = {"masked_span_left": np.maximum(head - 1, 0),
         "masked_span_right": np.minimum(end[r, head] + 1, length - 1),
         "masked_span_offset": positions - head}
  return {k: np.where(valid, v, 0).astype(np.int32) for k, v in out.items()}
