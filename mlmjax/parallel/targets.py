"""Compile targets: the TPU slices and GPU nodes a user names, as devices this machine can
compile for without having them (jax.experimental.topologies, libtpu / the CUDA plugin).

    v4-8 v4-16 ...            TPU v4, the number is TensorCores (2 per chip): v4-8 = 4 chips
    v5p-8 ... v5p-128 ...     TPU v5p, likewise TensorCores: v5p-128 = 64 chips
    v5litepod-16 (v5e-16)     TPU v5e, the number is chips
    v6e-8                     TPU v6e (Trillium), chips
    2xv5p-64                  multi-slice: 2 slices of v5p-64 over the data-center network
    h100x8, h200x8, a100x8    one node of 8 NVIDIA GPUs (H100 SXM 80GB, H200 SXM 141GB,
                              A100 SXM4 80GB)

A slice's chip grid follows Cloud TPU's shapes: 3D (v4, v5p) from 2x2x1 doubling the
smallest dimension (v5p-64 = 2x4x4 chips), 2D (v5e, v6e) from 2x2 (v5e-32 = 4x8).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re

from mlmjax.errors import CommandLineError
from mlmjax.errors import MissingDependencyError
from mlmjax.parallel import plugins

GiB = 1024**3

# family -> (topology prefix, cores per chip in the name, 3D, chip_config, HBM bytes per chip):
# Cloud TPU's published figures. (Peak FLOP/s and bandwidths by device kind: models/chip_rates.py.)
_TPU = {
    "v4": ("v4", 2, True, "megacore", 32 * GiB),
    "v5p": ("v5", 2, True, "megacore", 95 * GiB),
    "v5litepod": ("v5e", 1, False, "default", 16 * GiB),
    "v5e": ("v5e", 1, False, "default", 16 * GiB),
    "v6e": ("v6e", 1, False, "default", 32 * GiB),
}
# name -> (GpuTargetConfig file, HBM bytes).
_GPU = {
    "h100": ("h100.txtpb", 80 * GiB),
    "h200": ("h200.txtpb", 150755672064),  # 143,771 MiB, what the driver reports
    "a100": ("a100.txtpb", 80 * GiB),
}
_GPU_NAME = re.compile(r"(h100|h200|a100)x(\d+)")
FORMS = ("v4-N, v5p-N (N TensorCores, 2 per chip), v5litepod-N / v5e-N, v6e-N (N chips),"
         " KxNAME for K slices (2xv5p-64), h100xN, h200xN, a100xN (N GPUs of one node)")


@dataclasses.dataclass(frozen=True)
class Target:
  name: str
  platform: str  # 'tpu' or 'gpu' (jax's name)
  devices: tuple  # compile-only devices, every slice's
  num_slices: int
  hbm_bytes: int  # per device
  topology: str  # what was asked of jax, for the report

  @property
  def device_kind(self) -> str:
    return self.devices[0].device_kind


@dataclasses.dataclass(frozen=True)
class TpuSlice:
  """A TPU name's slices: family (v4, v5p, v5litepod, v5e, v6e), slice count, chips and chip
  grid of one slice. (launch/gke.py reads these too.)"""

  family: str
  slices: int
  chips: int
  grid: tuple[int, ...]

  @property
  def topology(self) -> str:
    return "x".join(map(str, self.grid))


def parse_tpu(name: str) -> TpuSlice | None:
  """"2xv5p-64" -> TpuSlice('v5p', 2, 32, (2, 4, 4)); None for anything else (GPU names,
  counts no slice has)."""
  m = re.fullmatch(r"(?:(\d+)x)?(v4|v5p|v5litepod|v5e|v6e)-(\d+)", name)
  if not m:
    return None
  slices, family, count = int(m.group(1) or 1), m.group(2), int(m.group(3))
  cores = _TPU[family][1]
  grid = _grid(count // cores, _TPU[family][2]) if count % cores == 0 and slices >= 1 else None
  return None if grid is None else TpuSlice(family, slices, count // cores, grid)


def _grid(chips: int, three_d: bool) -> tuple[int, ...] | None:
  """Cloud TPU's chip grid of a slice, or None if no slice has that many chips."""
  if chips == 1:
    return (1, 1, 1) if three_d else (1, 1)
  dims = [2, 2, 1] if three_d else [2, 2]
  while (n := dims[0] * dims[1] * dims[-1] if three_d else dims[0] * dims[1]) < chips:
    if three_d and dims[2] == 1:
      dims[2] = 2
    else:
      small = min(dims)
      i = max(j for j, d in enumerate(dims) if d == small)  # the last of the smallest
      dims[i] *= 2
  return tuple(dims) if n == chips else None


