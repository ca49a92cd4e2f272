"""Runs that tests in several files compare with, made once per test session whichever
pytest process (xdist worker) asks first, the others waiting on a file lock in the folder all
of them share (MLMJAX_TEST_SHARED, made by conftest.py like the compilation cache)."""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

import portpicker

from conftest import REPO


def shared_run(name: str, make) -> str:
  """MLMJAX_TEST_SHARED/NAME, made by `make(folder)` once per session by whichever process asks
  first while the others wait on its lock: a run that tests in several files compare with,
  whichever xdist worker runs them. A `make` that fails leaves it to the next to ask."""
  folder = os.path.join(os.environ["MLMJAX_TEST_SHARED"], name)
  with open(folder + ".lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(folder + ".done"):
      shutil.rmtree(folder, ignore_errors=True)
      os.makedirs(folder)
      make(folder)
      open(folder + ".done", "w", encoding="utf-8").close()
  return folder


# The tiny preset's 8 steps on two processes of one CPU device each (jax.distributed on
# localhost), checkpointed every 2 steps: two_process_run's flags, which the tests that compare
# with it start from.
TWO_PROCESS_OVERRIDES = [
    "--config.train.batch_size=8", "--config.data.num_shards=2", "--config.data.seq_len=32",
    "--config.masking.max_predictions_per_seq=10", "--config.model.num_layers=2",
    "--config.train.log_every_steps=2", "--config.train.checkpoint_every_steps=2",
    "--config.train.eval_every_steps=4", "--config.train.eval_batches=1",
    "--config.optimizer.warmup_steps=2", "--config.train.steps=8"]


def two_processes(tokenizer_path: str) -> tuple[str, list[str]]:
  """A run of TWO_PROCESS_OVERRIDES, once per session (each worker trains its own tokenizer,
  so the run is kept per tokenizer file): (its workdir, each process's log)."""
  with open(tokenizer_path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]

  def make(folder):
    port = portpicker.pick_unused_port()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    procs = []
    for i in range(2):
      with open(os.path.join(folder, f"{i}.log"), "w", encoding="utf-8") as log:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "mlmjax.main", "--config=configs/tiny.py",
             f"--workdir={folder}/run", f"--config.tokenizer.path={tokenizer_path}",
             *TWO_PROCESS_OVERRIDES, f"--coordinator_address=127.0.0.1:{port}",
             "--num_processes=2", f"--process_id={i}"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log))
    for i, p in enumerate(procs):
      with open(os.path.join(folder, f"{i}.log"), encoding="utf-8") as log:
        assert p.wait(timeout=600) == 0, log.read()[-3000:]

  folder = shared_run(f"two_processes_{digest}", make)
  logs = []
  for i in range(2):
    with open(os.path.join(folder, f"{i}.log"), encoding="utf-8") as f:
      logs.append(f.read())
  return os.path.join(folder, "run"), logs
