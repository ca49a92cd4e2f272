"""Multiple choice (RACE, SWAG, the KJV continuation task): one score per option, a softmax over
the options.

    per option k: [CLS] context [SEP] option_k [SEP]  -> rows [B, K, T]
    -> one [B*K, T] batch -> the sequence classifier with one output -> [B, K] scores

as Hugging Face's BertForMultipleChoice (and transformers' run_swag, fairseq's RACE recipe): the
pooled [CLS] state of each (context, option) pair is scored by one shared linear layer, and the
loss is the cross-entropy of the right option among the example's K. A pair too long loses
tokens from its longer text first, which is the passage (an option is short).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.finetuning import classification
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning import records
from mlmjax.training.core import losses


class ChoiceScorer(classification.SequenceClassifier):
  """The sequence classifier with one output, applied to every option of every example."""

  def __init__(self, encoder: nnx.Module, model_config, rngs: nnx.Rngs, pooling: str):
    super().__init__(encoder, model_config, 1, rngs, pooling)

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> jax.Array:
    """[B, K] float32 scores of a batch of [B, K, T] rows."""
    flat, (b, k) = kind_lib.flatten_groups(batch)
    return super().__call__(flat, dropout_key, constrain_layer).reshape(b, k)


def encode_groups(texts: list[list[tuple[str, ...]]], tok, seq_len: int, what: str
                  ) -> dict[str, np.ndarray]:
  """Per example K texts (each one text or a pair) -> model inputs [N, K, T]."""
  k = len(texts[0])
  per_option = [kind_lib.encode_texts(records.TextExamples([t[j] for t in texts],
                                                         np.zeros(len(texts), np.int32)),
                                    tok, seq_len, f"{what} (text {j + 1} of {k})")
                for j in range(k)]
  return {key: np.stack([rows[key] for rows in per_option], 1)
          for key in ("input_ids", "token_type_ids", "segment_ids", "positions")}


class MultipleChoice(kind_lib.Kind):

  name = "multiple_choice"
  headline = "accuracy"

  def encode(self, examples, tok, seq_len, what):
    pairs = [[(context, option) for option in options]
             for context, options in zip(examples.contexts, examples.options)]
    rows = encode_groups(pairs, tok, seq_len, what)
    rows.update(labels=np.asarray(examples.labels, np.int32),
                weights=np.ones(len(examples), np.float32))
    return kind_lib.Encoded(rows)

  def model(self, encoder, model_settings, finetune_model, rngs):
    return ChoiceScorer(encoder, model_settings, rngs, finetune_model.pooling_for(self.name))

  def objective(self):
    def sums(scores_bk, batch):
      labels_b = batch["labels"]
      return kind_lib.weighted_sums(losses.cross_entropy(scores_bk, labels_b),
                                    jnp.argmax(scores_bk, -1) == labels_b, batch["weights"])
    return kind_lib.mean_objective(sums)

  def score(self, scores_nk, dev, examples):
    labels = dev.rows["labels"]
    loss = float(-np.mean(kind_lib.log_softmax(scores_nk)[np.arange(len(labels)), labels]))
    return {"loss": loss, "accuracy": float(np.mean(np.argmax(scores_nk, -1) == labels))}

  def baseline(self, train, dev):
    return {"chance_accuracy": 1.0 / len(dev.options[0])}
