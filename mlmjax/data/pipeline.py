"""The grain input pipeline: documents -> sentences -> rows -> batches -> fresh masks.

    MapDataset.range(documents)[shard::shards]        each process reads only its own shards
      .shuffle(seed).repeat()                         a new document order every epoch
      .map_with_index(load)                           read + split sentences + sentencepiece,
                                                      lazily; the index gives the epoch
      -> formats.make_rows                            fixed-length rows (packed or pairs)
      .batch(batch_size / shards)
      .map_with_index(mask)                           index == step within the phase: masks
                                                      depend only on (seed, step, global row)

One such chain per data shard (`data.num_shards`, default one per process); a process
concatenates its shards' batches. The iterator's state (grain's own per shard, including the
batch counter) is checkpointed with the model, so a resumed run sees exactly the batches and
masks it would have seen, on the same or another number of processes.
"""

from __future__ import annotations

from collections.abc import Iterator
import itertools

import grain
import jax
import numpy as np

from mlmjax.data import formats
from mlmjax.data import masking
from mlmjax.data import masking_settings
from mlmjax.data import sentences as sentences_lib
from mlmjax.data import sources as sources_lib
from mlmjax.data import tokenizer as tokenizer_lib

# Eval masks and negatives come from their own seed so they never coincide with training's.
_EVAL_SEED_OFFSET = 1_000_003
# Keys the masker needs that the device does not.
_HOST_ONLY = ("sequence_keys", "epochs")


class DocumentReader:
  """Picklable: source index -> the document's tokenized sentences (empty ones dropped)."""

  def __init__(self, source, model_proto: bytes):
    self.source = source
    self._model_proto = model_proto
    self._sp = None

  def sentences(self, index: int) -> list[np.ndarray]:
    if self._sp is None:  # built lazily so grain worker processes each load their own
      self._sp = tokenizer_lib.Tokenizer(self._model_proto).sp
    ids = self._sp.encode(sentences_lib.split_sentences(self.source[index]))
    return [np.asarray(s, np.int32) for s in ids if s]

  def random_other(self, rng: np.random.Generator, not_index: int) -> list[np.ndarray]:
    """A random non-empty document other than `not_index` (for NSP negatives)."""
    n = len(self.source)
    for _ in range(20):
      j = int(rng.integers(n - 1))
      j += j >= not_index  # uniform over the other n - 1 documents
      sentences = self.sentences(j)
      if sentences:
        return sentences
    return self.sentences(not_index)  # a corpus of (nearly) empty documents


class _LoadDocument:
  """(stream index, source index) -> formats.Document."""

  def __init__(self, reader: DocumentReader, docs_per_epoch: int, epoch_period: int):
    self.reader = reader
    self.docs_per_epoch = docs_per_epoch
    self.epoch_period = epoch_period

  def __call__(self, i: int, doc_index: int) -> formats.Document:
    epoch = i // self.docs_per_epoch
    key = epoch % self.epoch_period if self.epoch_period else epoch
    return formats.Document(int(doc_index), key, self.reader.sentences(int(doc_index)))


