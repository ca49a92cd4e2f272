"""A sequence classifier (or regressor) on a pretrained encoder: BERT's fine-tuning model.

    encoder(batch) [B, T, D] -> [CLS] state [B, D] -> pooler: dense + tanh -> dropout ->
    dense -> [B, K] logits (K classes), or [B, 1] the predicted score (regression)

The encoder is the pretraining model itself (model.BertForPretraining, whose `encode` gives the
hidden states), so its parameters load from a pretraining checkpoint as they are. Its pooler
exists when it was pretrained with a pair format (NSP/SOP heads): then that pretrained pooler
is used, as BERT does; otherwise the pooler is new. The MLM head's parameters come along unused
(a few percent of a small model's parameters; nothing reads them, so the weight decay that
shrinks them changes nothing).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mlmjax import model as model_lib


class SequenceClassifier(nnx.Module):

  def __init__(self, model_config, vocab_size: int, num_outputs: int, rngs: nnx.Rngs,
               pair_heads: bool, pooling: str = "cls"):
    d, std = model_config.hidden_size, model_config.initializer_range
    self.encoder = model_lib.BertForPretraining(model_config, vocab_size, rngs,
                                                nsp_head=pair_heads)
    if not pair_heads:
      self.pooler = model_lib.Dense(rngs, d, d, ("embed", None), std)
    self.classifier = model_lib.Dense(rngs, d, num_outputs, ("embed", None), std)
    self.rate = model_config.dropout_rate
    self.pooling = pooling

  def __call__(self, batch, dropout_key=None) -> jax.Array:
    """[B, K] float32 outputs; dropout only when `dropout_key` is given (training)."""
    keys = (None, None) if dropout_key is None else tuple(jax.random.split(dropout_key))
    hidden_btd = self.encoder.encode(batch, keys[0])
    if self.pooling == "mean":  # over the example's tokens, padding excluded
      real_bt1 = (batch["segment_ids"] > 0)[..., None].astype(hidden_btd.dtype)
      summary_bd = (hidden_btd * real_bt1).sum(1) / jnp.maximum(real_bt1.sum(1), 1.0)
    else:
      summary_bd = hidden_btd[:, 0]
    pooler = self.encoder.pooler if self.encoder.nsp_head else self.pooler
    pooled_bd = jnp.tanh(pooler(summary_bd))
    return self.classifier(model_lib.dropout(pooled_bd, self.rate, keys[1])).astype(jnp.float32)
