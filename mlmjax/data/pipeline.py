"""The input pipeline of a process: its data shards' batches, masked, with a checkpointable
position; built in grain worker processes when `data.worker_count` > 0.

    split (raw text or prepared) -> documents s::num_shards per data shard -> shard_walk.py
    (document order, units, packing, row windows, batches, masks) -> ShardedIterator

The global batch is every shard's rows in shard order, however the shards are spread over
processes, so a run gives the same batches on 1 or N processes; its checkpointed position (one
small state per shard) restores onto any process count and any `data.worker_count`, and onto
the raw or the prepared form of the same corpus (they hold the same documents).

Masks are a pure function of (seed, step, global row). They are made with the batch (in a
worker, when there are workers) unless they depend on what training feeds back (adaptive
masking): then the consumer makes them when it takes the batch (`finish`), after the loop has
handed over the metrics the weight table is made from, so they are the same whatever was
prefetched (see prefetch.py).
"""

from __future__ import annotations

from collections.abc import Iterator
import itertools

from absl import flags
import grain
import jax
import numpy as np

from mlmjax.data import masking
from mlmjax.data import shard_walk
from mlmjax.data.documents import DocumentReader  # pylint: disable=unused-import  (re-exported)
from mlmjax.data.settings import InputSettings
from mlmjax.errors import ConfigError
from mlmjax.errors import DataError
from mlmjax.parallel import distributed

# Eval masks and negatives come from their own seed so they never coincide with training's.
_EVAL_SEED_OFFSET = 1_000_003
# Batches each grain worker process may hold ready.
_WORKER_BUFFER = 2


def num_shards(data: InputSettings) -> int:
  """Data shards: fixed by `data.num_shards`, or one per process when it is 0."""
  return data.num_shards or jax.process_count()


def local_shards(data: InputSettings) -> range:
  """The shards this process reads: a contiguous block, in global batch order."""
  per_process = num_shards(data) // jax.process_count()
  return range(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)


def gather(local_state: dict) -> dict:
  """Every shard's position, gathered from all processes (a collective: all must call)."""
  parts = distributed.allgather_json(local_state)
  return {"num_shards": local_state["num_shards"],
          "shards": {k: v for part in parts for k, v in part["shards"].items()}}


