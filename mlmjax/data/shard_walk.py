"""A process's stream of batches: its data shards walked in windows, in grain worker processes
or not, with the same batches either way.

One data shard (documents s::num_shards of a split) is walked like this:

    documents -> a fresh order every epoch -> units (rows/formats.py) -> packing rounds of
    rows_per_shard rows (rows/packing.py) -> windows of G rounds, rows shuffled within a window
    (G = row_shuffle_window / rows_per_shard, rounded up) -> batches of rows_per_shard rows

A window is a pure function of where it starts: the cursor (the document's place in the
stream, the unit within it) and the window's number. A shard's position is therefore a few
integers, {window, doc, unit, batch (taken of this window), documents (of the shard, to catch a
different corpus)}, and restoring it recomputes one window. A process walks its shards in lock
step and puts their rows side by side (the global batch is all shards' rows in shard order,
however shards are spread over processes); pipeline.py masks the batches.

Parallel input (`data.worker_count` = W > 0). grain's mp_prefetch gives worker i of W the slice
i::W; here that means: every worker walks the whole stream (which documents, how units pack:
cheap bookkeeping) but builds (and masks: pipeline.py) only the batches b0 + i, b0 + i + W, ...
(b0: where the iterator started). grain interleaves the workers round-robin, which is exactly
the order of W = 0, so batches, masks and positions do not depend on W. Building arrays and
masking are most of the work for prepared data; with raw text every worker also tokenizes every
document it walks, so prepare the data to gain from workers.
"""

from __future__ import annotations

import dataclasses
import math

from absl import logging
import grain
import numpy as np

from mlmjax.data.rows import formats
from mlmjax.data.rows import packing
from mlmjax.data.masking.uniforms import GOLDEN, mix64
from mlmjax.errors import DataError

# Positions of an epoch's document order computed at a time.
_ORDER_BLOCK = 1 << 16


@dataclasses.dataclass(frozen=True, eq=False)
class StreamSpec:
  """Everything a process's stream is made of (picklable: grain sends it to its workers)."""

  documents: object  # documents.DocumentReader or reader.PreparedSplit: len, sentences(i)
  data_format: str
  seq_len: int
  rows_per_shard: int
  num_shards: int
  shards: tuple[int, ...]  # this process's, contiguous
  seed: int
  shuffle: bool  # documents (every epoch) and rows (within windows); off for eval
  window_rows: int  # data.row_shuffle_window
  epoch_period: int  # data repeats every this many epochs (static masking's dupe_factor), or 0
  sequence_keys: bool  # batches carry sequence_keys and epochs (static masking reads them)
  word_start: np.ndarray | None

  @property
  def window_rounds(self) -> int:
    if not self.shuffle or self.window_rows <= 1:
      return 1
    return math.ceil(self.window_rows / self.rows_per_shard)


