"""MLM loss and metrics as (sum, count) pairs, so they add up over devices, hosts and batches."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def mlm_sums(logits_bpv: jax.Array, masked_ids_bp: jax.Array,
             masked_weights_bp: jax.Array) -> dict[str, jax.Array]:
  """Sums over every masked slot of the (global) batch; padding slots have weight 0."""
  logp_bpv = jax.nn.log_softmax(logits_bpv.astype(jnp.float32), axis=-1)
  xent_bp = -jnp.take_along_axis(logp_bpv, masked_ids_bp[..., None], axis=-1)[..., 0]
  correct_bp = (jnp.argmax(logits_bpv, axis=-1) == masked_ids_bp).astype(jnp.float32)
  return {
      "mlm_loss_sum": jnp.sum(xent_bp * masked_weights_bp),
      "mlm_correct": jnp.sum(correct_bp * masked_weights_bp),
      "mlm_count": jnp.sum(masked_weights_bp),
  }


def mean_loss(sums: dict[str, jax.Array]) -> jax.Array:
  """Mean cross-entropy per masked token of the global batch (never divides by zero)."""
  return sums["mlm_loss_sum"] / jnp.maximum(sums["mlm_count"], 1.0)


def summarize(sums: dict[str, float]) -> dict[str, float]:
  """Host-side: accumulated sums -> the metrics people read (loss, accuracy, perplexity)."""
  count = max(float(sums["mlm_count"]), 1.0)
  loss = float(sums["mlm_loss_sum"]) / count
  return {
      "loss": loss,
      "mlm_accuracy": float(sums["mlm_correct"]) / count,
      "perplexity": float(min(jnp.exp(loss), 1e30)),
  }
