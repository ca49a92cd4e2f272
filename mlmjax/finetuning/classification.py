"""Sequence classification and regression (GLUE, the KJV tasks, your CSV/JSONL): BERT's
fine-tuning model and its task kind.

    encoder(batch) [B, T, D] -> [CLS] state (or the mean) [B, D] -> pooler: dense + tanh ->
    dropout -> dense -> [B, K] logits (K classes), or [B, 1] the predicted score (regression)

The encoder is the pretraining model itself (training/assembly.py: BERT-style, or ELECTRA, whose
`encode` gives the discriminator's states), so its parameters load from a pretraining
checkpoint as they are. Its pooler exists when it was pretrained with a pair format (NSP/SOP
heads): then that pretrained pooler is used, as BERT does; otherwise the pooler is new. The
pretraining heads' parameters come along unused (a few percent of a small model's parameters;
nothing reads them, so the weight decay that shrinks them changes nothing).

Its loss is the cross-entropy of the class logits (classification) or the squared error of the
predicted score (regression), averaged over the examples of the global batch whose weight is 1
(dev batches are padded to full size with weight-0 rows, so every example counts once); the
train step is pretraining's (training/core/steps.py). Multiple choice (multiple_choice.py) scores
each option with this model and one output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.finetuning import glue_metrics
from mlmjax.finetuning import kind as kind_lib
from mlmjax.models import layers
from mlmjax.training.core import losses


def pool(hidden_btd: jax.Array, segment_ids_bt: jax.Array, pooling: str) -> jax.Array:
  """[B, D]: the [CLS] token's state, or the mean over the example's tokens (padding out)."""
  if pooling == "mean":
    real_bt1 = (segment_ids_bt > 0)[..., None].astype(hidden_btd.dtype)
    return (hidden_btd * real_bt1).sum(1) / jnp.maximum(real_bt1.sum(1), 1.0)
  return hidden_btd[:, 0]


def encoder_states(encoder, batch, dropout_key, constrain_layer) -> jax.Array:
  """[B, T, D] final states. `constrain_layer` (train_state.MeshSetup.forward's per-layer FSDP
  gather) names layers by their path in the fine-tuning model, so the encoder's are
  prefixed."""
  nested = constrain_layer and (lambda name, p: constrain_layer(f"encoder/{name}", p))
  return encoder.encode(batch, dropout_key, nested)


def split_key(dropout_key):
  """(encoder's key, head's key), or (None, None) without dropout (evaluation)."""
  return (None, None) if dropout_key is None else tuple(jax.random.split(dropout_key))


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
    """[B, K] float32 outputs; dropout only when `dropout_key` is given (training)."""
    keys = split_key(dropout_key)
    hidden_btd = encoder_states(self.encoder, batch, keys[0], constrain_layer)
    pooler = self.encoder.pooler if self.pretrained_pooler else self.pooler
    pooled_bd = jnp.tanh(pooler(pool(hidden_btd, batch["segment_ids"], self.pooling)))
    return self.classifier(layers.dropout(pooled_bd, self.rate, keys[1])).astype(jnp.float32)


class Classification(kind_lib.Kind):
  """Classes (`label_names`), or one number per example (`regression`)."""

  def __init__(self, metrics: tuple[str, ...], label_names: list[str], regression: bool):
    self.name = "regression" if regression else "classification"
    self.metrics, self.label_names, self.regression = metrics, label_names, regression
    self.headline = metrics[0]
    self.train_accuracy = not regression

  @property
  def num_outputs(self) -> int:
    """Logits per example: one per class, or the single predicted score of regression."""
    return 1 if self.regression else len(self.label_names)

  def encode(self, examples, tok, seq_len, what):
    return kind_lib.Encoded(kind_lib.encode_texts(examples, tok, seq_len, what))

  def model(self, encoder, model_settings, finetune_model, rngs):
    return SequenceClassifier(encoder, model_settings, self.num_outputs, rngs,
                              finetune_model.pooling_for(self.name))

  def objective(self):
    def sums(outputs_bk, batch):
      labels_b = batch["labels"]
      if self.regression:
        return kind_lib.weighted_sums(jnp.square(outputs_bk[:, 0] - labels_b),
                                      jnp.zeros_like(labels_b), batch["weights"])
      return kind_lib.weighted_sums(losses.cross_entropy(outputs_bk, labels_b),
                                    jnp.argmax(outputs_bk, axis=-1) == labels_b,
                                    batch["weights"])
    return kind_lib.mean_objective(sums)

  def score(self, outputs_nk, dev, examples):
    labels = dev.rows["labels"]
    if self.regression:
      loss = float(np.mean(np.square(outputs_nk[:, 0] - labels)))
    else:
      loss = float(-np.mean(kind_lib.log_softmax(outputs_nk)[np.arange(len(labels)), labels]))
    return {"loss": loss, **glue_metrics.compute(self.metrics, outputs_nk, labels)}

  def baseline(self, train, dev):
    if self.regression:
      return {}
    most_frequent = np.bincount(train.labels).argmax()
    return {"majority_class_accuracy": float(np.mean(dev.labels == most_frequent))}

  def record(self):
    return {"kind": self.name, "label_names": self.label_names,
            "num_outputs": self.num_outputs}
