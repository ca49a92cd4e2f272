"""The causal-LM objective on the encoder: `objective.kind='clm'`, or a phase's
{"objective": "clm"} in train.phases (causal LM first, then MLM: Gisserot-Boukhlef et al.,
2025, "Should We Still Pretrain Encoders with Masked Language Modeling?").

Each token predicts the next one of its packed sequence, attending only to itself and the
tokens before it (attention.mask's `causal`), through the same encoder and the same tied MLM
head: nothing is added to the model, and a switch to MLM keeps every weight. The head predicts
every position, not only the masked ones, so the loss applies its decoder a chunk of positions
at a time (`sums`).

The input is MLM's (rows packed and masked on the host): the step puts each masked slot's
original token back (the targets hold it), so a run switches objective at a phase boundary
without another kind of input and resumes across the switch as across any phase change. The
held-out evaluation stays MLM at eval.mask_rate, so CLM, MLM and mixed runs compare.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from mlmjax.training.core import losses
from mlmjax.training.core import steps
from mlmjax.training.objectives import base

# Positions whose logits the loss computes at once (see sums).
CHUNK = 128


@base.register
class CausalLM(base.Objective):
  """objective.kind='clm', or a phase's {"objective": "clm"}."""

  name = "clm"
  scores_text = True
  sum_keys = ("clm_loss_sum", "clm_correct", "clm_count")

  def predicted_positions(self, seq_len: int, slots: int) -> int:
    return seq_len - 1  # every position but the last

  def step(self, objective, per_token_loss: bool = False) -> steps.Objective:
    """The mean next-token loss; the model's `next_token_features` (bert.py)."""
    del objective
    return steps.Objective(global_counts, lambda outputs, batch: sums(outputs, batch,
                                                                      per_token_loss),
                           lambda s: s["clm_loss_sum"] / jnp.maximum(s["clm_count"], 1.0),
                           prepare, "next_token_features")

  def summarize(self, sums: dict[str, float]) -> dict[str, float]:
    """`loss` is its next-token loss (also `clm_loss`), with `clm_accuracy`, `perplexity`."""
    count = max(float(sums["clm_count"]), 1.0)
    loss = float(sums["clm_loss_sum"]) / count
    return {"loss": loss, "clm_loss": loss, "clm_accuracy": float(sums["clm_correct"]) / count,
            "perplexity": math.exp(min(loss, 69.0))}


def unmasked_ids(batch: dict) -> jax.Array:
  """[B, T] the rows as they were before masking: each masked slot's target back in its place
  (padding slots have weight 0 and add nothing)."""
  ids_bt = jnp.asarray(batch["input_ids"])
  positions_bp = batch["masked_positions"]
  shown_bp = jnp.take_along_axis(ids_bt, positions_bp, axis=1)
  delta_bp = jnp.where(batch["masked_weights"] > 0, batch["masked_ids"] - shown_bp, 0)
  rows_b1 = jnp.arange(ids_bt.shape[0])[:, None]
  return ids_bt.at[rows_b1, positions_bp].add(delta_bp.astype(ids_bt.dtype))


def prepare(batch: dict) -> dict:
  """The batch the causal step reads: the unmasked rows (the masks' own keys are not used)."""
  return {**batch, "input_ids": unmasked_ids(batch)}


def next_token_targets(batch: dict) -> tuple[jax.Array, jax.Array]:
  """([B, T-1] the token after each position, [B, T-1] weight 1 where that token belongs to
  the same packed sequence, 0 across a sequence boundary and on padding)."""
  segment_bt = batch["segment_ids"]
  same_b = (segment_bt[:, 1:] == segment_bt[:, :-1]) & (segment_bt[:, 1:] > 0)
  return batch["input_ids"][:, 1:], same_b.astype(jnp.float32)


def global_counts(batch: dict) -> dict[str, jax.Array]:
  """The loss's denominator over the whole global batch: the predicted tokens."""
  return {"clm_count": jnp.sum(next_token_targets(batch)[1])}


def sums(outputs: dict, batch: dict, per_token_loss: bool = False,
         chunk: int = CHUNK) -> dict[str, jax.Array]:
  """clm_loss_sum, clm_correct, clm_count of the next tokens, from the model's head features
  [B, T-1, D] and tied decoder (bert.py next_token_features); with `per_token_loss` the
  per-vocabulary sums of adaptive masking's feedback as well (each token's difficulty as a
  next token). The decoder runs on `chunk` positions at a time (losses.chunked_sums): a step
  holds [B, chunk, V] logits, not [B, T-1, V]."""
  targets_bt, weights_bt = next_token_targets(batch)

  def of_chunk(logits, xs):
    out = losses.mlm_sums(logits, xs["targets"], xs["weights"])
    if per_token_loss:
      out.update(losses.per_token_sums(logits, xs["targets"], xs["weights"]))
    return out

  total = losses.chunked_sums(outputs["clm_features"], outputs["decoder"],
                              outputs["decoder_bias"],
                              {"targets": targets_bt, "weights": weights_bt}, of_chunk, chunk)
  out = {"clm_loss_sum": total.pop("mlm_loss_sum"), "clm_correct": total.pop("mlm_correct"),
         "clm_count": total.pop("mlm_count")}
  return {**out, **total}
