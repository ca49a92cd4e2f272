"""One trainer per workdir: the second refuses naming the holder; a dead holder's lock is
taken over, on this host (its pid is gone) and from another host (its heartbeat stopped)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO, user_env
from mlmjax.training.run import workdir_lock


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


def _holder(tmp_path) -> dict:
  return json.loads((tmp_path / "lock").read_text())


def test_the_lock_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path, lock_clock):
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  _write(tmp_path, host=socket.gethostname(), pid=int(dead.stdout))
  with _lock(tmp_path, stale_s=30):
    assert _holder(tmp_path)["pid"] == os.getpid()
  # At once: its pid is gone, so no watching of its heartbeat (which would sleep for 30 s).
  assert lock_clock.now < 1.0


def test_the_lock_of_a_zombie_on_this_host_is_taken_over_at_once(tmp_path, lock_clock):
  """A holder that exited but was not reaped (its parent died too, and a container's init is
  slow to reap) still answers kill(pid, 0): a real zombie, our own unreaped child."""
  zombie = subprocess.Popen([sys.executable, "-c", "pass"])
  try:
    for _ in range(200):  # until it has exited (never waited for, so it stays a zombie)
      if workdir_lock._zombie(zombie.pid):  # pylint: disable=protected-access
        break
      time.sleep(0.05)  # the real clock: the fake one is workdir_lock's
    os.kill(zombie.pid, 0)  # the pid answers...
    _write(tmp_path, host=socket.gethostname(), pid=zombie.pid)
    with _lock(tmp_path, stale_s=30):  # ...yet the lock is taken over
      assert _holder(tmp_path)["pid"] == os.getpid()
    assert lock_clock.now < 1.0
  finally:
    zombie.wait()


def test_another_hosts_lock_is_taken_over_only_once_its_heartbeat_stops(tmp_path, lock_clock):
  """On a fake clock (conftest.FakeClock): the other host's heartbeat moves, or not, while this
  trainer watches it."""
  _write(tmp_path, host="node-that-died", pid=1)
  with _lock(tmp_path, stale_s=30.0):  # nothing moves: taken over...
    assert _holder(tmp_path)["host"] == socket.gethostname()
  assert lock_clock.now >= 30.0  # ...but only after watching it for the whole 30 s

  _write(tmp_path, host="node-alive", pid=1)

  def beat():  # the other host's trainer, alive: its heartbeat moves meanwhile
    record = _holder(tmp_path)
    record["heartbeat"] += 1
    (tmp_path / "lock.other").write_text(json.dumps(record))
    os.replace(tmp_path / "lock.other", tmp_path / "lock")
  lock_clock.on_sleep = beat
  with pytest.raises(workdir_lock.WorkdirBusyError, match="host node-alive, pid 1"):
    with _lock(tmp_path, stale_s=30.0):
      pass
  assert _holder(tmp_path)["host"] == "node-alive"  # left to its holder


def test_a_live_holders_heartbeat_keeps_another_host_out(tmp_path):
  """A real holder (heartbeat thread) that looks like another host's: the watcher refuses as
  soon as the heartbeat moves; its long stale_s only bounds a broken heartbeat."""
  holder = _lock(tmp_path, heartbeat_s=0.05)
  holder._me["host"] = "node-alive"  # pylint: disable=protected-access
  with holder:
    with pytest.raises(workdir_lock.WorkdirBusyError, match="host node-alive"):
      with _lock(tmp_path, stale_s=120.0):
        pass
    assert _holder(tmp_path)["heartbeat"] > 0


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
