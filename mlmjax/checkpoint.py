"""orbax checkpoints of {train state, grain data iterator}, written together, asynchronously.

Layout: WORKDIR/checkpoints/<step>/{state,data,loop[,token_losses]}: `data` is the JSON grain
position of every data shard (so it restores onto any process count), `loop` the host side of
the train loop (partial metric sums of the current logging interval, skip counters), so that
even the metrics of a resumed run are bit-identical. Resuming restores them
together, so the data order and the masks continue exactly where they stopped. Restoring takes
an abstract state whose leaves carry the *target* shardings, so a checkpoint can be read back
onto any mesh.

Crash safety comes from orbax: a checkpoint is written to a temporary directory and renamed
into place when complete, so a process killed mid-save leaves the previous checkpoints intact
(the half-written one is ignored and cleaned up). A complete checkpoint whose files were
damaged later (truncated, corrupted) fails to restore: it is moved aside to
WORKDIR/corrupt_checkpoints/ and the next older one is used, with a warning.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any, Callable

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from mlmjax import distributed
from mlmjax import errors
from mlmjax.data import pipeline


def _global_data_position(data_iter: pipeline.ShardedIterator) -> dict:
  """The data position of every shard, gathered from all processes (a collective)."""
  parts = distributed.allgather_json(data_iter.get_state())
  return {"num_shards": parts[0]["num_shards"],
          "shards": {k: v for part in parts for k, v in part["shards"].items()}}


class CheckpointWriteError(errors.UserError):
  """A checkpoint could not be written (disk full, permissions); older ones are intact."""


def _os_error(e: BaseException) -> OSError | None:
  """The OSError behind `e` (orbax may wrap the one raised in its writer thread)."""
  while e is not None:
    if isinstance(e, OSError):
      return e
    e = e.__cause__ or e.__context__
  return None


class CheckpointMismatchError(errors.UserError):
  """The workdir's checkpoints belong to a different model (config or tokenizer)."""


def _param_shapes(tree) -> dict[str, tuple[int, ...]]:
  """{'blocks/0/mlp_in/kernel': shape}; list indices and their saved string form agree."""
  def name(path):
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
  return {name(path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


class Checkpointer:

  def __init__(self, workdir: str, max_to_keep: int):
    self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=True),
    )

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def reached_preemption(self, step: int) -> bool:
    """True at the step every process agreed to save at after a SIGTERM (needs the JAX
    distributed runtime, see distributed.py; always False without it). Call it every step."""
    return self.manager.reached_preemption(step)

  def restore_latest(self, abstract_state, data_iter_for: Callable[[int], Any],
                     token_losses_like: dict[str, np.ndarray] | None = None):
    """Restores the newest readable checkpoint: (step, state, token_losses, loop, data_iter),
    with `data_iter = data_iter_for(step)` restored in place; None when there is none."""
    for step in sorted(self.manager.all_steps(), reverse=True):
      self._check_compatible(step, abstract_state)
      data_iter = data_iter_for(step)
      try:
        state, token_losses, loop = self.restore(step, abstract_state, data_iter,
                                                 token_losses_like)
      except Exception as e:  # pylint: disable=broad-except  # any unreadable file
        reason = " ".join(str(e).split())[:300]
        logging.warning("Checkpoint %d in %s is unreadable (%s: %s); moved to %s, falling back"
                        " to the previous one", step, self.directory, type(e).__name__, reason,
                        self._quarantine)
        self._set_aside(step)
        continue
      return step, state, token_losses, loop, data_iter
    return None

  def _check_compatible(self, step: int, abstract_state) -> None:
    """A checkpoint of another model is a config problem, not damage: say so, touch nothing."""
    try:
      saved_tree = ocp.StandardCheckpointer().metadata(
          os.path.join(self.directory, str(step), "state")).item_metadata
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
            " the run's train.optimizer, or use a new --workdir")
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

  @property
  def _quarantine(self) -> str:
    return os.path.join(os.path.dirname(self.directory), "corrupt_checkpoints")

  def _set_aside(self, step: int) -> None:
    if jax.process_index() == 0:
      os.makedirs(self._quarantine, exist_ok=True)
      target = os.path.join(self._quarantine, str(step))
      if os.path.exists(target):
        shutil.rmtree(target)
      os.rename(os.path.join(self.directory, str(step)), target)
    multihost_utils.sync_global_devices(f"mlmjax_set_aside_{step}")
    self.manager.reload()

  def save(self, step: int, state, data_iter: pipeline.ShardedIterator,
           loop: dict | None = None,
           token_losses: dict[str, np.ndarray] | None = None) -> None:
    """Starts an async save; device arrays are copied out before this returns, so the caller
    may donate `state` to the next step right away. `token_losses`: adaptive masking's table."""
    args = {"state": ocp.args.StandardSave(state),
            "data": ocp.args.JsonSave(_global_data_position(data_iter)),
            "loop": ocp.args.JsonSave(loop or {})}
    if token_losses is not None:
      # Copies: the host keeps updating its table while the save runs in the background.
      args["token_losses"] = ocp.args.StandardSave({k: v.copy() for k, v in token_losses.items()})
    with self._write_errors(step):
      self.manager.save(step, args=ocp.args.Composite(**args), force=True)

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
      raise CheckpointWriteError(
          f"could not write {what} in {self.directory} ({os_error.strerror or os_error}); the"
          f" complete checkpoints are intact: fix this and run the same command again to"
          f" resume from {resume}") from e

  def restore(self, step: int, abstract_state,
              data_iter: pipeline.ShardedIterator | None = None,
              token_losses_like: dict[str, np.ndarray] | None = None):
    """Returns (state on `abstract_state`'s shardings, token_losses or None, loop); restores the
    iterator in place if given."""
    args = {"state": ocp.args.StandardRestore(abstract_state), "loop": ocp.args.JsonRestore()}
    if data_iter is not None:
      args["data"] = ocp.args.JsonRestore()
    if token_losses_like is not None:
      args["token_losses"] = ocp.args.StandardRestore(token_losses_like)
    restored = self.manager.restore(step, args=ocp.args.Composite(**args))
    if data_iter is not None:
      data_iter.set_state(restored["data"])
    return restored["state"], restored.get("token_losses"), restored["loop"]

  def close(self) -> None:
    """Waits for pending writes; a run must not exit with a save half-done."""
    with self._write_errors(None):
      self.manager.wait_until_finished()
    self.manager.close()


def abstract_with_shardings(abstract_tree, shardings):
  return jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_tree, shardings)
