"""Masked LM (BERT, RoBERTa), with BERT's NSP/SOP head where the data format carries pair
labels and SpanBERT's span-boundary head with objective.span_boundary_weight > 0.

The loss is the mean cross-entropy per masked token of the global batch, plus the mean NSP/SOP
cross-entropy per row (BERT's sum), plus span_boundary_weight x the mean span-boundary
cross-entropy. Its held-out sums also count the slots whose input really was [MASK], and, for
rows masked as diffusion masks them (a `masked_rates` key), the diffusion bound: any run can be
scored on it (mlmjax.evaluate --bound_samples). ELECTRA and diffusion build on this class.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from mlmjax.training.core import losses
from mlmjax.training.core import steps
from mlmjax.training.objectives import base
from mlmjax.training.settings import ObjectiveSettings

Sums = base.Sums


@base.register
class MaskedLM(base.Objective):
  """objective.kind='mlm'."""

  name = "mlm"
  sum_keys = ("mlm_loss_sum", "mlm_correct", "mlm_count", "nsp_loss_sum", "nsp_correct",
              "nsp_count", "mask_token_correct", "mask_token_count", "sbo_loss_sum",
              "sbo_correct", "diffusion_bound_sum", "diffusion_token_count")

  def step(self, objective: ObjectiveSettings, per_token_loss: bool = False) -> steps.Objective:
    """With objective.logits_chunk the model stops before its decoder and the loss decodes
    that many slots at a time (losses.chunked_sums)."""
    chunk = objective.logits_chunk

    def sums(outputs: dict, batch: dict) -> Sums:
      if chunk:
        return self.chunked_sums(outputs, batch, chunk, per_token_loss)
      out = self.sums(outputs, batch)
      if per_token_loss:
        out.update(losses.per_token_sums(outputs["mlm_logits"], batch["masked_ids"],
                                         batch["masked_weights"]))
      return out

    return steps.Objective(self.global_counts, sums, lambda s: self.loss(s, objective),
                           outputs="masked_features" if chunk else "__call__")

  def global_counts(self, batch: dict) -> Sums:
    """The loss's denominators over the whole global batch: masked tokens, and rows."""
    return {"mlm_count": jnp.sum(batch["masked_weights"]),
            "nsp_count": jnp.asarray(batch["input_ids"].shape[0], jnp.float32)}

  def sums(self, outputs: dict, batch: dict, with_shown_ids: bool = False) -> Sums:
    """Its sums of a model's outputs on a batch (with `with_shown_ids`, the [MASK]-input
    counts too)."""
    shown_bp = None
    if with_shown_ids:
      shown_bp = jnp.take_along_axis(batch["input_ids"], batch["masked_positions"], axis=1)
    sums = losses.mlm_sums(outputs["mlm_logits"], batch["masked_ids"], batch["masked_weights"],
                           shown_bp)
    if "masked_rates" in batch:
      sums.update(diffusion_bound_sum=losses.diffusion_bound_sum(
          outputs["mlm_logits"], batch["masked_ids"], batch["masked_weights"],
          batch["masked_rates"]), diffusion_token_count=losses.maskable_tokens(batch))
    if "nsp_logits" in outputs:
      sums.update(losses.nsp_sums(outputs["nsp_logits"], batch["nsp_labels"]))
    sums.update(self.head_sums(outputs, batch))
    if "sbo_logits" in outputs:  # the same targets, predicted from the span's boundaries
      sbo = losses.mlm_sums(outputs["sbo_logits"], batch["masked_ids"], batch["masked_weights"])
      sums.update(sbo_loss_sum=sbo["mlm_loss_sum"], sbo_correct=sbo["mlm_correct"])
    return sums

  def head_sums(self, outputs: dict, batch: dict) -> Sums:
    """The sums of a head of a subclass's own (ELECTRA's discriminator)."""
    del outputs, batch
    return {}

  def chunked_sums(self, outputs: dict, batch: dict, chunk: int,
                   per_token_loss: bool = False) -> Sums:
    """sums (and losses.per_token_sums with `per_token_loss`) of a model that gave its MLM
    head's features at the slots (bert.py's masked_features): the decoder applied `chunk`
    slots at a time (losses.chunked_sums)."""
    keys = [k for k in ("masked_ids", "masked_weights", "masked_rates") if k in batch]

    def of_chunk(logits_bcv, slots):
      ids, weights = slots["masked_ids"], slots["masked_weights"]
      out = losses.mlm_sums(logits_bcv, ids, weights)
      if "masked_rates" in slots:
        out["diffusion_bound_sum"] = losses.diffusion_bound_sum(logits_bcv, ids, weights,
                                                                slots["masked_rates"])
      if per_token_loss:
        out.update(losses.per_token_sums(logits_bcv, ids, weights))
      return out

    sums = losses.chunked_sums(outputs["mlm_features"], outputs["decoder"],
                               outputs["decoder_bias"], {k: batch[k] for k in keys}, of_chunk,
                               chunk)
    if "masked_rates" in batch:
      sums["diffusion_token_count"] = losses.maskable_tokens(batch)
    if "nsp_logits" in outputs:
      sums.update(losses.nsp_sums(outputs["nsp_logits"], batch["nsp_labels"]))
    return sums

  def loss(self, sums: Sums, objective: ObjectiveSettings) -> jax.Array:
    """The scalar loss from the sums (the global counts in place of their own)."""
    mlm_count = jnp.maximum(sums["mlm_count"], 1.0)
    loss = self.main_loss(sums, objective, mlm_count)
    if "nsp_loss_sum" in sums:
      loss = loss + sums["nsp_loss_sum"] / jnp.maximum(sums["nsp_count"], 1.0)
    if "sbo_loss_sum" in sums:
      loss = loss + objective.span_boundary_weight * sums["sbo_loss_sum"] / mlm_count
    return self.head_loss(sums, objective, loss)

  def main_loss(self, sums: Sums, objective: ObjectiveSettings,
                mlm_count: jax.Array) -> jax.Array:
    """The term the heads' losses are added to: the mean cross-entropy per masked token."""
    del objective
    return sums["mlm_loss_sum"] / mlm_count

  def head_loss(self, sums: Sums, objective: ObjectiveSettings, loss: jax.Array) -> jax.Array:
    """`loss` with the term of a head of a subclass's own added."""
    del sums, objective
    return loss

  def summarize(self, sums: dict[str, float]) -> dict[str, float]:
    """loss (the MLM loss alone), mlm_accuracy, perplexity; nsp_*, sbo_* with those heads;
    mask_token_accuracy where counted; the diffusion bound (nats per maskable token) and
    bits_per_token where its sums are."""
    count = max(float(sums["mlm_count"]), 1.0)
    loss = float(sums["mlm_loss_sum"]) / count
    out = {
        "loss": loss,
        "mlm_accuracy": float(sums["mlm_correct"]) / count,
        "perplexity": math.exp(min(loss, 69.0)),  # capped near 1e30: no overflow
    }
    if "nsp_count" in sums:
      nsp_count = max(float(sums["nsp_count"]), 1.0)
      out["nsp_loss"] = float(sums["nsp_loss_sum"]) / nsp_count
      out["nsp_accuracy"] = float(sums["nsp_correct"]) / nsp_count
    if "sbo_loss_sum" in sums:
      out["sbo_loss"] = float(sums["sbo_loss_sum"]) / count
      out["sbo_accuracy"] = float(sums["sbo_correct"]) / count
    if "mask_token_count" in sums:
      out["mask_token_accuracy"] = float(sums["mask_token_correct"]) / max(
          float(sums["mask_token_count"]), 1.0)
    if "diffusion_token_count" in sums:  # the bound per maskable token, in nats and in bits
      bound = float(sums["diffusion_bound_sum"]) / max(float(sums["diffusion_token_count"]), 1.0)
      out.update(diffusion_bound=bound, bits_per_token=bound / math.log(2.0))
    return out

  def evaluation(self) -> base.Objective:
    return self

  def heldout_sums(self, outputs: dict, batch: dict) -> Sums:
    """Its sums with the [MASK]-input counts, and a histogram of the targets (for the best
    constant predictor's accuracy: the baseline)."""
    sums = self.sums(outputs, batch, with_shown_ids=True)
    sums["target_histogram"] = jnp.zeros(outputs["mlm_logits"].shape[-1], jnp.float32).at[
        batch["masked_ids"]].add(batch["masked_weights"])
    return sums
