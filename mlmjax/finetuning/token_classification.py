"""Token classification (NER, CoNLL-style tags): one label per word, predicted at its first piece.

    [CLS] piece piece ... [SEP] -> encoder [B, T, D] -> dropout -> dense -> [B, T, K] logits

as Hugging Face's BertForTokenClassification (and transformers' run_ner): a word's tag is
learned and predicted at the first piece of the word; its other pieces, [CLS], [SEP] and
padding carry no label (weight 0). Words are found in the pieces by character offsets, so
sentencepiece and WordPiece/BPE tokenizers align the same way. A sentence longer than the row
loses its last words: they are predicted "O" (and so still scored, as missed entities). Dev
sets are scored per entity as seqeval does (entity_metrics.py): a predicted entity counts when
its type and both boundaries match.
"""

from __future__ import annotations

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.finetuning import classification
from mlmjax.finetuning import entity_metrics
from mlmjax.finetuning import kind as kind_lib
from mlmjax.models import layers
from mlmjax.models import special_ids
from mlmjax.training.core import losses


class TokenClassifier(nnx.Module):

  def __init__(self, encoder: nnx.Module, model_config, num_tags: int, rngs: nnx.Rngs):
    self.encoder = encoder
    self.classifier = layers.Dense(rngs, (model_config.hidden_size, num_tags), ("embed", None),
                                   model_config.initializer_range)
    self.rate = model_config.dropout_rate

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> jax.Array:
    """[B, T, K] float32 logits."""
    keys = classification.split_key(dropout_key)
    hidden_btd = classification.encoder_states(self.encoder, batch, keys[0], constrain_layer)
    return self.classifier(layers.dropout(hidden_btd, self.rate, keys[1])).astype(jnp.float32)


def first_pieces(words: list[str], starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
  """[W] the index of each word's first piece, from the pieces' character spans in the words
  joined by spaces (tok.encode_offsets); -1 for a word with no piece of its own."""
  word_starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
  first = np.full(len(words), -1, np.int64)
  for p, (s, e) in enumerate(zip(kind_lib.text_starts(" ".join(words), starts, ends), ends)):
    if s < e:  # a piece holding only the space belongs to no word
      w = int(np.searchsorted(word_starts, s, side="right")) - 1
      if first[w] < 0:
        first[w] = p
  return first


class TokenClassification(kind_lib.Kind):
  """Tags (`tag_names`, "O" first) per word."""

  name = "token_classification"
  headline = "f1"

  def __init__(self, tag_names: list[str]):
    self.tag_names = tag_names
    self.tag_ids = {t: i for i, t in enumerate(tag_names)}

  def encode(self, examples, tok, seq_len, what):
    n = len(examples)
    max_words = max(map(len, examples.words))
    pieces = []
    labels = np.zeros((n, seq_len), np.int32)
    weights = np.zeros((n, seq_len), np.float32)
    word_position = np.full((n, max_words), -1, np.int32)  # a word's first piece in its row
    cut = 0
    encoded = tok.encode_offsets([" ".join(words) for words in examples.words])
    for i, (words, tags) in enumerate(zip(examples.words, examples.tags)):
      ids, starts, ends = encoded[i]
      first = first_pieces(words, starts, ends)
      ids = ids[:seq_len - 2]
      pieces.append([special_ids.CLS_ID, *ids, special_ids.SEP_ID])
      cut += bool((first >= len(ids)).any())
      kept = (first >= 0) & (first < len(ids))  # (-1: a word that got no piece of its own)
      positions = first[kept] + 1  # after [CLS]
      labels[i, positions] = [self.tag_ids[t] for t, k in zip(tags, kept) if k]
      weights[i, positions] = 1.0
      word_position[i, :len(words)] = np.where(kept, first + 1, -1)
    if cut:
      logging.info("%s: %d of %d sentences lose words beyond %d tokens (predicted O)", what,
                   cut, n, seq_len)
    rows = {**kind_lib.padded_rows(pieces, [[0] * len(p) for p in pieces], seq_len),
            "labels": labels, "weights": weights}
    return kind_lib.Encoded(rows, {"word_position": word_position})

  def model(self, encoder, model_settings, finetune_model, rngs):
    return TokenClassifier(encoder, model_settings, len(self.tag_names), rngs)

  def objective(self):
    def sums(logits_btk, batch):
      labels_bt = batch["labels"]
      return kind_lib.weighted_sums(losses.cross_entropy(logits_btk, labels_bt),
                                    jnp.argmax(logits_btk, -1) == labels_bt, batch["weights"])
    return kind_lib.mean_objective(sums)

  def predict(self, logits_ntk: np.ndarray, word_position: np.ndarray, num_words: list[int]
              ) -> list[list[str]]:
    """Each sentence's predicted tags, per word ("O" for words cut off the row)."""
    out = []
    for i, w in enumerate(num_words):
      pos = word_position[i, :w]
      best = np.argmax(logits_ntk[i, np.maximum(pos, 0)], -1)
      out.append([self.tag_names[b] if p >= 0 else "O" for b, p in zip(best, pos)])
    return out

  def score(self, logits_ntk, dev, examples):
    rows = dev.rows
    log_probs = kind_lib.log_softmax(logits_ntk)
    picked = np.take_along_axis(log_probs, rows["labels"][..., None], -1)[..., 0]
    loss = float(-(picked * rows["weights"]).sum() / max(rows["weights"].sum(), 1.0))
    predicted = self.predict(logits_ntk, dev.host["word_position"], list(map(len, examples.tags)))
    m = entity_metrics.score(examples.tags, predicted)
    return {"loss": loss, "f1": m["f1"], "precision": m["precision"], "recall": m["recall"],
            "accuracy": m["accuracy"]}

  def baseline(self, train, dev):
    """Tagging every word "O" finds no entity: F1 0, and this token accuracy."""
    tags = [t for sentence in dev.tags for t in sentence]
    return {"all_o_accuracy": float(np.mean([t == "O" for t in tags]))}

  def record(self):
    return {"kind": self.name, "label_names": self.tag_names,
            "num_outputs": len(self.tag_names)}
