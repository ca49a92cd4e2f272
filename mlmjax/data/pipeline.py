"""The grain input pipeline: documents -> sentences -> rows -> batches -> fresh masks.

    MapDataset.range(documents)[shard::shards]        each process reads only its own shards
      .shuffle(seed).repeat()                         a new document order every epoch
      .map_with_index(load)                           read + split sentences + sentencepiece,
                                                      lazily; the index gives the epoch
      -> formats.make_rows                            fixed-length rows (packed or pairs)
      -> WindowShuffle(data.row_shuffle_window)        rows of one document spread over batches
      .batch(batch_size / shards)
      .map_with_index(mask)                           index -> the global step: masks depend
                                                      only on (seed, step, global row)

One such chain per data shard (`data.num_shards`, default one per process); a process
concatenates its shards' batches. The iterator's state (grain's own per shard, including the
batch counter and the shuffle window) is checkpointed with the model, so a resumed run sees
exactly the batches and masks it would have seen, on the same or another number of processes.
"""

from __future__ import annotations

from collections.abc import Iterator
import itertools

from absl import logging
import grain
import jax
import numpy as np

from mlmjax import distributed
from mlmjax.data import formats
from mlmjax.data import masking
from mlmjax.data import sentences as sentences_lib
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.errors import DataError

# Eval masks and negatives come from their own seed so they never coincide with training's.
_EVAL_SEED_OFFSET = 1_000_003
# Keys the masker needs that the device does not.
_HOST_ONLY = ("sequence_keys", "epochs")


class DocumentReader:
  """Picklable: source index -> the document's tokenized sentences (empty ones dropped)."""

  def __init__(self, source, tokenizer_bytes: bytes):
    self.source = source
    self._tokenizer_bytes = tokenizer_bytes  # tok.to_bytes()
    self._tok = None
    self._warned = False

  def sentences(self, index: int) -> list[np.ndarray]:
    if self._tok is None:  # built lazily so grain worker processes each load their own
      self._tok = tokenizer_lib.from_bytes(self._tokenizer_bytes)
    ids = self._tok.encode(sentences_lib.split_sentences(self.source[index]))
    return [np.asarray(s, np.int32) for s in ids if s]

  def random_other(self, rng: np.random.Generator, not_index: int) -> list[np.ndarray]:
    """A random non-empty document other than `not_index` (for NSP negatives). A split of one
    document (a small corpus holds out one) has no other: its negatives come from elsewhere in
    the same document."""
    n = len(self.source)
    if n == 1:
      if not self._warned:
        self._warned = True
        logging.warning("%r has a single document: NSP negatives come from the same document",
                        self.source)
      return self.sentences(not_index)
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
  """(batch index, host batch) -> masked batch without the host-only keys."""

  def __init__(self, masker: masking.Masker, seed: int, first_step: int, first_example: int):
    self.masker = masker
    self.seed = seed
    self.first_step = first_step
    self.first_example = first_example

  def __call__(self, index: int, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    example_ids = self.first_example + np.arange(batch["input_ids"].shape[0])
    out = self.masker(batch, seed=self.seed, step=self.first_step + index,
                      example_ids=example_ids)
    return {k: v for k, v in out.items() if k not in _HOST_ONLY}


def num_shards(config) -> int:
  """Data shards: fixed by `data.num_shards`, or one per process when it is 0."""
  return config.data.num_shards or jax.process_count()


def local_shards(config) -> range:
  """The shards this process reads: a contiguous block, in global batch order."""
  per_process = num_shards(config) // jax.process_count()
  return range(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)


def _shard_dataset(config, tok, source, masker, word_start, seed: int, shuffle: bool,
                   first_step: int, shard: int) -> grain.IterDataset:
  """Batches of this shard's rows of each global batch: documents shard::num_shards."""
  shards = num_shards(config)
  rows_per_shard = config.train.batch_size // shards
  reader = DocumentReader(source, tok.to_bytes())
  doc_ids = grain.MapDataset.range(len(source))[shard::shards]
  if len(doc_ids) == 0:
    raise DataError(f"{source!r} has {len(source)} documents: fewer than the {shards} data"
                    " shards (data.num_shards, or one per process)")
  if shuffle:
    doc_ids = doc_ids.shuffle(seed=seed + 7 * shard)
  # BERT's static masking repeats its data every dupe_factor epochs: so do the rows built here.
  static = "static" in masker.settings.in_use()
  period = config.masking.dupe_factor if static else 0
  docs = doc_ids.repeat(None).map_with_index(_LoadDocument(reader, len(doc_ids), period))
  rows = formats.make_rows(docs.to_iter_dataset(), config.data.format, config.data.seq_len,
                           seed, num_bins=rows_per_shard, random_document=reader.random_other,
                           keep_origin=static, word_start=word_start)
  if shuffle and config.data.row_shuffle_window > 1:
    rows = grain.experimental.WindowShuffleIterDataset(
        rows, window_size=config.data.row_shuffle_window, seed=seed + 11 * shard)
  batches = rows.batch(rows_per_shard, drop_remainder=True)
  # Masks are keyed by the row's place in the global batch, whichever process builds it.
  return batches.map_with_index(_Mask(masker, seed, first_step, shard * rows_per_shard))


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
    """{"num_shards": N, "shards": {str(shard): grain state}} for this process's shards."""
    return {"num_shards": self.total_shards,
            "shards": {str(s): it.get_state() for s, it in self.shard_iters.items()}}

  def global_state(self) -> dict:
    """Every shard's state, gathered from all processes (a collective: all must call)."""
    parts = distributed.allgather_json(self.get_state())
    return {"num_shards": self.total_shards,
            "shards": {k: v for part in parts for k, v in part["shards"].items()}}

  def set_state(self, state: dict) -> None:
    """Takes a global position (every shard's state) and keeps this process's shards."""
    if state["num_shards"] != self.total_shards:
      raise DataError(
          f"the checkpoint's data position has {state['num_shards']} shards, this run"
          f" {self.total_shards}: set data.num_shards={state['num_shards']} to resume it")
    for s, it in self.shard_iters.items():
      it.set_state(state["shards"][str(s)])


def _make_iter(config, tok, source, masker, word_start, seed: int, shuffle: bool,
               first_step: int) -> ShardedIterator:
  return ShardedIterator(
      {s: iter(_shard_dataset(config, tok, source, masker, word_start, seed, shuffle,
                              first_step, s)) for s in local_shards(config)},
      num_shards(config))


def make_train_iter(config, tok, source, masker, word_start=None,
                    first_step: int = 0) -> ShardedIterator:
  """Endless iterator of this process's slice of each global training batch; its i-th batch
  trains step `first_step + i + 1` (masks are keyed by that step)."""
  return _make_iter(config, tok, source, masker, word_start, config.seed, shuffle=True,
                    first_step=first_step)


def make_eval_iter(config, tok, source, masker, word_start=None
                   ) -> Iterator[dict[str, np.ndarray]]:
  """The same `config.train.eval_batches` held-out batches, with the same masks, every time.

  A fixed count (cycling a small split) keeps every process in lock-step on multi-host runs.
  """
  it = _make_iter(config, tok, source, masker, word_start, config.seed + _EVAL_SEED_OFFSET,
                  shuffle=False, first_step=0)
  return itertools.islice(it, config.train.eval_batches)
