"""One trainer per workdir: the second refuses naming the holder; a dead holder's lock is
taken over, on this host (its pid is gone) and from another host (its heartbeat stopped)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, user_env
from mlmjax.training import workdir_lock


def _lock(tmp_path, **kw):
  return workdir_lock.WorkdirLock(str(tmp_path / "lock"), str(tmp_path), **kw)


def _write(tmp_path, **record):
  (tmp_path / "lock").write_text(json.dumps({"token": "x", "heartbeat": 0,
                                             "started": "earlier", **record}))


def test_a_held_lock_refuses_and_is_released(tmp_path):
  with _lock(tmp_path):
    with pytest.raises(workdir_lock.WorkdirBusyError) as e:
      with _lock(tmp_path):
        pass
    held = json.loads((tmp_path / "lock").read_text())
    assert str(e.value) == (
        f"--workdir={tmp_path} is in use by another trainer (host {socket.gethostname()}, pid"
        f" {os.getpid()}, since {held['started']}); stop it first, or use another --workdir")
  assert not (tmp_path / "lock").exists()
  with _lock(tmp_path):  # free again
    pass


def test_the_lock_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  _write(tmp_path, host=socket.gethostname(), pid=int(dead.stdout))
  t = time.monotonic()
  with _lock(tmp_path, stale_s=30):
    assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
  assert time.monotonic() - t < 5


def test_another_hosts_lock_is_taken_over_only_once_its_heartbeat_stops(tmp_path):
  _write(tmp_path, host="node-that-died", pid=1)
  with _lock(tmp_path, stale_s=1.0):  # nothing moves within 1 s: taken over
    assert json.loads((tmp_path / "lock").read_text())["host"] == socket.gethostname()

  _write(tmp_path, host="node-alive", pid=1)
  stop = threading.Event()

  def beat():  # the other host's trainer, alive: its heartbeat moves
    n = 0
    while not stop.wait(0.1):
      n += 1
      tmp = tmp_path / "lock.other"
      tmp.write_text(json.dumps({"token": "x", "heartbeat": n, "host": "node-alive", "pid": 1,
                                 "started": "earlier"}))
      os.replace(tmp, tmp_path / "lock")
  thread = threading.Thread(target=beat)
  thread.start()
  try:
    with pytest.raises(workdir_lock.WorkdirBusyError, match="host node-alive, pid 1"):
      with _lock(tmp_path, stale_s=2.0):
        pass
  finally:
    stop.set()
    thread.join()


@pytest.mark.slow
def test_a_second_trainer_on_the_same_workdir_refuses(tmp_path, tokenizer_path):
  workdir = str(tmp_path / "run")
  command = [sys.executable, "-m", "mlmjax.main", "--config=configs/tiny.py",
             f"--workdir={workdir}", f"--config.tokenizer.path={tokenizer_path}",
             "--config.model.num_layers=1", "--config.train.steps=100000",
             "--config.train.log_every_steps=5", "--config.train.eval_every_steps=100000"]
  first = subprocess.Popen(command, cwd=REPO, env=user_env(), stderr=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, text=True)
  try:
    for line in first.stderr:
      if "| loss" in line:
        break
    second = subprocess.run(command, cwd=REPO, env=user_env(), capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 1
    assert second.stderr.strip().splitlines()[-1] == (
        f"error: --workdir={workdir} is in use by another trainer (host {socket.gethostname()},"
        f" pid {first.pid}, since {json.load(open(os.path.join(workdir, 'lock')))['started']});"
        " stop it first, or use another --workdir")
    assert first.poll() is None  # the first one trains on, undisturbed
  finally:
    first.kill()
    first.wait()
