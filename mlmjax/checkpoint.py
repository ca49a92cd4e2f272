"""orbax checkpoints of {train state, grain data iterator}, written together, asynchronously.

Layout: WORKDIR/checkpoints/<step>/{state,data}. Resuming restores both, so the data order and
the masks continue exactly where they stopped. Restoring takes an abstract state whose leaves
carry the *target* shardings, so a checkpoint can be read back onto any mesh.
"""

from __future__ import annotations

import os

import grain
import jax
import orbax.checkpoint as ocp


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

  def save(self, step: int, state, data_iter: grain.DatasetIterator) -> None:
    """Starts an async save; device arrays are copied out before this returns, so the caller
    may donate `state` to the next step right away."""
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=grain.checkpoint.CheckpointSave(data_iter)), force=True)

  def restore(self, step: int, abstract_state, data_iter: grain.DatasetIterator | None = None):
    """Restores the state (onto `abstract_state`'s shardings) and, if given, the iterator."""
    args = {"state": ocp.args.StandardRestore(abstract_state)}
    if data_iter is not None:
      args["data"] = grain.checkpoint.CheckpointRestore(data_iter)
    return self.manager.restore(step, args=ocp.args.Composite(**args))["state"]

  def close(self) -> None:
    """Waits for pending writes; a run must not exit with a save half-done."""
    self.manager.wait_until_finished()
    self.manager.close()


def abstract_with_shardings(abstract_tree, shardings):
  return jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_tree, shardings)
