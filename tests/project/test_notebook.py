"""launch/colab_tpu.ipynb: committed clean and in sync with its generator; runs top to bottom on
CPU (the tiny config, a few steps, installs skipped) in a real Jupyter kernel."""

import importlib.util
import json
import os
import subprocess
import sys

import nbclient
import nbformat
import pytest

from conftest import REPO

NOTEBOOK = os.path.join(REPO, "launch", "colab_tpu.ipynb")
_spec = importlib.util.spec_from_file_location(
    "make_colab_notebook", os.path.join(REPO, "launch", "make_colab_notebook.py"))
make_colab_notebook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_colab_notebook)
STEPS = 20


def test_notebook_is_generated_and_has_no_outputs():
  with open(NOTEBOOK, encoding="utf-8") as f:
    text = f.read()
  assert text == make_colab_notebook.render(), (
      "launch/colab_tpu.ipynb is stale: run python launch/make_colab_notebook.py")
  nb = nbformat.reads(text, as_version=4)
  nbformat.validate(nb)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert code and all(c.outputs == [] and c.execution_count is None for c in code)


CELLS = {cell_id: source for _, cell_id, source in make_colab_notebook.CELLS}


def _install_cell_calls(monkeypatch, cwd, env, calls=None):
  """Runs the settings and install cells in `cwd` with `env` and returns the commands the
  install cell runs (subprocess.run recorded in `calls`, not run) and what it printed."""
  for key in [k for k in os.environ if k.startswith("MLMJAX_NOTEBOOK_")]:
    monkeypatch.delenv(key)
  for key, value in env.items():
    monkeypatch.setenv(key, value)
  monkeypatch.chdir(cwd)
  monkeypatch.setattr(sys, "path", list(sys.path))  # the cell puts the tree first on it
  calls = [] if calls is None else calls
  printed = []
  monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(args))
  namespace = {"print": lambda *a: printed.append(" ".join(map(str, a)))}
  exec(CELLS["settings"], namespace)  # pylint: disable=exec-used
  exec(CELLS["install"], namespace)  # pylint: disable=exec-used
  assert not namespace["on_tpu"]()  # no TPU here: no [tpu] extra
  assert sys.path[0] == namespace["REPO_DIR"]
  return calls, printed


def test_install_cell_installs_the_checkout_it_runs_in(monkeypatch):
  """Jupyter starts the kernel in launch/ of this checkout: that checkout is installed."""
  calls, printed = _install_cell_calls(monkeypatch, os.path.join(REPO, "launch"), {})
  assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", "-e", REPO]]
  assert printed == [f"installing the checkout this notebook runs in: {REPO}"]


def test_install_cell_outside_a_checkout_clones_the_url_the_user_sets(monkeypatch, tmp_path):
  url = "https://git.example/me/mlmjax.git"
  calls, _ = _install_cell_calls(monkeypatch, tmp_path, {"MLMJAX_NOTEBOOK_REPO_URL": url,
                                                         "MLMJAX_NOTEBOOK_REPO_REF": "v1"})
  clone = str(tmp_path / "mlmjax")
  assert calls == [["git", "clone", "--quiet", url, clone],
                   ["git", "-C", clone, "checkout", "--quiet", "v1"],
                   [sys.executable, "-m", "pip", "install", "--quiet", "-e", clone]]
  # No URL set (the notebook has no made-up default), no checkout: one clear error, nothing run.
  assert 'os.environ.get("MLMJAX_NOTEBOOK_REPO_URL", "")' in CELLS["settings"]
  calls = []
  with pytest.raises(ValueError, match="does not run inside a checkout of mlmjax: set REPO_URL"):
    _install_cell_calls(monkeypatch, tmp_path, {}, calls)
  assert calls == []


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
  """A kernel of this interpreter (not whatever 'python3' a machine has), one CPU device, and
  the notebook's settings for a short run in tmp_path."""
  spec = tmp_path / "jupyter" / "kernels" / "mlmjax-test"
  spec.mkdir(parents=True)
  (spec / "kernel.json").write_text(json.dumps({
      "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
      "display_name": "mlmjax test", "language": "python"}))
  monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
  monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
  monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
  monkeypatch.delenv("XLA_FLAGS", raising=False)  # a Colab CPU runtime: one device
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("MLMJAX_NOTEBOOK_SKIP_INSTALL", "1")  # mlmjax is installed already
  monkeypatch.setenv("MLMJAX_NOTEBOOK_REPO_DIR", REPO)
  monkeypatch.setenv("MLMJAX_NOTEBOOK_STEPS", str(STEPS))
  workdir = tmp_path / "run"
  monkeypatch.setenv("MLMJAX_NOTEBOOK_WORKDIR", str(workdir))
  return workdir


def _text(cell) -> str:
  return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.slow
def test_notebook_runs_on_cpu(kernel_env, tmp_path):
  workdir = kernel_env
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(nb, kernel_name="mlmjax-test", timeout=600,
                                   resources={"metadata": {"path": str(tmp_path)}})
  client.execute()  # raises CellExecutionError, with the traceback, if any cell fails
  cells = {c.id: c for c in nb.cells}
  assert not any(o.output_type == "error" for c in nb.cells if c.cell_type == "code"
                 for o in c.outputs)

  assert "MLMJAX_NOTEBOOK_SKIP_INSTALL=1" in _text(cells["install"])
  assert "backend cpu, 1 devices" in _text(cells["devices"])
  train_log = _text(cells["train"])
  assert f"step {STEPS}/{STEPS} | loss" in train_log and f"eval at step {STEPS}" in train_log
  assert "orbax" not in train_log.lower()  # the libraries' INFO chatter is filtered out

  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl", encoding="utf-8")]
  assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1))
  plot = workdir / "loss.png"
  assert plot.exists() and plot.stat().st_size > 10_000
  assert any("image/png" in o.get("data", {}) for o in cells["plot"].outputs)

  fill = _text(cells["predict"]).splitlines()
  assert fill[0] == f"checkpoint step {STEPS} of {workdir}"
  assert fill[1] == "In the beginning God created the [MASK] and the earth."
  assert fill[2].startswith("  [MASK] 1: ") and fill[2].count("(0.") + fill[2].count("(1.") == 5
