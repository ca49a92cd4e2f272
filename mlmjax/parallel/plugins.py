"""jax's accelerator plugins, loaded only where they are used: the CUDA plugin on a machine with
an NVIDIA GPU or to compile for a GPU node (`mlmjax.compile --target=h100x8`), libtpu on a TPU VM
or to compile for a TPU slice (`--target=v5p-8`).

Installed (`[gpu-compile]`, `[tpu]`), jax loads them in every process, and on a machine without
the accelerator they print to stderr, which no setting turns off (JAX_PLATFORMS=cpu included):
  - CUDA: `import jax` imports the plugin's kernels (jax_cuda12_plugin, from jax._src.lib), and
    jax's first look for devices starts its PJRT module (jax_plugins.xla_cuda12, found through
    the `jax_plugins` namespace package and entry points). Each prints "Could not find cuda
    drivers on your machine, GPU will not be used." (C++ logging), and the plugin's check of
    the CUDA libraries a traceback.
  - libtpu: jax's first look for devices loads it, and it warns that it cannot tell which TPU
    it runs on ("could not determine TPU accelerator type ...").
Noise in every command's output, and errors that are no longer one line.

So `hide` hides from jax each plugin whose accelerator this machine lacks, as if it were not
installed: the plugin's modules are None in sys.modules (jax's `import` of them fails, which jax
takes as "not installed"), and the CUDA PJRT module is a stand-in whose `initialize()` registers
nothing. A compile target undoes that with `loading` (parallel/targets.py), which also keeps
CUDA's driver notices, untrue of a compile, out of stderr. JAX_PLATFORMS naming the platform
also keeps its plugin.

`hide` must run before jax's first import (CUDA's kernels are looked up then), and only where a
program starts: importing mlmjax hides nothing. Importing mlmjax loads CUDA's kernels without
their notice where the plugin is installed and no GPU is (`load_cuda_kernels_quietly`), so a
script that imports mlmjax's library modules, hiding nothing, prints nothing of CUDA either.
Each command calls it at the top of its module, before its other imports (mlmjax/cli.py says
why there), cli.run again; tests/conftest.py, .ci/export_check.py, benchmarks/*.py and the
Colab notebook call it themselves. A script of yours that wants the same:

    from mlmjax.parallel import plugins
    plugins.hide()  # before anything imports jax
    import jax
"""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import dataclasses
import glob
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile
import types

from mlmjax.errors import UserError


