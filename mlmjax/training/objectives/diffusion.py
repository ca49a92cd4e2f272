"""Masked diffusion (MDLM, Sahoo et al. 2024; LLaDA, Nie et al. 2025): MLM whose mask rate is
drawn per document, every token of a row a possible slot (data/masking/diffusion.py masks).

With objective.diffusion_loss='inverse_rate' the loss is the variational bound on the negative
log-likelihood per maskable token (each target's cross-entropy over its document's rate:
losses.diffusion_bound_sum), in place of MLM's mean; with 'plain', MLM's mean per target. The
heads' terms (NSP/SOP, span boundary) add as in MLM.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mlmjax.training.core import losses
from mlmjax.training.objectives import base
from mlmjax.training.objectives import mlm


@base.register
class Diffusion(mlm.MaskedLM):
  """objective.kind='diffusion', or a phase's {"objective": "diffusion"}."""

  name = "diffusion"
  masker = base.DIFFUSION_MASKER
  bound_samples = 4  # mlmjax.evaluate scores the bound of a run that ends in diffusion

  def slots(self, seq_len: int, slots: int) -> int:
    return seq_len  # up to every token of a row is masked

  def global_counts(self, batch: dict) -> base.Sums:
    """MLM's, and the tokens the masker could have masked (the bound's denominator)."""
    return {**super().global_counts(batch),
            "diffusion_token_count": losses.maskable_tokens(batch)}

  def main_loss(self, sums, objective, mlm_count) -> jax.Array:
    if objective.diffusion_loss == "inverse_rate":
      return sums["diffusion_bound_sum"] / jnp.maximum(sums["diffusion_token_count"], 1.0)
    return super().main_loss(sums, objective, mlm_count)
