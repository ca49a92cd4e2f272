"""orbax checkpoints of {train state, data position, host state}, written together, async.

Each checkpoint `N/` holds three items:
  state  the train state (params, optimizer state, step), restorable onto any mesh: restoring
         takes an abstract state whose leaves carry the *target* shardings;
  data   the data iterator's position as JSON (every data shard's grain state, gathered from all
         processes by the iterator), so it restores onto any process count;
  host   a dict of numpy trees: the train loop's own state (partial metric sums of the logging
         interval, skip counters) and that of its participants (adaptive masking's loss table).
Resuming restores them together, so data order, masks and even the logged metrics continue
exactly where they stopped.

Crash safety comes from orbax: a checkpoint is written to a temporary directory and renamed
into place when complete, so a process killed mid-save leaves the previous checkpoints intact
(the half-written one is ignored and cleaned up). A complete checkpoint whose files were damaged
later (truncated, corrupted) fails to restore: it is moved aside to the quarantine directory and
the next older one is used, with a warning. A checkpoint of another model is refused instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Protocol

from absl import logging
import jax
from jax.experimental import multihost_utils
from etils import epath
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint._src.metadata import array_metadata_store
from orbax.checkpoint._src.serialization import type_handler_registry

from mlmjax import errors
from mlmjax import paths
from mlmjax.models import param_names


class DataIterator(Protocol):
  def global_state(self) -> dict: ...  # a collective: every process calls it
  def set_state(self, state: dict) -> None: ...  # takes the global position


class CheckpointWriteError(errors.UserError):
  """A checkpoint could not be written (disk full, permissions); older ones are intact."""


class CheckpointMismatchError(errors.UserError):
  """The workdir's checkpoints belong to a different model (config or tokenizer)."""


@dataclasses.dataclass
class Restored:
  step: int
  state: Any
  host: dict  # the host item as saved (numpy leaves)
  data: dict | None = None  # the data position (JSON), when asked for


def _os_error(e: BaseException) -> OSError | None:
  """The OSError behind `e` (orbax may wrap the one raised in its writer thread)."""
  while e is not None:
    if isinstance(e, OSError):
      return e
    e = e.__cause__ or e.__context__
  return None