def nvidia_gpu() -> bool:
  """jax._src.hardware_utils's test: jax starts CUDA only where one of these exists."""
  return any(map(os.path.exists, ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")))


def tpu_vm() -> bool:
  """A TPU VM: its chips (v4: /dev/accel*, v5 and later: /dev/vfio/N), or GKE's variable."""
  return (os.path.exists("/dev/accel0") or bool(glob.glob("/dev/vfio/[0-9]*"))
          or "TPU_WORKER_HOSTNAMES" in os.environ)


@dataclasses.dataclass(frozen=True)
class _Plugin:
  platforms: frozenset[str]  # JAX_PLATFORMS names that ask for it
  present: Callable[[], bool]  # the accelerator is on this machine
  modules: tuple[str, ...]  # made unimportable
  stand_ins: tuple[str, ...] = ()  # jax imports these by name: inert modules instead
  # jax looks the plugin up when `import jax` runs (CUDA's kernels), not only when it is used
  at_import: bool = False


_PLUGINS = {
    "cuda": _Plugin(frozenset({"cuda", "gpu"}), nvidia_gpu,
                    ("jax_cuda12_plugin", "jax_cuda13_plugin"),
                    ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13"), at_import=True),
    # jax imports libtpu (for its path) each time it loads it: hidden, jax finds no libtpu
    "tpu": _Plugin(frozenset({"tpu"}), tpu_vm, ("libtpu",)),
}
_STAND_IN_DOC = "mlmjax's stand-in for a jax plugin hidden on this machine (parallel/plugins.py)"
# Hidden the same way where not already imported: flax imports IPython with itself
# (flax.nnx.reprlib, summary, visualization) only to ask whether it runs inside an IPython
# shell, 0.25 s of every command's start where IPython is installed (Colab, the test
# environment). A process that has not imported IPython runs in no shell: flax's answer is the
# same without it.
_ASKED_ONLY = ("IPython",)


def _stand_in(name: str) -> types.ModuleType:
  module = types.ModuleType(name, _STAND_IN_DOC)
  module.__spec__ = importlib.machinery.ModuleSpec(name, None)
  module.initialize = lambda: None  # what jax calls; registers no backend
  return module


def _hidden_here(name: str) -> bool:
  if name not in sys.modules:
    return False
  module = sys.modules[name]
  return module is None or module.__doc__ == _STAND_IN_DOC


def _wanted(plugin: _Plugin) -> bool:
  platforms = {p.strip().lower() for p in os.environ.get("JAX_PLATFORMS", "").split(",")}
  return bool(platforms & plugin.platforms) or plugin.present()


def hide() -> None:
  """Hides from jax each plugin this machine has no accelerator for, and IPython from flax
  where no IPython shell runs (_ASKED_ONLY). Only before jax is imported: once it is, what it
  loaded stays (and this does nothing). Idempotent; called where a program starts, never on
  import (see the module docstring)."""
  if "jax" in sys.modules:
    return
  for name in _ASKED_ONLY:
    sys.modules.setdefault(name, None)
  for plugin in _PLUGINS.values():
    if not _wanted(plugin):
      for name in plugin.modules:
        sys.modules.setdefault(name, None)
      for name in plugin.stand_ins:
        sys.modules.setdefault(name, _stand_in(name))


def hidden(platform: str) -> bool:
  plugin = _PLUGINS[platform]
  return any(map(_hidden_here, plugin.modules + plugin.stand_ins))


def use(platform: str, why: str) -> None:
  """Lets jax load the plugin of `platform` ('cuda' or 'tpu') for `why` (a compile target).
  A UserError if that is too late: jax loads CUDA's kernels when it is imported."""
  if not hidden(platform):
    return
  plugin = _PLUGINS[platform]
  if plugin.at_import and "jax" in sys.modules:
    raise UserError(
        f"{why} needs jax's CUDA plugin, which jax loads when it is imported, and this process"
        " imported jax without it (no GPU here): run python -m mlmjax.compile, or call"
        " mlmjax.parallel.plugins.use('cuda', ...) before importing jax")
  for name in plugin.modules + plugin.stand_ins:
    if _hidden_here(name):
      del sys.modules[name]


# The jaxlib modules that load the CUDA plugin's kernels when jax is imported, each printing the
# notice below without a driver. Only these: jaxlib's others (gpu_rnn, gpu_triton) load jaxlib's
# core, which, loaded before jax's own import, leaves the C++ INFO lines of every later device
# lookup on stderr.
_CUDA_KERNELS = ("jaxlib.gpu_solver", "jaxlib.gpu_prng", "jaxlib.gpu_linalg")
# What the CUDA plugin's C++ code prints where no driver is, each line after absl's preamble.
_CUDA_NOTICE = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|I\d{4} [\d:. ]+ +\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine,"
    rb" GPU will not be used\.")


@contextlib.contextmanager
def loading(platform: str, why: str):
  """`use`; then, while jax loads CUDA inside on a machine without a GPU, stderr without the
  plugin's notice that no driver is here."""
  quiet = platform == "cuda" and hidden(platform)
  use(platform, why)
  with _without_cuda_notice() if quiet else contextlib.nullcontext():
    yield


def load_cuda_kernels_quietly() -> None:
  """What `import jax` would load of an installed CUDA plugin on a machine without a GPU (its
  kernels, through jaxlib.gpu_*), loaded now without the driver notice each of them prints, so
  importing any mlmjax module prints nothing of CUDA (mlmjax/__init__.py calls this). Adds
  modules only, hides none: `hide` still works after it, and where jax is already imported,
  or the plugin is hidden, wanted or not installed, this does nothing."""
  plugin = _PLUGINS["cuda"]
  if "jax" in sys.modules or _wanted(plugin) or not any(map(_installed, plugin.modules)):
    return
  with _without_cuda_notice():
    for name in _CUDA_KERNELS:
      if importlib.util.find_spec(name) is not None:
        importlib.import_module(name)


def _installed(name: str) -> bool:
  return name not in sys.modules and importlib.util.find_spec(name) is not None


@contextlib.contextmanager
def _without_cuda_notice():
  """stderr without the CUDA plugin's driver notice: C++ writes it to file descriptor 2
  directly, so the descriptor goes to a file meanwhile, and every other line goes back to
  stderr after."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      kept = b"".join(line for line in captured.read().splitlines(keepends=True)
                      if not _CUDA_NOTICE.fullmatch(line.rstrip(b"\n")))
      with open(2, "wb", closefd=False) as stderr:
        stderr.write(kept)
