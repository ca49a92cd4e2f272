"""The input pipeline of a process: its data shards' batches, masked, with a checkpointable
position; built in grain worker processes when `data.worker_count` > 0.

The stages of a training batch, from a file to the step (one module each, in this order):

     1. corpora/sources.py,      the split: documents by index (text, or token ids prepared)
        prepared/reader.py
     2. text/documents.py        a text document's sentences as token ids (raw text only),
                                 with spaCy's word annotations when masking reads them
     3. shard_walk.py            this data shard's document order: a fresh permutation an epoch
     4. rows/formats.py          a document -> units, the sequences of a row (RoBERTa's
                                 formats, NSP/SOP pairs)
     5. rows/packing.py          units -> rows (first-fit packing), then a batch's rows ->
                                 arrays (models/batch_schema.py's ROWS)
     6. shard_walk.py            rows shuffled within windows; the shards' rows side by side
                                 (LocalStream: one grain dataset, sliced over the workers)
     7. masking/ (`Masking`)     the masks, keyed by (seed, step, global row)
     8. `ShardedIterator`        the batches of this process, its checkpointed position
     9. prefetch.py (`on_mesh`)  put on the device mesh ahead of the step

Stages 1-7 run in the grain workers when there are any. Each stage hands its output to the next
and nothing comes back: 9 hops, 8 modules (plus sharding.to_device).

The global batch is every shard's rows in shard order, however the shards are spread over
processes, so a run gives the same batches on 1 or N processes; its checkpointed position (one
small state per shard) restores onto any process count and any `data.worker_count`, and onto
the raw or the prepared form of the same corpus (they hold the same documents).

Masks are a pure function of (seed, step, global row). They are made with the batch (in a
worker, when there are workers) unless they depend on what training feeds back (adaptive
masking): then stage 7 runs after stage 9's prefetch, when the loop takes the batch, after the
loop has handed over the metrics the weight table is made from, so the masks are the same
whatever was prefetched.
"""

from __future__ import annotations

from collections.abc import Iterator
import itertools

from absl import flags
import grain
import jax
import numpy as np

from mlmjax.data.text import annotation
from mlmjax.data import masking
from mlmjax.data import prefetch
from mlmjax.data import shard_walk
# re-exported: the pipeline's readers in one place
from mlmjax.data.text.documents import DocumentReader  # pylint: disable=unused-import
from mlmjax.data.settings import InputSettings
from mlmjax.errors import ConfigError
from mlmjax.errors import DataError
from mlmjax.models import batch_schema
from mlmjax.parallel import distributed
from mlmjax.parallel import sharding

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


class Masking:
  """The masks of batch b (this process's rows of the global batch b of the stream): keyed by
  its step, first_step + b, and each row's place in the global batch. Picklable: with grain
  workers it runs in them."""

  def __init__(self, spec: shard_walk.StreamSpec, masker: masking.Masker, first_step: int):
    self.masker, self.seed, self.first_step = masker, spec.seed, first_step
    self.first_row = spec.shards[0] * spec.rows_per_shard

  def __call__(self, batch: dict[str, np.ndarray], b: int) -> dict[str, np.ndarray]:
    return {k: v for k, v in self.with_host_keys(batch, b).items()
            if k not in batch_schema.HOST_ONLY}

  def with_host_keys(self, batch: dict[str, np.ndarray], b: int) -> dict[str, np.ndarray]:
    """The masked batch with the host-only arrays still in it (what mlmjax.show_masks reads)."""
    return self.masker(batch, seed=self.seed, step=self.first_step + b,
                       example_ids=self.first_row + np.arange(len(batch["input_ids"])))

  def of_item(self, item: tuple) -> tuple:
    """The stage over LocalStream's items: (b, batch, position) -> (b, masked, position)."""
    b, batch, position = item
    return b, self(batch, b), position