def _param_shapes(tree) -> dict[str, tuple[int, ...]]:
  """{'blocks/0/mlp_in/kernel': shape}; list indices and their saved string form agree."""
  return {param_names.param_name(param_names.path_keys(path)): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def save_whole_shards_on_cpu() -> None:
  """On the CPU backend, orbax writes each array from its first replica, not split over all.
  Its replica-parallel save (its default except on GPUs) copies a slice of a replicated array
  from each device, to spread the transfers over the links of accelerators; CPU devices share
  the host's memory, so there a slice is only a copy more and a slicing program to compile per
  array shape: 88 of them for the tests' 2-layer model on 8 CPU devices, whose 8-step run with
  two saves took 25.1 s against 20.5 s without them (11.1 against 8.7 s with the compilation
  cache warm; jax 0.10.2, orbax 0.12.8, 2-core CPU). Otherwise the handler is orbax's default
  (the same metadata store). Registered once per process and quietly: orbax warns on every
  override, a line that would stand in each command's output (the notebook's cells)."""
  registry = type_handler_registry.GLOBAL_TYPE_HANDLER_REGISTRY
  if jax.default_backend() == "cpu" and not isinstance(registry.get(jax.Array),
                                                       _OneReplicaArrayHandler):
    registry.add(jax.Array, _OneReplicaArrayHandler(
        use_replica_parallel=False, array_metadata_store=array_metadata_store.Store()),
                 override=True, ignore_warnings=True)


class _OneReplicaArrayHandler(ocp.type_handlers.ArrayHandler):
  """orbax's ArrayHandler, named so that save_whole_shards_on_cpu registers it only once."""


class Checkpointer:

  def __init__(self, directory: str, quarantine: str, max_to_keep: int):
    self.directory, self._quarantine = directory, quarantine
    self._in_flight: int | None = None  # the step of the last save started (maybe unfinished)
    self._write_failed = False
    paths.use_storage_emulator()  # orbax's arrays go through tensorstore's own GCS client
    save_whole_shards_on_cpu()
    self.manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=True))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def reached_preemption(self, step: int) -> bool:
    """True at the step every process agreed to save at after a SIGTERM (needs the JAX
    distributed runtime, see distributed.py; always False without it). Call it every step."""
    return self.manager.reached_preemption(step)

  def restore_latest(self, abstract_state,
                     data_iter_for: Callable[[int], DataIterator]) -> Restored | None:
    """The newest readable checkpoint, with `data_iter_for(step)` restored in place; None when
    there is none. Unreadable ones are set aside on the way."""
    for step in reversed(self.all_steps()):
      self._check_compatible(step, abstract_state)
      try:
        restored = self.restore(step, abstract_state, with_data=True)
      except Exception as e:  # pylint: disable=broad-except  # any unreadable file
        reason = " ".join(str(e).split())[:300]
        logging.warning("Checkpoint %d in %s is unreadable (%s: %s); moved to %s, falling back"
                        " to the previous one", step, self.directory, type(e).__name__, reason,
                        self._quarantine)
        self._set_aside(step)
        continue
      data_iter_for(step).set_state(restored.data)  # a mismatch is the user's: not set aside
      return restored
    return None

  def restore(self, step: int, abstract_state, with_data: bool = False) -> Restored:
    """The state on `abstract_state`'s shardings, the host item and, if asked, the data
    position."""
    args = {"state": ocp.args.StandardRestore(abstract_state)}
    if paths.isdir(paths.join(self.directory, str(step), "host")):  # saved when non-empty
      args["host"] = ocp.args.StandardRestore()
    if with_data:
      args["data"] = ocp.args.JsonRestore()
    restored = self.manager.restore(step, args=ocp.args.Composite(**args))
    return Restored(step, restored["state"], restored.get("host") or {}, restored.get("data"))

  def save(self, step: int, state, data_iter: DataIterator, host: dict) -> None:
    """Starts an async save; device arrays are copied out before this returns, so the caller
    may donate `state` to the next step right away. `host`: {name: tree of numbers/arrays}."""
    # Copies: the host keeps updating its tables while the save runs in the background.
    host = jax.tree.map(lambda x: np.array(x), host)
    args = {"state": ocp.args.StandardSave(state),
            "data": ocp.args.JsonSave(data_iter.global_state())}
    if jax.tree.leaves(host):  # orbax refuses an empty tree
      args["host"] = ocp.args.StandardSave(host)
    # orbax.save first waits for the previous save, whose write errors surface there: waiting
    # here (no later than orbax would) names the checkpoint that failed, not this one.
    self.wait()
    self._in_flight = step
    with self._write_errors(step):
      self.manager.save(step, args=ocp.args.Composite(**args), force=True)

  def wait(self) -> None:
    """Blocks until the last save started is written (a write error raised, naming it)."""
    with self._write_errors(self._in_flight):
      self.manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending writes; a run must not exit with a save half-done. Once a write error
    was raised, the run is ending on it: orbax raising the same failed save again while closing
    must not replace that one clear line with a traceback."""
    failed_before = self._write_failed
    try:
      with self._write_errors(self._in_flight):
        try:
          self.manager.wait_until_finished()
        finally:
          self.manager.close()
    except CheckpointWriteError as e:
      if not failed_before:
        raise
      logging.warning("While closing the checkpointer after a failed write: %s", e.__cause__)

  def _check_compatible(self, step: int, abstract_state) -> None:
    """A checkpoint of another model is a config problem, not damage: say so, touch nothing."""
    try:
      saved_tree = ocp.StandardCheckpointHandler().metadata(
          epath.Path(self.directory) / str(step) / "state").tree
    except Exception:  # pylint: disable=broad-except  # unreadable: restore decides
      return
    saved, wanted = _param_shapes(saved_tree["params"]), _param_shapes(abstract_state["params"])
    if saved == wanted:
      # Same model; the optimizer state must match too (e.g. adamw vs lamb). Its paths are
      # stored differently from optax's named tuples, so compare the arrays' shapes.
      saved_opt = sorted(_param_shapes(saved_tree["opt_state"]).values())
      wanted_opt = sorted(_param_shapes(abstract_state["opt_state"]).values())
      if saved_opt != wanted_opt:
        raise CheckpointMismatchError(
            f"the checkpoints in {self.directory} hold another optimizer's state"
            f" ({len(saved_opt)} arrays there, {len(wanted_opt)} in this config): resume with"
            " the run's optimizer.kind, or use a new --workdir")
      return
    vocab_key = "token_embedding"
    if vocab_key in saved and saved[vocab_key][0] != wanted[vocab_key][0]:
      raise CheckpointMismatchError(
          f"the checkpoints in {self.directory} were trained with a {saved[vocab_key][0]}-piece"
          f" vocabulary but the tokenizer has {wanted[vocab_key][0]} pieces: resume with the"
          " run's own tokenizer.model, or use a new --workdir for another tokenizer")
    differ = sorted(k for k in saved.keys() | wanted.keys() if saved.get(k) != wanted.get(k))
    k = differ[0]
    raise CheckpointMismatchError(
        f"the checkpoints in {self.directory} are of another model: parameter {k} is"
        f" {saved.get(k, 'absent')} there and {wanted.get(k, 'absent')} in this config"
        f" ({len(differ)} parameters differ); resume with the run's config.json settings, or"
        " use a new --workdir")

  def _set_aside(self, step: int) -> None:
    if jax.process_index() == 0:
      source = epath.Path(self.directory) / str(step)
      target = epath.Path(self._quarantine) / str(step)
      target.parent.mkdir(parents=True, exist_ok=True)
      if target.exists():
        target.rmtree()
      source.rename(target)  # a bucket has no rename of folders: epath copies, then deletes
    multihost_utils.sync_global_devices(f"mlmjax_set_aside_{step}")
    self.manager.reload()

  @contextlib.contextmanager
  def _write_errors(self, step: int | None):
    """OSErrors of writing (now, or of an earlier async save surfacing now) -> one clear line.
    orbax writes into a temporary directory first, so no complete checkpoint is damaged."""
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      os_error = _os_error(e)
      if os_error is None:
        raise
      what = "a checkpoint" if step is None else f"checkpoint {step}"
      kept = self.manager.all_steps()
      resume = f"step {max(kept)}" if kept else "the start"
      self._write_failed = True
      raise CheckpointWriteError(
          f"could not write {what} in {self.directory} ({os_error.strerror or os_error}); the"
          f" complete checkpoints are intact: fix this and run the same command again to"
          f" resume from {resume}") from e
