"""The progress log's machine figures."""

import json
import os
import subprocess
import sys

import jax
import pytest

from conftest import REPO, user_env
from mlmjax.training.run import metrics


def test_peak_device_memory_is_logged_where_the_runtime_reports_it(caplog):
  # A CPU reports no memory statistics: no figure rather than a made-up one.
  cpus = [d.memory_stats() for d in jax.local_devices()]
  assert cpus == [None] * 8 and metrics.device_memory(cpus) == {}
  # What two GPUs' runtime reports (the keys of jax's memory_stats() there): the larger peak.
  gpus = [{"bytes_in_use": 2 * 2**30, "peak_bytes_in_use": p * 2**30, "bytes_limit": 4 * 2**30}
          for p in (2.5, 3)]
  row = {"loss": 2.0, "mlm_accuracy": 0.5, "learning_rate": 1e-4, **metrics.device_memory(gpus)}
  assert row["memory_peak_gib"] == 3.0
  with caplog.at_level("INFO"):
    metrics.log_progress(5, 10, row)
  assert caplog.records[-1].getMessage() == (
      "step 5/10 | loss 2.0000 | mlm_acc 0.5000 | lr 1.00e-04 | peak memory 3.00 GiB")


# In a fresh interpreter: a writer, one row, then what it imported and, where torch is installed
# (pass 1's environment; not .ci/newest_jax's), whether torch still imports.
_WRITER = """
import importlib.util, json, os, sys
from mlmjax.training.run import metrics
folder = sys.argv[1]
writer = metrics.MetricWriter(os.path.join(folder, "metrics.jsonl"), os.path.join(folder, "tb"))
writer.write(1, {"loss": 2.5})
writer.close()
out = {"torch_imported": "torch" in sys.modules}
if importlib.util.find_spec("torch") is not None:
  import torch
  out["torch_imports_after"] = torch.__name__ == "torch"
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh interpreter imports mlmjax and tensorboardX (about 10 s)
def test_the_writer_leaves_torch_unimported_and_importable(tmp_path):
  """tensorboardX's writer module imports torch whenever it is installed, 3-4 s of every
  run's start; the metric writer imports it without (metrics.py) and leaves torch to import
  as usual."""
  proc = subprocess.run([sys.executable, "-c", _WRITER, str(tmp_path)], cwd=REPO,
                        env=user_env(), capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.splitlines()[-1])
  assert out["torch_imported"] is False and out.get("torch_imports_after", True) is True
  assert metrics.rows(str(tmp_path / "metrics.jsonl")) == [{"step": 1, "loss": 2.5}]
  assert os.listdir(tmp_path / "tb")  # the event file