def permutation(x: np.ndarray, n: int, key: tuple[int, ...]) -> np.ndarray:
  """x (uint64 in [0, n)) -> its image under a random bijection of [0, n) chosen by `key`:
  a 4-round Feistel network over the smallest power of 4 >= n, re-applied to values that land
  beyond n (cycle walking). Vectorised, and needs no table of n entries, so a shard of
  hundreds of millions of documents is shuffled in blocks at no memory cost."""
  half = max(1, ((n - 1).bit_length() + 1) // 2)
  mask = np.uint64((1 << half) - 1)

  def rounds(v):
    left, right = v >> np.uint64(half), v & mask
    for k in keys:
      left, right = right, left ^ (mix64(right ^ k) & mask)
    return (left << np.uint64(half)) | right

  with np.errstate(over="ignore"):  # uint64 arithmetic wraps on purpose
    k = np.uint64(0)
    for part in key:
      k = mix64(k ^ (np.uint64(part) + GOLDEN))
    keys = [mix64(k + np.uint64(r)) for r in range(4)]
    out = rounds(x)
    while (beyond := out >= n).any():
      out[beyond] = rounds(out[beyond])
  return out


class ShardWalk:
  """One data shard's rows, batch by batch (module docstring)."""

  def __init__(self, spec: StreamSpec, shard: int):
    self.spec, self.shard = spec, shard
    self.count = len(range(shard, len(spec.documents), spec.num_shards))
    if self.count == 0:
      raise DataError(f"{spec.documents!r} has {len(spec.documents)} documents: fewer than the"
                      f" {spec.num_shards} data shards (data.num_shards, or one per process)")
    self._units_of = formats.unit_maker(spec.data_format, spec.seq_len, spec.seed,
                                        self._random_other, spec.word_start)
    self._order: tuple = (None, None)  # ((epoch, block), that block of its order)
    self._last: tuple[int, list] = (-1, [])  # (stream position, its units)
    self._warned = False
    self.window, self.doc, self.unit, self.batch = 0, 0, 0, 0
    self._rows: list | None = None  # the current window's rows, shuffled
    self._next_cursor = (0, 0)

  # ---- documents ------------------------------------------------------------------------------
  def _index(self, k: int) -> int:
    """The split index of this shard's k-th document."""
    return self.shard + k * self.spec.num_shards

  def _document(self, i: int) -> formats.Document:
    """The document at stream position i (epoch i // count)."""
    epoch, k = divmod(i, self.count)
    if self.spec.shuffle:  # a block of the epoch's permutation at a time: O(1) memory
      block, j = divmod(k, _ORDER_BLOCK)
      if self._order[0] != (epoch, block):
        start = block * _ORDER_BLOCK
        positions = np.arange(start, min(start + _ORDER_BLOCK, self.count), dtype=np.uint64)
        self._order = ((epoch, block), permutation(positions, self.count,
                                                   (self.spec.seed, self.shard, epoch)))
      k = int(self._order[1][j])
    key = epoch % self.spec.epoch_period if self.spec.epoch_period else epoch
    index = self._index(k)
    return formats.Document(index, key, self.spec.documents.sentences(index))

  def _units(self, i: int) -> list:
    if self._last[0] != i:
      self._last = (i, self._units_of(self._document(i)))
    return self._last[1]

  def _random_other(self, rng: np.random.Generator, not_index: int) -> list[np.ndarray]:
    """A random non-empty document of this shard other than `not_index` (NSP negatives; the
    shard's own, so a process reads only its own shards). A shard of one document (a small
    corpus holds out one) has no other: its negatives come from the same document."""
    docs, n = self.spec.documents, self.count
    if n == 1:
      if not self._warned:
        self._warned = True
        logging.warning("%r has a single document in data shard %d: NSP negatives come from the"
                        " same document", docs, self.shard)
      return docs.sentences(not_index)
    not_k = (not_index - self.shard) // self.spec.num_shards
    for _ in range(20):
      k = int(rng.integers(n - 1))
      sentences = docs.sentences(self._index(k + (k >= not_k)))  # uniform over the others
      if sentences:
        return sentences
    return docs.sentences(not_index)  # a shard of (nearly) empty documents

  # ---- windows --------------------------------------------------------------------------------
  def _fill_window(self) -> None:
    spec = self.spec
    size = spec.window_rounds * spec.rows_per_shard
    packer = packing.Packer(spec.rows_per_shard, spec.seq_len, formats.packs(spec.data_format))
    i, u = self.doc, self.unit
    units, empty = self._units(i), 0
    rows: list = []
    while len(rows) < size:
      if u < len(units):
        if packer.add(units[u]):
          u += 1
        else:
          rows.extend(packer.take())
        continue
      i, u = i + 1, 0
      units = self._units(i)
      empty = 0 if units else empty + 1
      if empty > self.count:  # a whole epoch without a token: it would never end
        raise DataError(f"{spec.documents!r}: no document of data shard {self.shard} has any"
                        " tokens")
    if spec.shuffle and spec.window_rows > 1:
      order = np.random.default_rng([spec.seed, self.shard, self.window, 1]).permutation(size)
      rows = [rows[j] for j in order]
    self._rows, self._next_cursor = rows, (i, u)

  def next_rows(self) -> list:
    """The rows (lists of units) of this shard's next batch."""
    if self._rows is None:
      self._fill_window()
    n = self.spec.rows_per_shard
    rows = self._rows[self.batch * n:(self.batch + 1) * n]
    self.batch += 1
    if self.batch == self.spec.window_rounds:
      self.window, self.batch = self.window + 1, 0
      self.doc, self.unit = self._next_cursor
      self._rows = None
    return rows

  @property
  def batch_index(self) -> int:
    """Batches taken since the stream's start."""
    return self.window * self.spec.window_rounds + self.batch

  def state(self) -> dict[str, int]:
    return {"window": self.window, "doc": self.doc, "unit": self.unit, "batch": self.batch,
            "documents": self.count}

  def set_state(self, state: dict) -> None:
    if state.get("documents") != self.count:
      raise DataError(
          f"the checkpoint's data position is for {state.get('documents')} documents in data"
          f" shard {self.shard}, {self.spec.documents!r} has {self.count} there: it is another"
          " corpus or split (a raw source and its prepared form hold the same documents)")
    self.window, self.doc, self.unit, self.batch = (
        int(state[k]) for k in ("window", "doc", "unit", "batch"))
    self._rows = None


class LocalStream(grain.IterDataset):
  """This process's batches from `state` on (None: the start), as (batch index, arrays,
  position after it). Sliced by grain's mp_prefetch, worker i of n yields every n-th batch."""

  def __init__(self, spec: StreamSpec, state: dict | None = None):
    super().__init__()
    self.spec, self.state = spec, state
    self.worker, self.workers = 0, 1

  def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
    """grain's hook for mp_prefetch: this copy runs in worker `sl.start` of `sl.step`."""
    del sequential_slice
    self.worker, self.workers = sl.start or 0, sl.step or 1

  def __iter__(self) -> _LocalStreamIterator:
    return _LocalStreamIterator(self)

  def __str__(self) -> str:
    return f"LocalStream(shards {self.spec.shards}, worker {self.worker} of {self.workers})"


class _LocalStreamIterator(grain.DatasetIterator):

  def __init__(self, ds: LocalStream):
    super().__init__()
    self._spec = ds.spec
    self._walks = {s: ShardWalk(ds.spec, s) for s in ds.spec.shards}
    if ds.state is not None:
      self.set_state(ds.state)
    self._start = self._batch_index()
    self._worker, self._workers = ds.worker, ds.workers

  def _batch_index(self) -> int:
    return next(iter(self._walks.values())).batch_index  # shards move in lock step

  def __next__(self) -> tuple[int, dict[str, np.ndarray], dict]:
    while True:  # walk past the other workers' batches
      b = self._batch_index()
      rows = [row for walk in self._walks.values() for row in walk.next_rows()]
      if (b - self._start) % self._workers == self._worker:
        break
    spec = self._spec
    batch = packing.materialize(rows, spec.seq_len, sequence_keys=spec.sequence_keys,
                                 pairs=formats.has_pair_labels(spec.data_format))
    return b, batch, self.get_state()

  def get_state(self) -> dict:
    return {str(s): walk.state() for s, walk in self._walks.items()}

  def set_state(self, state: dict) -> None:
    for s, walk in self._walks.items():
      walk.set_state(state[str(s)])
