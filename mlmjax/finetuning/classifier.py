"""A sequence classifier (or regressor) on a pretrained encoder: BERT's fine-tuning model.

    encoder(batch) [B, T, D] -> [CLS] state [B, D] -> pooler: dense + tanh -> dropout ->
    dense -> [B, K] logits (K classes), or [B, 1] the predicted score (regression)

The encoder is the pretraining model itself (train_state.build_model: BERT-style, or ELECTRA, whose
`encode` gives the discriminator's states), so its parameters load from a pretraining
checkpoint as they are. Its pooler exists when it was pretrained with a pair format (NSP/SOP
heads): then that pretrained pooler is used, as BERT does; otherwise the pooler is new. The
pretraining heads' parameters come along unused (a few percent of a small model's parameters;
nothing reads them, so the weight decay that shrinks them changes nothing).

Its loss (`objective`) is the cross-entropy of the class logits (classification) or the squared
error of the predicted score (regression), averaged over the examples of the global batch whose
weight is 1 (dev batches are padded to full size with weight-0 rows, so every example counts
once); the train step is pretraining's (training/steps.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mlmjax.models import layers
from mlmjax.training import losses
from mlmjax.training import steps


class SequenceClassifier(nnx.Module):

  def __init__(self, encoder: nnx.Module, model_config, num_outputs: int, rngs: nnx.Rngs,
               pooling: str = "cls"):
    d, std = model_config.hidden_size, model_config.initializer_range
    self.encoder = encoder
    self.pretrained_pooler = getattr(encoder, "nsp_head", False)
    if not self.pretrained_pooler:
      self.pooler = layers.Dense(rngs, (d, d), ("embed", None), std)
    self.classifier = layers.Dense(rngs, (d, num_outputs), ("embed", None), std)
    self.rate = model_config.dropout_rate
    self.pooling = pooling

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> jax.Array:
    """[B, K] float32 outputs; dropout only when `dropout_key` is given (training).
    `constrain_layer` (train_state.MeshSetup.forward's per-layer FSDP gather) names layers by their
    path in this model, so the encoder's are prefixed."""
    keys = (None, None) if dropout_key is None else tuple(jax.random.split(dropout_key))
    nested = constrain_layer and (lambda name, p: constrain_layer(f"encoder/{name}", p))
    hidden_btd = self.encoder.encode(batch, keys[0], nested)
    if self.pooling == "mean":  # over the example's tokens, padding excluded
      real_bt1 = (batch["segment_ids"] > 0)[..., None].astype(hidden_btd.dtype)
      summary_bd = (hidden_btd * real_bt1).sum(1) / jnp.maximum(real_bt1.sum(1), 1.0)
    else:
      summary_bd = hidden_btd[:, 0]
    pooler = self.encoder.pooler if self.pretrained_pooler else self.pooler
    pooled_bd = jnp.tanh(pooler(summary_bd))
    return self.classifier(layers.dropout(pooled_bd, self.rate, keys[1])).astype(jnp.float32)


def objective(regression: bool) -> steps.Objective:
  """The classifier's loss for the shared train step."""

  def sums(outputs_bk: jax.Array, batch: dict) -> dict[str, jax.Array]:
    weights_b, labels_b = batch["weights"], batch["labels"]
    if regression:
      losses_b = jnp.square(outputs_bk[:, 0] - labels_b)
    else:
      losses_b = losses.cross_entropy(outputs_bk, labels_b)
    out = {"loss_sum": jnp.sum(losses_b * weights_b), "count": jnp.sum(weights_b)}
    if not regression:
      out["correct"] = jnp.sum((jnp.argmax(outputs_bk, axis=-1) == labels_b) * weights_b)
    return out

  return steps.Objective(
      global_counts=lambda batch: {"count": jnp.sum(batch["weights"])}, sums=sums,
      loss=lambda s: s["loss_sum"] / jnp.maximum(s["count"], 1.0))
