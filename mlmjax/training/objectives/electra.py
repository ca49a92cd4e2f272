"""ELECTRA (Clark et al., 2020): replaced-token detection. A small generator (a second encoder,
objective.generator_fraction of the width) fills the masked slots with its own samples; the
discriminator tells, at every token, original from replaced (models/electra.py). The loss is
the generator's MLM loss plus objective.discriminator_weight x the discriminator's mean sigmoid
cross-entropy per token (the paper's 50).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mlmjax.errors import ConfigError
from mlmjax.models import electra
from mlmjax.training.core import losses
from mlmjax.training.objectives import base
from mlmjax.training.objectives import mlm


@base.register
class Electra(mlm.MaskedLM):
  """objective.kind='electra'."""

  name = "electra"
  in_phases = False  # its own model: a phase of another objective cannot switch to it
  hf_model_type = "electra"  # the discriminator, as ElectraForPreTraining
  sum_keys = mlm.MaskedLM.sum_keys + ("rtd_loss_sum", "rtd_count", "rtd_correct", "rtd_replaced",
                                      "rtd_predicted", "rtd_true_positive")

  def check(self, settings, pairs, phase_objectives) -> None:
    objective = settings.objective
    other = sorted(set(phase_objectives) - {self.name})
    if other:
      raise ConfigError(f"train.phases objective {other[0]!r} trains an encoder's own MLM head,"
                        " which objective.kind='electra' does not have: use"
                        " objective.kind='mlm'")
    if pairs or objective.span_boundary_weight:
      raise ConfigError(f"objective.kind='electra' trains no NSP/SOP or span-boundary head: use"
                        f" a single-sequence data.format (not {settings.data.format!r}) and"
                        " objective.span_boundary_weight=0")
    if objective.logits_chunk:
      raise ConfigError("objective.logits_chunk decodes the MLM head's slots in chunks; ELECTRA"
                        " reads whole logits: set it to 0")
    if objective.discriminator_weight <= 0:
      raise ConfigError("objective.discriminator_weight must be > 0")
    electra.generator_settings(settings.model, objective.generator_fraction)

  def model(self, model, objective, vocab_size, rngs, target, pairs) -> nnx.Module:
    return electra.ElectraForPretraining(model, objective.generator_fraction, vocab_size, rngs,
                                         target)

  def generator_fraction(self, objective) -> float | None:
    return objective.generator_fraction

  def global_counts(self, batch: dict) -> base.Sums:
    """MLM's, and the tokens the discriminator judges (not padding)."""
    return {**super().global_counts(batch),
            "rtd_count": jnp.sum((batch["segment_ids"] > 0).astype(jnp.float32))}

  def head_sums(self, outputs: dict, batch: dict) -> base.Sums:
    return losses.rtd_sums(outputs["rtd_logits"], outputs["rtd_labels"],
                           (batch["segment_ids"] > 0).astype(jnp.float32))

  def head_loss(self, sums, objective, loss) -> jax.Array:
    return loss + objective.discriminator_weight * sums["rtd_loss_sum"] / jnp.maximum(
        sums["rtd_count"], 1.0)

  def summarize(self, sums: dict[str, float]) -> dict[str, float]:
    """MLM's (the generator's), and the discriminator's loss, accuracy, precision and recall
    of 'replaced', and the fraction replaced."""
    ratio = lambda a, b: float(sums[a]) / max(float(sums[b]), 1.0)
    return {**super().summarize(sums),
            "rtd_loss": ratio("rtd_loss_sum", "rtd_count"),
            "rtd_accuracy": ratio("rtd_correct", "rtd_count"),
            "rtd_precision": ratio("rtd_true_positive", "rtd_predicted"),
            "rtd_recall": ratio("rtd_true_positive", "rtd_replaced"),
            "rtd_replaced_fraction": ratio("rtd_replaced", "rtd_count")}
