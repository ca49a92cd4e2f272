"""The mesh a model is being built and traced for, which need not be this machine's devices.

`model.dtype='auto'` and `model.attention_impl='auto'` depend on the platform, and the Pallas
kernels must be told how their inputs are split over devices (XLA cannot partition a Mosaic or
Triton call by itself). Both are properties of the mesh the step is compiled for: a TPU pod
compiled from a CPU machine (mlmjax.compile) reads the pod's, not `jax.devices()`. The train
steps (training/steps.py) enter `on(mesh, ...)` while they build and trace the model; outside
it (a model used alone, the tests' single device) the local devices are the target.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import jax


@dataclasses.dataclass(frozen=True)
class Target:
  mesh: jax.sharding.Mesh
  batch_axes: tuple[str, ...]  # mesh axes the batch dimension is split over
  heads_axes: tuple[str, ...]  # mesh axes attention heads are split over


_CURRENT: contextvars.ContextVar[Target | None] = contextvars.ContextVar(
    "mlmjax_compile_target", default=None)


@contextlib.contextmanager
def on(mesh: jax.sharding.Mesh, batch_axes: tuple[str, ...], heads_axes: tuple[str, ...]):
  """Build/trace the model for `mesh` (usable inside jit: it only sets a Python variable)."""
  token = _CURRENT.set(Target(mesh, tuple(batch_axes), tuple(heads_axes)))
  try:
    yield
  finally:
    _CURRENT.reset(token)


def current() -> Target | None:
  return _CURRENT.get()


def platform() -> str:
  """'tpu', 'gpu' or 'cpu': of the mesh being compiled for, else of this machine."""
  t = _CURRENT.get()
  return (t.mesh.devices.flat[0] if t is not None else jax.devices()[0]).platform
