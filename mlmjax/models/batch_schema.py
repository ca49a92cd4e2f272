"""The batch: every array the input hands the train and eval steps, with its shape and dtype,
written once. data/rows/packing.py makes the row arrays, the masker (data/masking/masker.py) the
prediction slots, `mlmjax.compile`'s abstract batch (training/planning/aot.py) is `shapes(...)`, and
the models read these keys (`require` checks them where a model is called). It lives in
models/, the bottom of the package, so that data/, training/ and the models all import it.

B rows, T tokens a row (data.seq_len), P prediction slots a row (masking.max_predictions_per_seq):

  input_ids           [B, T] int32    token ids; at the prediction slots [MASK], a random or the
                                      kept token
  token_type_ids      [B, T] int32    0 in a unit's first segment, 1 in its second (pairs)
  segment_ids         [B, T] int32    a row's units numbered 1, 2, ... (0: padding); attention
                                      never crosses them
  positions           [B, T] int32    each token's place in its unit (restarts at 0 in each)
  masked_positions    [B, P] int32    columns of the masked tokens, ascending; 0 in padding slots
  masked_ids          [B, P] int32    their original ids (0 in padding slots)
  masked_weights      [B, P] float32  1 for a real slot, 0 for a padding one
  nsp_labels          [B] int32       pair formats only (data/rows/formats.py): 1 when the second
                                      segment does not follow the first (NSP) or is swapped (SOP)
  masked_span_left    [B, P] int32    with the span-boundary objective only: the position just
                                      before the slot's unit,
  masked_span_right   [B, P] int32    the position just after it,
  masked_span_offset  [B, P] int32    and the slot's place in the unit
  masked_rates        [B, P] float32  with the diffusion objective only: the mask rate of the
                                      slot's document (data/masking/diffusion.py); 0 in padding
                                      slots

Three more row arrays exist on the host only, for the masker, and never reach the device:

  sequence_keys       [B, T] int64    static masking: each token's packed sequence,
                                      (document << 32) + chunk + 1
  epochs              [B, T] int32    static masking: its document's epoch key
  annotations         [B, T, F] int32 word features (data/text/annotation.py), when a strategy
                                      reads them (syntax, entity from NER)
"""

from __future__ import annotations

import numpy as np

_INT, _FLOAT, _INT64 = np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.int64)

# key -> (dimensions, dtype)
ROWS = {k: ("BT", _INT) for k in ("input_ids", "token_type_ids", "segment_ids", "positions")}
PREDICTIONS = {"masked_positions": ("BP", _INT), "masked_ids": ("BP", _INT),
               "masked_weights": ("BP", _FLOAT)}
PAIR_LABELS = {"nsp_labels": ("B", _INT)}
SPAN_BOUNDARIES = {k: ("BP", _INT)
                   for k in ("masked_span_left", "masked_span_right", "masked_span_offset")}
DIFFUSION_RATES = {"masked_rates": ("BP", _FLOAT)}
HOST_ONLY = {"sequence_keys": ("BT", _INT64), "epochs": ("BT", _INT),
             "annotations": ("BTF", _INT)}

# How a batch's prediction slots were masked: the tag an objective names (training/objectives/)
# and the input turns into its masker (data/run_input.py). MLM_MASKING: slots at the masking
# strategy's rate; DIFFUSION_MASKING: every token a possible slot, at a rate drawn per document
# (its batches carry DIFFUSION_RATES).
MLM_MASKING = "mlm"
DIFFUSION_MASKING = "diffusion"


def fields(pairs: bool, span_boundaries: bool,
           diffusion: bool = False) -> dict[str, tuple[str, np.dtype]]:
  """The device batch's keys -> (dimensions, dtype), for a format with pair labels or not, the
  span-boundary objective or not and the diffusion objective or not."""
  out = {**ROWS, **PREDICTIONS}
  if pairs:
    out.update(PAIR_LABELS)
  if span_boundaries:
    out.update(SPAN_BOUNDARIES)
  if diffusion:
    out.update(DIFFUSION_RATES)
  return out


def shapes(rows: int, seq_len: int, predictions: int, pairs: bool, span_boundaries: bool,
           diffusion: bool = False) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
  """The device batch's keys -> (shape, dtype)."""
  size = {"B": rows, "T": seq_len, "P": predictions}
  return {k: (tuple(size[d] for d in dims), dtype)
          for k, (dims, dtype) in fields(pairs, span_boundaries, diffusion).items()}


def require(batch, keys) -> None:
  """A model's check, at trace time, that `batch` holds the keys it reads (a KeyError deep in
  a traced step names one key and no producer)."""
  missing = [k for k in keys if k not in batch]
  if missing:
    raise KeyError(f"the batch lacks {missing} (models/batch_schema.py says what makes them);"
                   f" it has {sorted(batch)}")
