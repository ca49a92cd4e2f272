"""Sentence embeddings (sentence-transformers' recipe): the encoder's mean-pooled (or [CLS])
state, trained contrastively on pairs with in-batch negatives, scored by retrieval.

    pair i: (anchor_i, positive_i) -> rows [B, 2, T] -> encoder -> pooled [B, 2, D]
    loss_i = cross-entropy over j of  scale * cos(anchor_i, positive_j),  right answer j = i

(sentence-transformers' MultipleNegativesRankingLoss: every other pair's positive in the global
batch is a negative, so a larger batch is a harder task; scale = 1 / embedding.temperature.)
There is no new layer: the embedding model is the encoder and its pooling, so it exports as a
plain encoder in sentence-transformers' folder layout. Dev: each dev anchor retrieves among all
dev positives by cosine similarity; recall@1/5/10 and MRR (the mean reciprocal rank of the
right positive). `python -m mlmjax.embed` writes the vectors of a file's lines.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.finetuning import classification
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning import multiple_choice
from mlmjax.training.core import losses

RECALL_AT = (1, 5, 10)


class Embedder(nnx.Module):

  def __init__(self, encoder: nnx.Module, pooling: str):
    self.encoder = encoder
    self.pooling = pooling

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> jax.Array:
    """[B, K, D] float32 embeddings of [B, K, T] rows (not normalised)."""
    flat, (b, k) = kind_lib.flatten_groups(batch)
    hidden_btd = classification.encoder_states(self.encoder, flat, dropout_key, constrain_layer)
    pooled = classification.pool(hidden_btd, flat["segment_ids"], self.pooling)
    return pooled.astype(jnp.float32).reshape(b, k, -1)


def _unit(x: jax.Array) -> jax.Array:
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def retrieval_metrics(anchors_nd: np.ndarray, positives_nd: np.ndarray, scale: float
                      ) -> dict[str, float]:
  """Each anchor ranks every positive by cosine similarity; the right one is its own."""
  a = anchors_nd / np.maximum(np.linalg.norm(anchors_nd, axis=-1, keepdims=True), 1e-12)
  p = positives_nd / np.maximum(np.linalg.norm(positives_nd, axis=-1, keepdims=True), 1e-12)
  sim_nn = a @ p.T
  n = len(sim_nn)
  right = sim_nn[np.arange(n), np.arange(n)]
  rank = (sim_nn > right[:, None]).sum(1) + 1  # 1: the right positive is the most similar
  loss = float(-np.mean(np.diag(kind_lib.log_softmax(scale * sim_nn))))
  out = {"loss": loss, "mrr": float(np.mean(1.0 / rank))}
  out.update({f"recall@{k}": float(np.mean(rank <= k)) for k in RECALL_AT})
  return out


class Embedding(kind_lib.Kind):

  name = "embedding"
  headline = "mrr"

  def __init__(self, temperature: float):
    self.scale = 1.0 / temperature

  def encode(self, examples, tok, seq_len, what):
    rows = multiple_choice.encode_groups(
        [[(a,), (p,)] for a, p in zip(examples.anchors, examples.positives)], tok, seq_len, what)
    rows["weights"] = np.ones(len(examples), np.float32)
    rows["pair_ids"] = np.arange(len(examples), dtype=np.int32)
    return kind_lib.Encoded(rows)

  def model(self, encoder, model_settings, finetune_model, rngs):
    return Embedder(encoder, finetune_model.pooling_for(self.name))

  def objective(self):
    def sums(emb_bkd, batch):
      # The global batch's similarities: under jit the sharded batch is one array, so every
      # device's pairs are negatives for every other's.
      sim_bb = self.scale * _unit(emb_bkd[:, 0]) @ _unit(emb_bkd[:, 1]).T
      right_b = jnp.arange(sim_bb.shape[0])
      # A pair twice in one batch (batches run across epoch ends) is not its own negative.
      ids_b = batch["pair_ids"]
      twin_bb = (ids_b[:, None] == ids_b[None, :]) & (right_b[:, None] != right_b[None, :])
      sim_bb = jnp.where(twin_bb, -jnp.inf, sim_bb)
      return kind_lib.weighted_sums(losses.cross_entropy(sim_bb, right_b),
                                    jnp.argmax(sim_bb, -1) == right_b, batch["weights"])
    return kind_lib.mean_objective(sums)

  def score(self, emb_nkd, dev, examples):
    return retrieval_metrics(emb_nkd[:, 0], emb_nkd[:, 1], self.scale)

  def baseline(self, train, dev):
    """Ranking at random: the chance of the right positive first among N."""
    return {"chance_recall@1": 1.0 / len(dev)}