class ShardedIterator:
  """This process's slice of each global batch (module docstring), masked by `masking`; with
  `masks_late`, not yet (`on_mesh` masks them when the training loop takes them)."""

  def __init__(self, spec: shard_walk.StreamSpec, masking_stage: Masking, worker_count: int = 0,
               masks_late: bool = False):
    self.spec, self.masking, self.worker_count = spec, masking_stage, worker_count
    self.masks_late = masks_late
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

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._it is None:
      ds = shard_walk.LocalStream(self.spec, self._state)
      if not self.masks_late:
        ds = ds.map(self.masking.of_item)  # in the workers, if any
      if self.worker_count:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=self.worker_count, per_worker_buffer_size=_WORKER_BUFFER))
      self._it = iter(ds)
    _, batch, self._state = next(self._it)
    return batch

  def get_state(self) -> dict:
    """{"num_shards": N, "shards": {str(shard): position}} for this process's shards."""
    return {"num_shards": self.spec.num_shards, "shards": dict(self._state)}

  def global_state(self) -> dict:
    return gather(self.get_state())

  @staticmethod
  def gather(state: dict) -> dict:
    """A position of this iterator (get_state()) made global, as a checkpoint stores it."""
    return gather(state)

  def batch_index(self, state: dict) -> int:
    """Batches taken since the stream's start at the position `state` (get_state())."""
    shard = state["shards"][str(self.spec.shards[0])]  # shards move in lock step
    return shard["window"] * self.spec.window_rounds + shard["batch"]

  def mask_late(self, batch: dict[str, np.ndarray], position: dict) -> dict[str, np.ndarray]:
    """With `masks_late`: the masks of the batch this iterator handed out at `position` (the
    position after it, get_state() then), made now."""
    return self.masking(batch, self.batch_index(position) - 1)

  def next_masked(self) -> dict[str, np.ndarray]:
    """The next batch with its masks, late ones made now: what a consumer without `on_mesh`
    (the input benchmark, tests) takes."""
    batch = next(self)
    return self.mask_late(batch, self.get_state()) if self.masks_late else batch

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
          batch_size: int, seq_len: int, seed: int, shuffle: bool) -> shard_walk.StreamSpec:
  static = "static" in masker.settings.in_use()
  return shard_walk.StreamSpec(
      documents=documents, data_format=data.format, seq_len=seq_len,
      rows_per_shard=batch_size // num_shards(data),
      num_shards=num_shards(data), shards=tuple(local_shards(data)), seed=seed,
      shuffle=shuffle, window_rows=data.row_shuffle_window,
      # BERT's static masking repeats its data every dupe_factor epochs: so do the rows here.
      epoch_period=masker.settings.dupe_factor if static else 0, sequence_keys=static,
      word_start=word_start)


def tokenized(source, tok, annotator: annotation.Annotator | None = None):
  """Documents as token ids (documents.py): prepared splits are tokenized (and annotated)
  already; text is tokenized (and annotated, with `annotator`) as it is read."""
  if not hasattr(source, "sentences"):
    return DocumentReader(source, tok.to_bytes(), annotator)
  if annotator is not None and not source.annotated:
    raise DataError(f"{source!r} was prepared without word annotations, which this masking"
                    " needs (syntax, or entity with entity_ner): prepare it again with this"
                    " run's config")
  return source


def make_train_iter(data: InputSettings, tok, source, masker: masking.Masker, *,
                    batch_size: int, seq_len: int, seed: int, word_start=None,
                    first_step: int = 0) -> ShardedIterator:
  """Endless iterator of this process's slice of each global training batch of `batch_size`
  rows of `seq_len` tokens; its i-th batch trains step `first_step + i + 1` (masks are keyed by
  that step). Adaptive masks follow the weights training feeds back, so they are made late
  (`on_mesh`)."""
  spec = _spec(data, tokenized(source, tok, masker.settings.annotator()), masker, word_start,
               batch_size=batch_size, seq_len=seq_len, seed=seed, shuffle=True)
  return ShardedIterator(spec, Masking(spec, masker, first_step), data.worker_count,
                         masks_late="adaptive" in masker.settings.in_use())


def on_mesh(host: ShardedIterator, mesh, depth: int) -> prefetch.Prefetcher:
  """The stream's last stage: `host`'s batches put on the mesh by a prefetch thread, `depth`
  ahead (prefetch.py). Late masks (adaptive masking) are made when the training loop takes the
  batch, after it has handed over the feedback they follow, and the batch is put on the mesh
  then."""
  def place(batch: dict) -> dict:
    return sharding.to_device(batch, mesh)
  if not host.masks_late:
    return prefetch.Prefetcher(host, depth, ahead=place)

  return prefetch.Prefetcher(
      host, depth, on_take=lambda batch, position: place(host.mask_late(batch, position)))


def make_eval_iter(data: InputSettings, tok, source, masker: masking.Masker, *,
                   batch_size: int, seq_len: int, seed: int, num_batches: int,
                   word_start=None, first_step: int = 0) -> Iterator[dict[str, np.ndarray]]:
  """The same `num_batches` held-out batches, with the same masks, every time: those of steps
  first_step, first_step + 1, ... (another first_step: the same rows masked otherwise).

  A fixed count (cycling a small split) keeps every process in lock-step on multi-host runs.
  Built in this process: a few batches do not pay for starting workers.
  """
  spec = _spec(data, tokenized(source, tok, masker.settings.annotator()), masker, word_start,
               batch_size=batch_size, seq_len=seq_len, seed=seed + _EVAL_SEED_OFFSET,
               shuffle=False)
  return itertools.islice(ShardedIterator(spec, Masking(spec, masker, first_step)),
                          num_batches)
