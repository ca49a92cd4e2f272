"""Importing mlmjax changes nothing outside it (issue 51): no sys.modules entry of another
package replaced or hidden (jax's plugins are hidden only where a program starts:
parallel/plugins.py, cli.py), no jax.monitoring listener registered (a time budget registers
its own when the first one is made: training/planning/time_budget.py), and compile targets restore
only the environment keys they set (parallel/targets.py)."""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, user_env
from mlmjax.parallel import plugins
from mlmjax.parallel import targets

# In a fresh interpreter: what the imports did to sys.modules and jax.monitoring;
# then a time budget's listener, registered once however many budgets are made.
_CHECK = """
import json, sys
before = dict(sys.modules)
import mlmjax
from mlmjax.parallel import plugins
import mlmjax.parallel.targets
import mlmjax.training.planning.time_budget as time_budget
import jax._src.monitoring as monitoring

def mlmjax_listeners():
  return [l for l in monitoring.get_event_duration_listeners()
          if getattr(l, "__module__", "").startswith("mlmjax")]

names = [n for p in plugins._PLUGINS.values() for n in p.modules + p.stand_ins]
out = {
    "replaced": sorted(k for k, v in before.items() if sys.modules.get(k) is not v),
    "plugin_entries": {n: repr(sys.modules[n]) for n in names
                       if n in sys.modules and (sys.modules[n] is None or
                                                sys.modules[n].__doc__ == plugins._STAND_IN_DOC)},
    "plugin_entries_before": sorted(n for n in names if n in before),
    "hidden": [plugins.hidden("cuda"), plugins.hidden("tpu")],
    "listeners_after_import": len(mlmjax_listeners()),
}
time_budget.TimeBudget(hours=1.0)
time_budget.TimeBudget(hours=2.0)
out["listeners_after_two_budgets"] = len(mlmjax_listeners())
print(json.dumps(out))
"""


def test_importing_mlmjax_hides_no_plugin_and_registers_no_listener():
  env = user_env()
  env["JAX_PLATFORMS"] = "cpu"  # where plugins.hide() would hide both plugins (no accelerator)
  proc = subprocess.run([sys.executable, "-c", _CHECK], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.splitlines()[-1])
  assert out["replaced"] == []  # only the imported modules' own additions
  assert out["plugin_entries_before"] == [] and out["plugin_entries"] == {}
  assert out["hidden"] == [False, False]
  assert out["listeners_after_import"] == 0
  assert out["listeners_after_two_budgets"] == 1


@pytest.mark.skipif(plugins.nvidia_gpu() or plugins.tpu_vm(),
                    reason="their accelerator is here: nothing to hide")
def test_importing_the_library_prints_nothing_of_cuda():
  """Where [test] installs the CUDA plugin on a machine without a GPU, `import jax` (0.10)
  prints its driver notice three times; importing mlmjax's library modules (jax with them)
  prints nothing.
  (Starting jax's devices is jax's: a program hides the plugin first, `hide` below.)"""
  assert importlib.util.find_spec("jax_cuda12_plugin") is not None  # else this shows nothing
  env = user_env()
  env.pop("JAX_PLATFORMS", None)  # as in a user's shell

  def stderr_of(code):
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=True).stderr

  assert stderr_of("import mlmjax.training.core.steps, mlmjax.inference, jax") == ""
  # What it keeps out: jax 0.10 (the floor) prints it when imported; 0.12 loads no kernel then.
  if importlib.metadata.version("jax").startswith("0.10."):
    assert "Could not find cuda drivers" in stderr_of("import jax")


@pytest.mark.skipif(plugins.nvidia_gpu() or plugins.tpu_vm(),
                    reason="their accelerator is here: nothing to hide")
def test_hide_is_what_hides_them():
  """What the check above would see, had the imports hidden them: plugins.hide() does."""
  env = user_env()
  env["JAX_PLATFORMS"] = "cpu"
  code = ("import sys; from mlmjax.parallel import plugins; plugins.hide();"
          " print(plugins.hidden('cuda'), plugins.hidden('tpu'), 'jax' in sys.modules)")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=60, check=True)
  assert proc.stdout.split() == ["True", "True", "False"]


def test_a_target_restores_the_keys_it_set_and_leaves_the_others(monkeypatch):
  for key in targets._LOADING_ENV:  # pylint: disable=protected-access
    monkeypatch.delenv(key, raising=False)
  monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
  monkeypatch.setenv("MLMJAX_TEST_UNRELATED", "before")
  monkeypatch.setenv("TPU_WORKER_ID", "7")  # set by the user: kept, not overwritten
  before = dict(os.environ)
  with targets._quiet_libtpu():  # pylint: disable=protected-access
    assert os.environ["TPU_ACCELERATOR_TYPE"] == "v5p-8" and os.environ["TPU_WORKER_ID"] == "7"
    os.environ["TPU_LIBRARY_PATH"] = "/what/libtpu/sets"  # as libtpu's import does
    monkeypatch.setenv("MLMJAX_TEST_SET_INSIDE", "kept")  # by someone else, meanwhile
  assert "MLMJAX_TEST_SET_INSIDE" in os.environ  # not the context's key: left alone
  monkeypatch.delenv("MLMJAX_TEST_SET_INSIDE")
  assert dict(os.environ) == before
  assert os.environ["MLMJAX_TEST_UNRELATED"] == "before" and os.environ["TPU_WORKER_ID"] == "7"
  assert not any(k in os.environ for k in ("TPU_ACCELERATOR_TYPE", "TPU_LIBRARY_PATH",
                                           "TPU_SKIP_MDS_QUERY", "ALLOW_MULTIPLE_LIBTPU_LOAD"))


def test_a_target_restores_its_keys_after_an_error(monkeypatch):
  monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
  monkeypatch.setenv("MLMJAX_TEST_UNRELATED", "before")
  try:
    with targets._quiet_libtpu():  # pylint: disable=protected-access
      raise RuntimeError("jax failed to load the plugin")
  except RuntimeError:
    pass
  assert "TPU_ACCELERATOR_TYPE" not in os.environ
  assert os.environ["MLMJAX_TEST_UNRELATED"] == "before"