class _Mask:
  """(step, host batch) -> masked batch without the host-only keys."""

  def __init__(self, masker: masking.Masker, seed: int, first_example: int):
    self.masker = masker
    self.seed = seed
    self.first_example = first_example

  def __call__(self, step: int, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    example_ids = self.first_example + np.arange(batch["input_ids"].shape[0])
    out = self.masker(batch, seed=self.seed, step=step, example_ids=example_ids)
    return {k: v for k, v in out.items() if k not in _HOST_ONLY}


def num_shards(config) -> int:
  """Data shards: fixed by `data.num_shards`, or one per process when it is 0."""
  return config.data.num_shards or jax.process_count()


def local_shards(config) -> range:
  """The shards this process reads: a contiguous block, in global batch order."""
  per_process = num_shards(config) // jax.process_count()
  return range(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)


def _shard_dataset(config, tok: tokenizer_lib.Tokenizer, source, masker: masking.Masker,
                   seed: int, shuffle: bool, shard: int) -> grain.IterDataset:
  """Batches of this shard's rows of each global batch: documents shard::num_shards."""
  shards = num_shards(config)
  rows_per_shard = config.train.batch_size // shards
  reader = DocumentReader(source, tok.model_proto)
  doc_ids = grain.MapDataset.range(len(source))[shard::shards]
  if len(doc_ids) == 0:
    raise sources_lib.DataError(
        f"{source!r} has {len(source)} documents: fewer than the {shards} data shards"
        " (data.num_shards, or one per process)")
  if shuffle:
    doc_ids = doc_ids.shuffle(seed=seed + 7 * shard)
  # BERT's static masking repeats its data every dupe_factor epochs: so do the rows built here.
  static = "static" in masking_settings.strategies_in_use(config.masking)
  period = config.masking.dupe_factor if static else 0
  docs = doc_ids.repeat(None).map_with_index(_LoadDocument(reader, len(doc_ids), period))
  rows = formats.make_rows(docs.to_iter_dataset(), config.data.format, config.data.seq_len,
                           seed, num_bins=rows_per_shard, random_document=reader.random_other,
                           keep_origin=static)
  batches = rows.batch(rows_per_shard, drop_remainder=True)
  # Masks are keyed by the row's place in the global batch, whichever process builds it.
  return batches.map_with_index(_Mask(masker, seed, shard * rows_per_shard))


class ShardedIterator(grain.DatasetIterator):
  """This process's slice of each global batch: its shards' batches, concatenated.

  The global batch is the concatenation of all shards in order, however the shards are spread
  over processes, so a run gives the same batches on 1 or N processes, and its checkpointed
  position (one grain state per shard) restores onto any process count.
  """

  def __init__(self, shard_iters: dict[int, grain.DatasetIterator], total_shards: int):
    super().__init__(list(shard_iters.values()))
    self.shard_iters = shard_iters
    self.total_shards = total_shards

  def __next__(self) -> dict[str, np.ndarray]:
    parts = [next(it) for it in self.shard_iters.values()]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

  def get_state(self) -> dict:
    """{"num_shards": N, "shards": {str(shard): grain state}} for this process's shards;
    the states of all processes merged (see checkpoint.py) make the global position."""
    return {"num_shards": self.total_shards,
            "shards": {str(s): it.get_state() for s, it in self.shard_iters.items()}}

  def set_state(self, state: dict) -> None:
    """Takes a global position (every shard's state) and keeps this process's shards."""
    if state["num_shards"] != self.total_shards:
      raise sources_lib.DataError(
          f"the checkpoint's data position has {state['num_shards']} shards, this run"
          f" {self.total_shards}: set data.num_shards={state['num_shards']} to resume it")
    for s, it in self.shard_iters.items():
      it.set_state(state["shards"][str(s)])


def _make_iter(config, tok, source, masker, seed: int, shuffle: bool) -> ShardedIterator:
  shards, p, b = num_shards(config), jax.process_count(), config.train.batch_size
  if shards % p or b % shards:
    raise sources_lib.DataError(
        f"data.num_shards={shards} must be a multiple of the {p} processes and divide"
        f" train.batch_size={b}")
  return ShardedIterator({s: iter(_shard_dataset(config, tok, source, masker, seed, shuffle, s))
                          for s in local_shards(config)}, shards)


def make_train_iter(config, tok, source, masker) -> ShardedIterator:
  """Endless iterator of this process's slice of each global training batch."""
  return _make_iter(config, tok, source, masker, config.seed, shuffle=True)


def make_eval_iter(config, tok, source, masker) -> Iterator[dict[str, np.ndarray]]:
  """The same `config.train.eval_batches` held-out batches, with the same masks, every time.

  A fixed count (cycling a small split) keeps every process in lock-step on multi-host runs.
  """
  it = _make_iter(config, tok, source, masker, config.seed + _EVAL_SEED_OFFSET, shuffle=False)
  return itertools.islice(it, config.train.eval_batches)