@contextlib.contextmanager
def _environment(defaults: dict[str, str], also_restored: tuple[str, ...] = ()):
  """Inside, os.environ with each of `defaults` set where it is not; after, each of those keys
  and of `also_restored` (others set them inside) as it was before: its value back, or removed
  where it was absent. Every other key is left alone, whoever changes it meanwhile."""
  keys = (*defaults, *also_restored)
  before = {key: os.environ.get(key) for key in keys}
  for key, value in defaults.items():
    os.environ.setdefault(key, value)
  try:
    yield
  finally:
    for key, value in before.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value


# What _quiet_libtpu sets where unset. TPU_SKIP_MDS_QUERY: jax sets it when it starts its
# backends on a machine without TPU chips, but only the first time; when a GPU target started
# them, libtpu loaded later would ask the GCE metadata server for the slice instead (30 tries,
# ~29 s, for each key it reads).
_LOADING_ENV = {"TPU_ACCELERATOR_TYPE": "v5p-8", "TPU_WORKER_HOSTNAMES": "localhost",
                "TPU_WORKER_ID": "0", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
                "TPU_SKIP_MDS_QUERY": "1", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"}
# What jax and libtpu set while libtpu loads (jax/_src/cloud_tpu_init.py, libtpu/__init__.py).
_SET_WHILE_LOADING = ("TPU_LIBRARY_PATH",)


def _quiet_libtpu():
  """libtpu looks for the TPU VM it runs on; here there is none. Saying so while it loads
  silences its warnings, and several processes may load it at once (tests, a second compile).
  The CUDA plugin, started here for a GPU target, skips its check of the CUDA libraries of a
  GPU this machine need not have (it would print a traceback and register nothing).
  Those keys are then restored as they were, with what jax itself sets while it loads libtpu
  (TPU_LIBRARY_PATH, TPU_SKIP_MDS_QUERY): left set, they would tell every process started
  later from this one (a training run) that it is on a TPU VM (plugins.tpu_vm), or make jax
  load libtpu there from that path, however well hidden (plugins.py). The rest of the
  environment is not touched."""
  return _environment(_LOADING_ENV, _SET_WHILE_LOADING)


def _unknown(name: str, why: str = "") -> CommandLineError:
  return CommandLineError(f"unknown target {name!r}{why}: use {FORMS}")


@functools.lru_cache(maxsize=None)
def get(name: str) -> Target:
  """The target a user names (see the module docstring); a CommandLineError naming the valid
  forms otherwise, or saying what to install when the compiler for it is missing."""
  gpu = _GPU_NAME.fullmatch(name)
  # A GPU target's CUDA plugin before jax is imported: jax loads its kernels then.
  plugins_needed = (plugins.loading("cuda", f"compiling for {name}") if gpu
                    else contextlib.nullcontext())
  with _quiet_libtpu(), plugins_needed:
    return _get(name)


def _get(name: str) -> Target:
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  m = re.fullmatch(r"(?:\d+x)?(v4|v5p|v5litepod|v5e|v6e)-(\d+)", name)
  if m:
    plugins.use("tpu", f"compiling for {name}")
    tpu = parse_tpu(name)
    if tpu is None:
      family, count = m.group(1), m.group(2)
      raise _unknown(name, f" (no {family} slice has {count}"
                           f" {'cores' if _TPU[family][1] > 1 else 'chips'})")
    prefix, _, _, chip_config, hbm = _TPU[tpu.family]
    slices, grid = tpu.slices, tpu.grid
    topology = f"{prefix}:{tpu.topology}"
    host = tuple(min(g, 2) for g in grid[:2]) + (1,)  # hosts of up to 2x2 chips
    try:
      devices = topologies.get_topology_desc(
          platform="tpu", topology_name=topology, chip_config_name=chip_config,
          chips_per_host_bounds=host, num_slices=slices, wrap=(False, False, False)).devices
    except (RuntimeError, ValueError) as e:
      if "libtpu" in str(e).lower() or "tpu" in str(e).lower() and "not" in str(e).lower():
        raise MissingDependencyError(
            f"compiling for {name} needs libtpu: pip install -e '.[tpu]' ({e})") from e
      raise
    return Target(name, "tpu", tuple(devices), slices, hbm, f"{topology} x {slices} slice(s)")
  gpu = _GPU_NAME.fullmatch(name)
  if gpu and int(gpu.group(2)) >= 1:
    spec, hbm = _GPU[gpu.group(1)]
    with open(os.path.join(os.path.dirname(__file__), "gpu_specs", spec), encoding="utf-8") as f:
      config = f.read()
    try:
      devices = topologies.get_topology_desc(
          platform="cuda", target_config=config, topology=f"1x1x{gpu.group(2)}").devices
    except Exception as e:  # pylint: disable=broad-except
      raise MissingDependencyError(f"compiling for {name} needs jax's CUDA plugin: pip install"
                                   f" -e '.[gpu-compile]' ({str(e).splitlines()[0]})") from e
    return Target(name, "gpu", tuple(devices), 1, hbm,
                  f"1 node x {gpu.group(2)} {gpu.group(1).upper()}")
  raise _unknown(name)
