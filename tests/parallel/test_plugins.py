"""jax's CUDA plugin and libtpu on a machine without a GPU or TPU, where [test] installs both
([gpu-compile], [tpu]): hidden from jax, so the commands print nothing of them; loaded for a
compile target (parallel/plugins.py)."""

import importlib.metadata
import subprocess
import sys

import jax
import pytest

from conftest import REPO, user_env
from mlmjax import errors
from mlmjax.parallel import plugins
from mlmjax.parallel import targets

# What the plugins print where their accelerator is missing (CUDA's driver notice and version
# check, libtpu's search for its TPU VM), and the C++ logging preambles before them.
NOTICES = ("cudart_stub", "cuda drivers", "Jax plugin configuration error",
           "absl::InitializeLog", "InitGoogle", "TPU accelerator type", "TPU_WORKER", "libtpu")

no_accelerator = pytest.mark.skipif(
    plugins.nvidia_gpu() or plugins.tpu_vm(), reason="a machine with a GPU or TPU loads them")


def _run(*args):
  env = user_env()
  env.pop("JAX_PLATFORMS", None)  # as in a user's shell: jax looks for every platform
  return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=600, check=False)


def _noise(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if any(n in line for n in NOTICES)]


@no_accelerator
@pytest.mark.slow
def test_commands_print_nothing_of_the_plugins(tmp_path, tokenizer_path):
  # Installed, or this test would show nothing: [test] brings both.
  assert importlib.metadata.version("jax-cuda12-pjrt") and importlib.metadata.version("libtpu")
  workdir = str(tmp_path / "run")
  train = _run("mlmjax.main", "--config=configs/tiny.py", f"--workdir={workdir}",
               f"--config.tokenizer.path={tokenizer_path}", "--config.model.num_layers=1",
               "--config.train.steps=2", "--config.train.log_every_steps=2",
               "--config.train.eval_every_steps=2", "--config.train.eval_batches=1",
               "--config.train.checkpoint_every_steps=2")
  assert train.returncode == 0 and "step 2/2 | loss" in train.stderr, train.stderr[-3000:]
  runs = {
      "main": train,
      "predict": _run("mlmjax.predict", f"--workdir={workdir}", "the [MASK] of God"),
      "evaluate": _run("mlmjax.evaluate", f"--workdir={workdir}"),
  }
  for name, out in runs.items():
    assert out.returncode == 0, (name, out.stderr[-3000:])
    assert _noise(out.stderr) == [], (name, out.stderr[-3000:])
  # A TPU target loads libtpu, quietly; the error stays one line.
  too_big = _run("mlmjax.compile", "--config=configs/tiny.py", "--target=v5litepod-1",
                 "--config.train.batch_size=65536", "--config.model.num_layers=2")
  assert too_big.returncode == 1 and too_big.stdout == "", too_big
  assert len(too_big.stderr.splitlines()) == 1, too_big.stderr[-3000:]
  assert too_big.stderr.startswith("error: the train step needs "), too_big.stderr


@no_accelerator
def test_jax_started_here_without_the_cuda_plugin_so_a_gpu_target_says_how():
  """This process hid the plugins before it imported jax (conftest), then jax: jax has no CUDA
  plugin, which it loads only when imported. A TPU target still works: jax looks libtpu up
  when it loads it."""
  assert plugins.hidden("cuda") and jax.devices()[0].platform == "cpu"
  with pytest.raises(errors.UserError, match="imported jax without it .* python -m mlmjax.compile"):
    targets.get("a100x8")
  assert targets.get("v4-8").platform == "tpu"


@no_accelerator
def test_jax_platforms_naming_a_platform_keeps_its_plugin():
  check = ("from mlmjax.parallel import plugins; plugins.hide();"
           " print(plugins.hidden('cuda'), plugins.hidden('tpu'))")
  env = user_env()
  wanted = {"cpu": "True True", "cpu,cuda": "False True", "tpu,cpu": "True False"}
  for platforms, hidden in wanted.items():
    env["JAX_PLATFORMS"] = platforms
    out = subprocess.run([sys.executable, "-c", check], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.split() == hidden.split(), platforms


def test_flax_asks_ipython_only_where_it_runs():
  """A command's start imports no IPython (0.25 s where it is installed) and flax's answer to
  "in an IPython shell?" is the same; a process that imported IPython keeps it."""
  check = ("import sys; {first}from mlmjax.parallel import plugins; plugins.hide();"
           " from flax.nnx import reprlib; import mlmjax.training.train;"
           " print(sys.modules['IPython'] is not None, reprlib.supports_color())")
  outs = [subprocess.run([sys.executable, "-c", check.format(first=first)], cwd=REPO,
                         env=user_env(), capture_output=True, text=True, timeout=120,
                         check=True).stdout.split() for first in ("", "import IPython; ")]
  assert outs == [["False", "False"], ["True", "False"]]  # not a tty, no shell running


def test_a_tpu_target_after_a_gpu_target_asks_no_metadata_server():
  """A GPU target first starts jax's backends (which set TPU_SKIP_MDS_QUERY only then), a TPU
  target then loads libtpu: it must not ask the GCE metadata server for its slice (30 tries
  for each of 4 keys, two minutes, where there is none)."""
  code = ("from mlmjax.parallel import targets; targets.get('h100x8');"
          " print(len(targets.get('v5p-8').devices))")
  env = user_env()
  # as in a user's shell (this process's jax has set TPU_SKIP_MDS_QUERY)
  for key in ("JAX_PLATFORMS", "TPU_SKIP_MDS_QUERY"):
    env.pop(key, None)
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split()[-1] == "4"
  assert "Failed to fetch URL" not in proc.stderr, proc.stderr[-2000:]
