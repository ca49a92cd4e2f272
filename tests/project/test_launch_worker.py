"""launch/worker.sh, what `tpu.sh` runs on each TPU worker: its setup installs the tree with
[tpu,gcs]; train starts one detached run and refuses a second; stop, logs and --dry-run.
Fakes stand in for uv and the venv's python; nothing is installed or trained."""

import os
import signal
import stat
import subprocess
import time

import pytest

from conftest import REPO

WORKER = os.path.join(REPO, "launch", "worker.sh")


def _write_exe(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


@pytest.fixture
def worker_env(tmp_path):
  """A fake venv whose python acts like mlmjax.main: it runs until SIGTERM, then 'saves'."""
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  _write_exe(venv / "bin" / "python", """#!/bin/bash
if [[ $1 == -c ]]; then echo "fake python -c"; exit 0; fi
echo "fake mlmjax in $PWD: $*"
trap 'echo "fake mlmjax: SIGTERM, saved a checkpoint"; exit 0' TERM
while true; do sleep 0.05; done
""")
  env = {k: v for k, v in os.environ.items() if not k.startswith("MLMJAX_")}
  env.update(MLMJAX_VENV=str(venv), MLMJAX_LOG_DIR=str(tmp_path / "logs"), HOME=str(tmp_path))
  yield env
  pid_file = tmp_path / "logs" / "train.pid"
  if pid_file.exists():  # never leave the fake run behind
    try:
      os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except (ProcessLookupError, ValueError):
      pass


def _worker(env, *args):
  return subprocess.run([WORKER, *args], env=env, capture_output=True, text=True, timeout=30)


def _wait_for(predicate, timeout=120.0):
  """Polls until `predicate` holds; the deadline only bounds a hang (a loaded machine may take
  seconds to start a process)."""
  end = time.monotonic() + timeout
  while time.monotonic() < end:
    if predicate():
      return True
    time.sleep(0.05)
  return False


def test_worker_train_stop_logs(worker_env, tmp_path):
  log = tmp_path / "logs" / "train.log"
  start = _worker(worker_env, "train", "--config=configs/tiny.py", "--workdir=/mnt/runs/t")
  assert start.returncode == 0, start.stderr
  assert start.stdout.startswith("mlmjax started on ") and str(log) in start.stdout
  pid = int((tmp_path / "logs" / "train.pid").read_text())
  assert _wait_for(lambda: "fake mlmjax in" in log.read_text())
  text = log.read_text()
  assert "start: python -m mlmjax.main --config=configs/tiny.py --workdir=/mnt/runs/t" in text
  # Detached, in the tree's root (relative config paths), with the flags as given.
  assert f"fake mlmjax in {REPO}: -m mlmjax.main --config=configs/tiny.py --workdir=/mnt/runs/t" in text

  again = _worker(worker_env, "train", "--config=configs/tiny.py", "--workdir=/mnt/runs/t")
  assert again.returncode == 1 and "already training on" in again.stderr and str(pid) in again.stderr

  tail = _worker(worker_env, "logs", "--lines=1")
  assert tail.returncode == 0 and tail.stdout.startswith("fake mlmjax in ")

  stop = _worker(worker_env, "stop")
  assert stop.returncode == 0 and "sent SIGTERM to mlmjax on" in stop.stdout
  assert _wait_for(lambda: "SIGTERM, saved a checkpoint" in log.read_text())
  assert _wait_for(lambda: _worker(worker_env, "stop").stdout.startswith("mlmjax is not running"))
  # After a stop (or a preemption), train starts again: mlmjax resumes from the workdir.
  restart = _worker(worker_env, "train", "--config=configs/tiny.py", "--workdir=/mnt/runs/t")
  assert restart.returncode == 0, restart.stderr
  assert int((tmp_path / "logs" / "train.pid").read_text()) != pid
  _worker(worker_env, "stop")


def test_worker_setup_uses_uv_for_python_3_12(worker_env, tmp_path):
  calls = tmp_path / "uv.log"
  (tmp_path / ".local" / "bin").mkdir(parents=True)
  _write_exe(tmp_path / ".local" / "bin" / "uv", f'#!/bin/bash\necho "uv $*" >> "{calls}"\n')
  proc = _worker(worker_env, "setup")
  assert proc.returncode == 0, proc.stderr
  venv = worker_env["MLMJAX_VENV"]
  assert calls.read_text().splitlines() == [
      f"uv venv --quiet --allow-existing --python=3.12 {venv}",
      f"uv pip install --quiet --python={venv}/bin/python --editable={REPO}[tpu,gcs]"]
  # Then the venv's python checks the install (here the fake, which ignores it).
  assert proc.stdout == "fake python -c\n"
  # Each command is shown on stderr as it runs.
  assert f"+ {tmp_path}/.local/bin/uv venv --quiet" in proc.stderr


def test_worker_setup_dry_run_installs_tpu_and_gcs_extras(worker_env, tmp_path):
  """[tpu,gcs] always: a gs:// workdir or data set works on every worker it set up."""
  venv, uv = worker_env["MLMJAX_VENV"], f"{tmp_path}/.local/bin/uv"
  expected = [
      "+ sh -c 'curl -LsSf https://astral.sh/uv/install.sh | sh'",  # no uv yet
      f"+ {uv} venv --quiet --allow-existing --python=3.12 {venv}",
      f"+ {uv} pip install --quiet --python={venv}/bin/python --editable='{REPO}[tpu,gcs]'",
      f"+ {venv}/bin/python -c 'import jax, mlmjax; print(\"mlmjax ready: jax\", jax.__version__)'"]
  for args in (["setup", "--dry-run"], ["--dry-run", "setup"]):
    proc = _worker(worker_env, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == expected
  assert not (tmp_path / ".local").exists()
  # MLMJAX_EXTRAS picks other extras (a GPU machine: gpu,gcs).
  proc = _worker({**worker_env, "MLMJAX_EXTRAS": "gpu,gcs"}, "setup", "--dry-run")
  assert f"--editable='{REPO}[gpu,gcs]'" in proc.stdout.splitlines()[2]


def test_worker_dry_run_starts_and_stops_nothing(worker_env, tmp_path):
  venv, log = worker_env["MLMJAX_VENV"], tmp_path / "logs" / "train.log"
  proc = _worker(worker_env, "--dry-run", "train", "--config=configs/tiny.py",
                 "--workdir=gs://bucket/runs/t")
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == [
      f"+ cd {REPO}",
      f"+ nohup {venv}/bin/python -m mlmjax.main --config=configs/tiny.py"
      f" --workdir=gs://bucket/runs/t >>{log} 2>&1 </dev/null &"]
  assert not (tmp_path / "logs").exists()
  assert _worker(worker_env, "logs", "--dry-run", "--follow").stdout == f"+ tail -n 100 -F {log}\n"
