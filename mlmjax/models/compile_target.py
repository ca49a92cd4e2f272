"""The mesh a model is built and traced for, which need not be this machine's devices.

`model.dtype='auto'` and `model.attention_impl='auto'` depend on the platform, and the Pallas
kernels must be told how their inputs are split over devices (XLA cannot partition a Mosaic or
Triton call by itself). Both are properties of the mesh the step is compiled for: a TPU pod
compiled from a CPU machine (mlmjax.compile) reads the pod's, not `jax.devices()`. So a model
is given its `Target` when it is built (training/core/train_state.py makes it from the run's mesh)
and hands it to the layers that ask; a model built without one (used alone, the tests' single
device) runs on this machine's devices.
"""

from __future__ import annotations

import dataclasses

import jax


@dataclasses.dataclass(frozen=True)
class Target:
  mesh: jax.sharding.Mesh
  batch_axes: tuple[str, ...]  # mesh axes the batch dimension is split over
  heads_axes: tuple[str, ...]  # mesh axes attention heads are split over


def platform(target: Target | None) -> str:
  """'tpu', 'gpu' or 'cpu': of the target's mesh, or of this machine without one."""
  return (target.mesh.devices.flat[0] if target is not None else jax.devices()[0]).platform
