"""The `config.mesh` keys, typed and checked (`MeshSettings.from_config`): the mesh's shape and
the logical-axis rules. Whether the shape fits the devices and splits the batch is a rule
across sections (training/config_check.py)."""

from __future__ import annotations

import dataclasses

from mlmjax import typed_settings
from mlmjax.errors import ConfigError
from mlmjax.parallel import sharding


@dataclasses.dataclass(frozen=True)
class MeshSettings(typed_settings.Section):
  """config.mesh, typed: `shape` over sharding.MESH_AXES (-1: the remaining devices), `rules`
  (logical axis, mesh axis or axes or None) pairs."""

  KEY = "mesh"

  shape: tuple
  rules: tuple

  def __post_init__(self):
    shape = self.shape
    if len(shape) != len(sharding.MESH_AXES) or shape.count(-1) > 1 or any(
        not isinstance(s, int) or s == 0 or s < -1 for s in shape):
      raise ConfigError(f"config.mesh.shape={shape} must have 3 positive entries"
                        f" {sharding.MESH_AXES}, at most one of them -1")
    for rule in self.rules:
      if len(rule) != 2:
        raise ConfigError(f"config.mesh.rules entry {rule!r} must be a (logical axis, mesh"
                          " axis) pair")
      for axis in sharding.rule_targets(rule[1]):
        if axis not in sharding.MESH_AXES:
          raise ConfigError(f"config.mesh.rules maps {rule[0]!r} to {axis!r}, which is not a"
                            f" mesh axis ({', '.join(sharding.MESH_AXES)})")
