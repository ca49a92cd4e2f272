"""Host-side masking for MLM, vectorised in numpy over a whole batch.

Every random number is a counter-based hash of (seed, stream, step, global example index,
position), so the mask of an example is a pure function of those values: independent of the
batch it sits in, of the process that builds it, and of how the run was interrupted and
resumed. A fresh mask every step (RoBERTa's dynamic masking), reproducible bit for bit.

Strategy `random` (BERT): per row, choose k = min(max_predictions, max(1, round(rate * n)))
of its n maskable tokens (everything but [PAD]/[UNK]/[CLS]/[SEP]/[MASK]) uniformly without
replacement; replace 80% of them by [MASK], 10% by a uniformly random non-special token, keep
10%. The model is asked to predict the original token at every chosen position.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data import tokenizer as tokenizer_lib

# Independent random streams of one step. Eval uses its own seed offset (see pipeline.py).
_SELECT, _ACTION, _REPLACEMENT = 0, 1, 2

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
  """splitmix64's finaliser: a bijective, well-avalanched scramble of uint64 values."""
  x = (x ^ (x >> np.uint64(30))) * _M1
  x = (x ^ (x >> np.uint64(27))) * _M2
  return x ^ (x >> np.uint64(31))


def uniform(seed: int, stream: int, step: int, example_ids: np.ndarray,
            length: int) -> np.ndarray:
  """[len(example_ids), length] float64 uniforms in [0, 1), a pure function of the arguments."""
  with np.errstate(over="ignore"):  # uint64 arithmetic wraps on purpose
    key = _mix64(np.uint64(seed) * _GOLDEN + np.uint64(stream))
    key = _mix64(key ^ (np.uint64(step) * _M1))
    rows = _mix64(key ^ (example_ids.astype(np.uint64) * _M2))
    cols = np.arange(length, dtype=np.uint64) * _GOLDEN
    bits = _mix64(rows[:, None] + cols[None, :])
  return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def mask_batch(batch: dict[str, np.ndarray], *, seed: int, step: int, example_ids: np.ndarray,
               vocab_size: int, mask_rate: float, mask_token_prob: float,
               random_token_prob: float, max_predictions: int) -> dict[str, np.ndarray]:
  """Adds the MLM inputs/targets to a packed batch.

  Args:
    batch: at least `input_ids` [B, L] int32 (unmasked).
    example_ids: [B] global index of each row within the step's global batch.
  Returns:
    a new dict: `input_ids` with replacements applied, plus `masked_positions` [B, P] int32,
    `masked_ids` [B, P] int32 (the original tokens) and `masked_weights` [B, P] float32
    (1 for a real prediction, 0 for padding), P = max_predictions.
  """
  ids = batch["input_ids"]
  num_rows, length = ids.shape
  maskable = ids >= tokenizer_lib.NUM_SPECIAL
  n_maskable = maskable.sum(axis=1)
  k = np.minimum(max_predictions, np.maximum(1, np.floor(n_maskable * mask_rate + 0.5)))
  k = np.where(n_maskable > 0, k, 0).astype(np.int32)  # [B]

  # The k maskable positions with the smallest uniforms are a uniform sample without replacement.
  score = np.where(maskable, uniform(seed, _SELECT, step, example_ids, length), 2.0)
  chosen = np.argsort(score, axis=1, kind="stable")[:, :max_predictions]
  if chosen.shape[1] < max_predictions:  # rows shorter than P
    chosen = np.pad(chosen, ((0, 0), (0, max_predictions - chosen.shape[1])))
  # chosen: [B, P]
  valid = np.arange(max_predictions)[None, :] < k[:, None]
  # Ascending positions, padding last (sorting with `length` as the padding sentinel).
  positions = np.sort(np.where(valid, chosen, length), axis=1)
  valid = positions < length
  positions = np.where(valid, positions, 0).astype(np.int32)

  rows = np.arange(num_rows)[:, None]
  original = np.where(valid, ids[rows, positions], 0).astype(np.int32)
  action = uniform(seed, _ACTION, step, example_ids, length)[rows, positions]
  random_ids = tokenizer_lib.NUM_SPECIAL + np.floor(
      uniform(seed, _REPLACEMENT, step, example_ids, length)[rows, positions]
      * (vocab_size - tokenizer_lib.NUM_SPECIAL)).astype(np.int32)
  replacement = np.where(
      action < mask_token_prob, tokenizer_lib.MASK_ID,
      np.where(action < mask_token_prob + random_token_prob, random_ids, original))

  masked_ids = ids.copy()
  # Padding slots point at position 0 ([CLS]); writing only the valid ones leaves it alone.
  masked_ids[np.broadcast_to(rows, positions.shape)[valid], positions[valid]] = replacement[valid]
  out = dict(batch)
  out.update(
      input_ids=masked_ids,
      masked_positions=positions,
      masked_ids=original,
      masked_weights=valid.astype(np.float32),
  )
  return out
