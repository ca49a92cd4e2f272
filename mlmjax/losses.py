"""MLM loss and metrics as (sum, count) pairs, so they add up over devices, hosts and batches."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from mlmjax.data.tokenizer import MASK_ID


def mlm_sums(logits_bpv: jax.Array, masked_ids_bp: jax.Array, masked_weights_bp: jax.Array,
             shown_ids_bp: jax.Array | None = None) -> dict[str, jax.Array]:
  """Sums over every masked slot of the (global) batch; padding slots have weight 0.

  With `shown_ids_bp` (the input tokens at the masked slots) also counts the slots whose input
  really was [MASK]: the 10% of targets left unchanged can be copied from the input, so the
  overall accuracy flatters a model that ignores context.
  """
  logp_bpv = jax.nn.log_softmax(logits_bpv.astype(jnp.float32), axis=-1)
  xent_bp = -jnp.take_along_axis(logp_bpv, masked_ids_bp[..., None], axis=-1)[..., 0]
  correct_bp = (jnp.argmax(logits_bpv, axis=-1) == masked_ids_bp).astype(jnp.float32)
  sums = {
      "mlm_loss_sum": jnp.sum(xent_bp * masked_weights_bp),
      "mlm_correct": jnp.sum(correct_bp * masked_weights_bp),
      "mlm_count": jnp.sum(masked_weights_bp),
  }
  if shown_ids_bp is not None:
    on_mask_bp = (shown_ids_bp == MASK_ID) * masked_weights_bp
    sums["mask_token_correct"] = jnp.sum(correct_bp * on_mask_bp)
    sums["mask_token_count"] = jnp.sum(on_mask_bp)
  return sums


def mean_loss(sums: dict[str, jax.Array]) -> jax.Array:
  """Mean cross-entropy per masked token of the global batch (never divides by zero)."""
  return sums["mlm_loss_sum"] / jnp.maximum(sums["mlm_count"], 1.0)


def summarize(sums: dict[str, float]) -> dict[str, float]:
  """Host-side: accumulated sums -> the metrics people read (loss, accuracy, perplexity)."""
  count = max(float(sums["mlm_count"]), 1.0)
  loss = float(sums["mlm_loss_sum"]) / count
  out = {
      "loss": loss,
      "mlm_accuracy": float(sums["mlm_correct"]) / count,
      "perplexity": math.exp(min(loss, 69.0)),  # capped near 1e30: no overflow
  }
  if "mask_token_count" in sums:
    out["mask_token_accuracy"] = float(sums["mask_token_correct"]) / max(
        float(sums["mask_token_count"]), 1.0)
  return out
