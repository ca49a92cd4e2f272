"""The grain input pipeline: documents -> tokens -> packed rows -> batches -> fresh masks.

    MapDataset(documents)[process::processes]   each process reads only its own shard
      .shuffle(seed).repeat()                   a new document order every epoch
      .map(tokenize)                            sentencepiece, lazily, per document
      -> FlatMap(chunk) -> FirstFitPack         fixed-length rows with segment_ids/positions
      .batch(local_batch)
      .map_with_index(mask)                     index == global train step: masks depend only on
                                                (seed, step, global example index)

The iterator's state (grain's own, including the batch counter) is checkpointed with the model,
so a resumed run sees exactly the batches and masks it would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator
import functools
import itertools

import grain
import jax
import numpy as np

from mlmjax.data import formats
from mlmjax.data import masking
from mlmjax.data import sources as sources_lib
from mlmjax.data import tokenizer as tokenizer_lib

# Eval masks come from their own seed so they never coincide with a training step's masks.
_EVAL_SEED_OFFSET = 1_000_003


class _Tokenize:
  """Picklable map: document text -> int32 ids (lines joined by spaces)."""

  def __init__(self, model_proto: bytes):
    self._model_proto = model_proto
    self._tok = None

  def __call__(self, text: str) -> np.ndarray:
    if self._tok is None:  # built lazily so grain worker processes each load their own
      self._tok = tokenizer_lib.Tokenizer(self._model_proto)
    return np.asarray(self._tok.sp.encode(text.replace("\n", " ")), np.int32)


def _mask(step: int, batch: dict[str, np.ndarray], *, seed: int, first_example: int,
          vocab_size: int, masking_config) -> dict[str, np.ndarray]:
  num_rows = batch["input_ids"].shape[0]
  example_ids = first_example + np.arange(num_rows)
  return masking.mask_batch(
      batch, seed=seed, step=step, example_ids=example_ids, vocab_size=vocab_size,
      mask_rate=masking_config.mask_rate, mask_token_prob=masking_config.mask_token_prob,
      random_token_prob=masking_config.random_token_prob,
      max_predictions=masking_config.max_predictions_per_seq)


def local_batch_size(global_batch: int) -> int:
  return global_batch // jax.process_count()


def _make_dataset(config, tok: tokenizer_lib.Tokenizer, source: sources_lib.TextSource,
                  seed: int, shuffle: bool) -> grain.IterDataset:
  local_batch = local_batch_size(config.train.batch_size)
  docs = grain.MapDataset.source(source)[jax.process_index()::jax.process_count()]
  if shuffle:
    docs = docs.shuffle(seed=seed)
  docs = docs.repeat(None).map(_Tokenize(tok.model_proto))
  rows = formats.pack_full_sentences(
      docs.to_iter_dataset(), config.data.seq_len, num_bins=local_batch, seed=seed)
  batches = rows.batch(local_batch, drop_remainder=True)
  return batches.map_with_index(functools.partial(
      _mask, seed=seed, first_example=jax.process_index() * local_batch,
      vocab_size=tok.vocab_size, masking_config=config.masking))


def make_train_iter(config, tok, source) -> grain.DatasetIterator:
  """Endless iterator of this process's slice of each global training batch."""
  return iter(_make_dataset(config, tok, source, config.seed, shuffle=True))


def make_eval_iter(config, tok, source) -> Iterator[dict[str, np.ndarray]]:
  """The same `config.train.eval_batches` held-out batches, with the same masks, every time.

  A fixed count (cycling a small split) keeps every process in lock-step on multi-host runs.
  """
  ds = _make_dataset(config, tok, source, config.seed + _EVAL_SEED_OFFSET, shuffle=False)
  return itertools.islice(iter(ds), config.train.eval_batches)