class ShardedIterator:
  """This process's slice of each global batch (module docstring).

  `next_unfinished()` + `finish(item)` split `next()` for a prefetcher: the first may run ahead
  (on another thread), the second makes masks that must wait for the training loop.
  """

  def __init__(self, spec: shard_walk.StreamSpec, worker_count: int = 0,
               late_masker: masking.Masker | None = None):
    self.spec, self.worker_count, self.late_masker = spec, worker_count, late_masker
    if worker_count and not flags.FLAGS.is_parsed():
      # grain configures its worker processes from absl flags: the program that owns the
      # command line parses them (mlmjax's commands do), never a library behind its back.
      raise ConfigError(
          f"data.worker_count={worker_count} starts grain worker processes, which read absl"
          " flags, and this program has parsed none: call absl.flags.FLAGS.mark_as_parsed()"
          " (or absl.app.run) before training, as launch/colab_tpu.ipynb does")
    # Walks of every local shard, made now so that a bad split fails here, not in a worker.
    self._state = {str(s): shard_walk.ShardWalk(spec, s).state() for s in spec.shards}
    self._it = None

  @property
  def masks_late(self) -> bool:
    return self.late_masker is not None

  def next_unfinished(self) -> tuple[int, dict[str, np.ndarray]]:
    if self._it is None:
      ds = shard_walk.LocalStream(self.spec, self._state)
      if self.worker_count:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=self.worker_count, per_worker_buffer_size=_WORKER_BUFFER))
      self._it = iter(ds)
    b, batch, self._state = next(self._it)
    return b, batch

  def finish(self, item: tuple[int, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    b, batch = item
    if self.late_masker is not None:
      batch = shard_walk.mask(self.spec, self.late_masker, batch, b)
    return batch

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    return self.finish(self.next_unfinished())

  def get_state(self) -> dict:
    """{"num_shards": N, "shards": {str(shard): position}} for this process's shards."""
    return {"num_shards": self.spec.num_shards, "shards": dict(self._state)}

  def global_state(self) -> dict:
    return gather(self.get_state())

  def set_state(self, state: dict) -> None:
    """Takes a global position (every shard's) and keeps this process's shards."""
    if state["num_shards"] != self.spec.num_shards:
      raise DataError(
          f"the checkpoint's data position has {state['num_shards']} shards, this run"
          f" {self.spec.num_shards}: set data.num_shards={state['num_shards']} to resume it")
    mine = {str(s): state["shards"][str(s)] for s in self.spec.shards}
    if not all("window" in s for s in mine.values()):
      raise DataError("the checkpoint's data position was written by an older mlmjax input"
                      " pipeline and cannot be resumed exactly; start a new --workdir")
    for s in self.spec.shards:  # checks now that it is the same corpus
      shard_walk.ShardWalk(self.spec, s).set_state(mine[str(s)])
    self.close()
    self._state = mine

  def close(self) -> None:
    """Stops grain's worker processes, if any (the position is kept)."""
    if self._it is not None and hasattr(self._it, "close"):
      self._it.close()
    self._it = None


def _spec(data: InputSettings, documents, masker: masking.Masker, word_start, *,
          batch_size: int, seq_len: int, seed: int, shuffle: bool, first_step: int,
          late: bool = False) -> shard_walk.StreamSpec:
  """`late`: the masks are made by the consumer, not with the batch."""
  static = "static" in masker.settings.in_use()
  return shard_walk.StreamSpec(
      documents=documents, data_format=data.format, seq_len=seq_len,
      rows_per_shard=batch_size // num_shards(data),
      num_shards=num_shards(data), shards=tuple(local_shards(data)), seed=seed,
      shuffle=shuffle, window_rows=data.row_shuffle_window,
      # BERT's static masking repeats its data every dupe_factor epochs: so do the rows here.
      epoch_period=masker.settings.dupe_factor if static else 0, origin=static,
      word_start=word_start, masker=None if late else masker, first_step=first_step)


def _tokenized(source, tok):
  """Prepared splits are tokenized already; text is tokenized as it is read."""
  return source if hasattr(source, "sentences") else DocumentReader(source, tok.to_bytes())


def make_train_iter(data: InputSettings, tok, source, masker: masking.Masker, *,
                    batch_size: int, seq_len: int, seed: int, word_start=None,
                    first_step: int = 0) -> ShardedIterator:
  """Endless iterator of this process's slice of each global training batch of `batch_size`
  rows of `seq_len` tokens; its i-th batch trains step `first_step + i + 1` (masks are keyed by
  that step). Adaptive masks follow the weights training feeds back, so they are made late
  (`finish`)."""
  late = "adaptive" in masker.settings.in_use()
  spec = _spec(data, _tokenized(source, tok), masker, word_start, batch_size=batch_size,
               seq_len=seq_len, seed=seed, shuffle=True, first_step=first_step, late=late)
  return ShardedIterator(spec, data.worker_count, masker if late else None)


def make_eval_iter(data: InputSettings, tok, source, masker: masking.Masker, *,
                   batch_size: int, seq_len: int, seed: int, num_batches: int,
                   word_start=None) -> Iterator[dict[str, np.ndarray]]:
  """The same `num_batches` held-out batches, with the same masks, every time.

  A fixed count (cycling a small split) keeps every process in lock-step on multi-host runs.
  Built in this process: a few batches do not pay for starting workers.
  """
  spec = _spec(data, _tokenized(source, tok), masker, word_start, batch_size=batch_size,
               seq_len=seq_len, seed=seed + _EVAL_SEED_OFFSET, shuffle=False, first_step=0)
  return itertools.islice(ShardedIterator(spec), num_batches)
