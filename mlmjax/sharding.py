"""Device mesh and shardings: one code path for data parallel, FSDP and tensor parallel.

The mesh always has the axes ('data', 'fsdp', 'tensor'); pure data parallelism is simply
`mesh.shape = (-1, 1, 1)`. Parameters name their dimensions with logical axes (model.py);
`config.mesh.rules` maps each logical name to a mesh axis (or None: replicated).
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from mlmjax import errors

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")  # the batch dimension is split over every non-tensor axis


class MeshError(errors.UserError):
  """A mesh shape that does not fit the devices."""


def resolve_mesh_shape(shape, num_devices: int) -> tuple[int, ...]:
  """`-1` in one place means "all remaining devices"."""
  shape = tuple(int(s) for s in shape)
  if len(shape) != len(MESH_AXES) or shape.count(-1) > 1:
    raise MeshError(f"config.mesh.shape={shape} must have 3 entries {MESH_AXES}, at most one -1")
  known = int(np.prod([s for s in shape if s != -1]))
  if -1 in shape:
    if num_devices % known:
      raise MeshError(f"config.mesh.shape={shape}: {num_devices} devices are not divisible by {known}")
    shape = tuple(num_devices // known if s == -1 else s for s in shape)
  if int(np.prod(shape)) != num_devices:
    raise MeshError(f"config.mesh.shape={shape} needs {int(np.prod(shape))} devices, have {num_devices}")
  return shape


def make_mesh(mesh_config, devices=None) -> Mesh:
  devices = jax.devices() if devices is None else list(devices)
  shape = resolve_mesh_shape(mesh_config.shape, len(devices))
  # Auto axes: classic jit/GSPMD propagation (explicit axes would demand sharding-typed code).
  return jax.make_mesh(shape, MESH_AXES, devices=devices,
                       axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def logical_to_mesh(axes: tuple[str | None, ...], rules: dict[str, str | None]) -> P:
  """('vocab', 'embed') -> P(rules['vocab'], rules['embed']); unknown names are replicated."""
  return P(*(rules.get(name) if name is not None else None for name in axes))


def param_shardings(abstract_state: nnx.State, mesh: Mesh, rules) -> dict:
  """NamedShardings (as a pure dict matching `nnx.to_pure_dict`) from the params' `axes`."""
  rules = dict(rules)
  specs = jax.tree.map(
      lambda v: NamedSharding(mesh, logical_to_mesh(v.get_metadata()["axes"], rules)),
      abstract_state, is_leaf=lambda x: isinstance(x, nnx.Variable))
  return nnx.to_pure_dict(specs)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def data_parallel_size(mesh: Mesh) -> int:
  return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))
