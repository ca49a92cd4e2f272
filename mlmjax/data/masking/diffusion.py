"""Masked diffusion's masks (objective.kind='diffusion', or a phase's): MLM at a mask rate t
drawn for every document, as MDLM (Sahoo et al., 2024) and LLaDA (Nie et al., 2025) train.

Each document (each packed sequence of a row) draws t in [min_rate, 1]; each of its maskable
tokens is then masked with probability t, on its own, and becomes [MASK] (the absorbing state:
no random or kept tokens, whatever masking.mask_token_prob says). The loss divides each target's
cross-entropy by its t for the variational bound (training/core/losses.py), so the masker hands t on
with every prediction slot.

  uniform          t = min_rate + (1 - min_rate) u, u uniform and independent per document.
  low_discrepancy  a batch's rates spread evenly over the range, so every batch covers low
                   and high rates alike (MDLM's low-discrepancy sampler stratifies [0, 1) into
                   one interval per row of the batch). Here rows take the Weyl sequence
                   v = frac(u0 + example id / golden ratio) from one uniform u0 of the step,
                   which spreads consecutive examples as evenly without knowing the batch size
                   or which host holds them, and the n documents of a row frac(v + k / n),
                   k = 0 .. n-1.

Every draw is a hash of (seed, step, example id, column) (uniforms.py), so resumed runs mask
exactly as uninterrupted ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlmjax.data.masking import uniforms
from mlmjax.models import special_ids

DISTRIBUTIONS = ("low_discrepancy", "uniform")
_INVERSE_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


@dataclasses.dataclass(frozen=True)
class Rates:
  """How documents draw their mask rate (masking.diffusion_rates, masking.diffusion_min_rate)."""

  distribution: str
  min_rate: float

  def of_documents(self, draws: uniforms.Draws, seg: np.ndarray) -> np.ndarray:
    """[R, T] float64: the rate of each token's document (0 on padding). seg: [R, T] segment
    ids, 1, 2, ... per packed sequence, 0 on padding."""
    num_rows, length = seg.shape
    if self.distribution == "uniform":
      u = draws.u(uniforms.DIFFUSION_RATE, length)  # column k: the rate of segment k
      per_segment = u
    else:
      u0 = uniforms.uniform(draws.seed, uniforms.DIFFUSION_RATE, draws.step,
                            np.zeros(1, np.int64), 1)[0, 0]
      v = np.mod(u0 + np.asarray(draws.example_ids, np.float64) * _INVERSE_GOLDEN, 1.0)
      documents = np.maximum(seg.max(axis=1), 1)  # segments are numbered 1 .. n
      k = np.arange(length)[None, :]
      per_segment = np.mod(v[:, None] + k / documents[:, None], 1.0)
    rate = self.min_rate + (1.0 - self.min_rate) * per_segment
    columns = np.maximum(seg - 1, 0)
    return np.where(seg > 0, np.take_along_axis(rate, columns, axis=1), 0.0)


def select(ids: np.ndarray, seg: np.ndarray, draws: uniforms.Draws,
           rates: np.ndarray) -> np.ndarray:
  """[R, T] bool: each maskable token masked with its document's rate, independently."""
  maskable = (ids >= special_ids.NUM_SPECIAL) & (seg > 0)
  return maskable & (draws.u(uniforms.SELECT, ids.shape[1]) < rates)
