"""A kind of fine-tuning task: the one interface the trainer runs every task through.

    examples (records.py) --encode--> Encoded rows --model + objective--> train steps
    dev rows --model--> outputs [N, ...] --score--> {"loss", headline metric, ...}

Kinds (each in its own module): classification.py (sequence classification and regression),
token_classification.py (NER), question_answering.py (SQuAD), multiple_choice.py (RACE, SWAG),
embeddings.py (contrastive sentence embeddings and retrieval). The trainer (trainer.py) knows
nothing else about them. A new kind is its module, its name in tasks.KINDS / make_kind, and,
to leave for Hugging Face, its class in hf/heads.py.
"""

from __future__ import annotations

import dataclasses

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.finetuning import records
from mlmjax.models import special_ids
from mlmjax.training.core import steps


@dataclasses.dataclass
class Encoded:
  """A split as fixed-length rows: `rows` go to the device (every array [N, ...], `weights` [N]
  or [N, T]: 1 where an example, or a token, counts); `host` holds what scoring needs and the
  model does not (character offsets, which example a window belongs to)."""

  rows: dict[str, np.ndarray]
  host: dict = dataclasses.field(default_factory=dict)

  def __len__(self) -> int:
    return len(self.rows["input_ids"])


class Kind:
  """The parts of one task kind. `headline` names the metric a task is judged by."""

  name: str
  headline: str
  # The train progress line shows the share of right answers (the objective sums `correct`).
  train_accuracy: bool = True

  def encode(self, examples: records.Records, tok, seq_len: int, what: str) -> Encoded:
    raise NotImplementedError

  def model(self, encoder: nnx.Module, model_settings, finetune_model, rngs: nnx.Rngs
            ) -> nnx.Module:
    """The encoder with this kind's head; called with (batch, dropout_key, constrain_layer)."""
    raise NotImplementedError

  def objective(self) -> steps.Objective:
    raise NotImplementedError

  def score(self, outputs: np.ndarray, dev: Encoded, examples: records.Records
            ) -> dict[str, float]:
    """The dev loss and metrics from the model's outputs on every dev row (in order)."""
    raise NotImplementedError

  def baseline(self, train: records.Records, dev: records.Records) -> dict[str, float]:
    """What a model that learned nothing scores (e.g. the majority class): the bar to beat."""
    return {}

  def record(self) -> dict:
    """What a saved run must know to rebuild this kind's model (export, embed): its name, and
    its labels where it has them."""
    return {"kind": self.name}


def padded_rows(pieces: list[list[int]], token_types: list[list[int]], seq_len: int
                ) -> dict[str, np.ndarray]:
  """Model inputs [N, seq_len] of rows of piece ids (each [CLS] ... [SEP], at most seq_len) and
  their token types: padded with 0, segment id 1 on the real tokens (0 on padding, which
  attention then ignores), positions 0..T-1."""
  n = len(pieces)
  input_ids = np.zeros((n, seq_len), np.int32)
  types = np.zeros((n, seq_len), np.int32)
  for i, (row, row_types) in enumerate(zip(pieces, token_types)):
    input_ids[i, :len(row)], types[i, :len(row)] = row, row_types
  lengths = np.asarray([len(row) for row in pieces])
  positions = np.arange(seq_len, dtype=np.int32)
  return {"input_ids": input_ids, "token_type_ids": types,
          "segment_ids": (positions[None] < lengths[:, None]).astype(np.int32),
          "positions": np.broadcast_to(positions, (n, seq_len)).copy()}


def _truncate(lengths: list[int], budget: int) -> list[int]:
  """Token counts to keep of each text: while too long, drop one from the longest (BERT)."""
  lengths = list(lengths)
  while sum(lengths) > budget:
    longest = int(np.argmax(lengths))
    lengths[longest] -= 1
  return lengths


def encode_texts(examples: records.TextExamples, tok, seq_len: int,
                 what: str) -> dict[str, np.ndarray]:
  """Model inputs [N, seq_len] and `labels`, `weights` [N] (1: a real example): one row per
  example as BERT fine-tunes on,

      [CLS] text_a [SEP]                  token type 0
      [CLS] text_a [SEP] text_b [SEP]     token type 0 up to the first [SEP], 1 after it

  padded to `seq_len` (segment id 0 on padding, so attention ignores it); a pair too long loses
  tokens from the end of its longer text first (BERT's `_truncate_seq_pair`). `tok`: a
  tokenizer (data/text/tokenizer.py's interface, not imported: the kinds load no input code)."""
  n, num_texts = len(examples), len(examples.texts[0])
  per_text = [tok.encode([t[j] for t in examples.texts]) for j in range(num_texts)]
  rows, types = [], []
  truncated = 0
  for i in range(n):
    pieces = [ids[i] for ids in per_text]
    keep = _truncate([len(p) for p in pieces], seq_len - 1 - num_texts)
    truncated += keep != [len(p) for p in pieces]
    row, row_types = [special_ids.CLS_ID], [0]
    for j, (p, k) in enumerate(zip(pieces, keep)):
      row += list(p[:k]) + [special_ids.SEP_ID]
      row_types += [j] * (k + 1)
    rows.append(row)
    types.append(row_types)
  if truncated:
    logging.info("%s: %d of %d examples truncated to %d tokens", what, truncated, n, seq_len)
  return {**padded_rows(rows, types, seq_len),
          "labels": examples.labels, "weights": np.ones(n, np.float32)}


def text_starts(text: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
  """Piece starts (tok.encode_offsets) moved past leading spaces: sentencepiece's "▁" covers
  the space before a word, and a word (or an answer) starts at its first character."""
  return np.asarray([s + len(text[s:e]) - len(text[s:e].lstrip()) for s, e in zip(starts, ends)],
                    np.int64)


def flatten_groups(batch: dict) -> tuple[dict, tuple[int, int]]:
  """Rows grouped per example ([B, K, T]: K options, or an embedding pair's 2 texts) -> one
  [B*K, T] batch for the encoder, and (B, K) to restore the grouping of its outputs."""
  b, k, t = batch["input_ids"].shape
  return {key: v.reshape(b * k, t) if v.ndim == 3 else v for key, v in batch.items()}, (b, k)


def weighted_sums(losses_b: jax.Array, correct_b: jax.Array, weights_b: jax.Array) -> dict:
  """The sums every kind's objective reports: loss, right answers and their count."""
  return {"loss_sum": jnp.sum(losses_b * weights_b), "count": jnp.sum(weights_b),
          "correct": jnp.sum(correct_b * weights_b)}


def mean_objective(sums) -> steps.Objective:
  """An objective whose loss is the mean over the counted examples (or tokens) of the whole
  global batch: `sums(outputs, batch)` returns weighted_sums."""
  return steps.Objective(
      global_counts=lambda batch: {"count": jnp.sum(batch["weights"])}, sums=sums,
      loss=lambda s: s["loss_sum"] / jnp.maximum(s["count"], 1.0))


def log_softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
  """Host-side (dev scoring) log-probabilities, stable."""
  shifted = logits - logits.max(axis, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))
