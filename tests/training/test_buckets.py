"""Runs and data in buckets, against real storage servers on 127.0.0.1 (storage_servers.py):
the path layer, the workdir lease, and a two-process run in a gs:// workdir that is SIGKILLed
and restarted and ends bit-identical to an uninterrupted run."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import portpicker
import pytest

import storage_servers
from conftest import REPO, assert_same_arrays, saved_state
from shared_runs import TWO_PROCESS_OVERRIDES
from mlmjax import paths
from mlmjax.training.run import workdir_lock

pytestmark = pytest.mark.slow  # storage servers, and a two-process run killed and restarted


@pytest.fixture(scope="module")
def gcs():
  with storage_servers.fake_gcs() as server:
    yield server


@pytest.fixture(scope="module")
def s3():
  with storage_servers.moto_s3() as server:
    yield server


@pytest.fixture(params=["gcs", "s3"])
def bucket(request):
  """A fresh bucket on either server."""
  return request.getfixturevalue(request.param).make_bucket()


# ---- the path layer ---------------------------------------------------------------------------
def test_paths_read_write_list_glob_and_copy(bucket, tmp_path):
  root = f"{bucket}/dir"
  assert not paths.exists(root) and not paths.isdir(root)
  paths.makedirs(root)  # nothing to do in a bucket
  paths.write_atomic(paths.join(root, "a.txt"), "alpha\n")
  paths.write_atomic(paths.join(root, "sub", "b.jsonl"), b'{"text": "beta"}\n')
  with paths.open(paths.join(root, "c.txt"), "w") as f:
    f.write("gamma")
  assert paths.read_text(paths.join(root, "a.txt")) == "alpha\n"
  assert paths.isfile(paths.join(root, "a.txt")) and paths.isdir(paths.join(root, "sub"))
  assert paths.listdir(root) == ["a.txt", "c.txt", "sub"]
  assert paths.glob(f"{root}/*.txt") == [f"{root}/a.txt", f"{root}/c.txt"]
  assert paths.glob(f"{root}/**/*.jsonl") == [f"{root}/sub/b.jsonl"]
  with paths.open(paths.join(root, "a.txt"), "rb") as f:  # ranged reads
    f.seek(2)
    assert f.read(3) == b"pha"
  paths.download(root, str(tmp_path / "copy"))
  assert (tmp_path / "copy" / "sub" / "b.jsonl").read_text() == '{"text": "beta"}\n'
  paths.upload(str(tmp_path / "copy"), f"{bucket}/again")
  assert paths.read_text(f"{bucket}/again/c.txt") == "gamma"
  paths.remove(paths.join(root, "c.txt"))
  assert not paths.exists(paths.join(root, "c.txt"))


def test_conditional_writes(bucket):
  path = f"{bucket}/lease"
  v1 = paths.write_if(path, b"one", None)
  assert v1 and paths.write_if(path, b"two", None) is None  # exists already
  assert paths.read_versioned(path) == (b"one", v1)
  v2 = paths.write_if(path, b"three", v1)
  assert v2 and v2 != v1 and paths.write_if(path, b"four", v1) is None  # v1 is stale
  assert not paths.delete_if(path, v1) and paths.delete_if(path, v2)
  assert paths.read_versioned(path) is None


# ---- the workdir lease ------------------------------------------------------------------------
def _lock(workdir, **kw):
  return workdir_lock.WorkdirLock(paths.join(workdir, "lock"), workdir, **kw)


def _lease(workdir) -> dict:
  """The lease's record, read in one request (a file read of an object its holder replaces
  meanwhile fails in s3fs with FileExpired)."""
  return json.loads(paths.read_versioned(f"{workdir}/lock")[0])


def _until(predicate, what, timeout_s=120.0):
  """Polls `predicate` until it holds; the deadline only bounds a hang."""
  deadline = time.monotonic() + timeout_s
  while not predicate():
    assert time.monotonic() < deadline, f"still not {what} after {timeout_s:.0f} s"
    time.sleep(0.05)


def test_the_lease_refuses_a_second_trainer_and_is_released(bucket):
  workdir = f"{bucket}/run"
  with _lock(workdir, heartbeat_s=0.2):
    held = _lease(workdir)
    with pytest.raises(workdir_lock.WorkdirBusyError) as e:
      with _lock(workdir):
        pass
    assert str(e.value) == (
        f"--workdir={workdir} is in use by another trainer (host {socket.gethostname()}, pid"
        f" {os.getpid()}, since {held['started']}); stop it first, or use another --workdir")
    _until(lambda: _lease(workdir)["heartbeat"] >= 2, "renewed twice")
    assert _lease(workdir)["token"] == held["token"]  # renewed by its holder, not replaced
  assert not paths.exists(f"{workdir}/lock")
  with _lock(workdir):  # free again
    pass


def test_a_stale_lease_is_taken_over_and_its_old_holder_learns_it(bucket, lock_clock):
  """Watched on a fake clock (conftest.FakeClock), so that a slow store changes nothing."""
  workdir = f"{bucket}/run"
  dead = json.dumps({"host": "node-that-died", "pid": 1, "token": "x", "heartbeat": 0,
                     "started": "earlier"}).encode()
  dead_version = paths.write_if(f"{workdir}/lock", dead, None)
  with _lock(workdir, stale_s=30.0) as lock:  # nothing moves: taken over...
    record = _lease(workdir)
    assert record["host"] == socket.gethostname()
    assert record["token"] == lock._me["token"]  # pylint: disable=protected-access
    # ...and the old holder learns it: its renewal, conditional on its version, is refused.
    assert paths.write_if(f"{workdir}/lock", dead, dead_version) is None
    assert _lease(workdir)["token"] == record["token"]
  assert lock_clock.now >= 30.0  # ...but only after watching it for the whole 30 s


def test_a_live_holders_lease_is_not_taken(bucket):
  """A holder elsewhere that keeps renewing (its real heartbeat thread): the watcher refuses as
  soon as the lease moves; its long stale_s only bounds a broken renewal."""
  workdir = f"{bucket}/run"
  other = _lock(workdir, heartbeat_s=0.2)
  other._me["host"] = "node-alive"  # pylint: disable=protected-access
  with other:
    with pytest.raises(workdir_lock.WorkdirBusyError, match="host node-alive"):
      with _lock(workdir, stale_s=120.0):
        pass
    assert _lease(workdir)["host"] == "node-alive"


def test_a_holder_whose_lease_was_taken_stops_renewing_it(bucket, caplog):
  workdir = f"{bucket}/run"
  lock = _lock(workdir, heartbeat_s=0.2)
  with caplog.at_level(logging.ERROR), lock:
    got = paths.read_versioned(f"{workdir}/lock")
    assert paths.write_if(f"{workdir}/lock", b'{"token": "thief"}', got[1])
    # Its next renewal is refused: it says so and its heartbeat thread ends (the join only
    # bounds a hang).
    lock._thread.join(timeout=120)  # pylint: disable=protected-access
    assert not lock._thread.is_alive()  # pylint: disable=protected-access
    assert f"The lock of {workdir} was taken by another trainer" in caplog.text
    assert paths.read_text(f"{workdir}/lock") == '{"token": "thief"}'  # not overwritten
  assert paths.read_text(f"{workdir}/lock") == '{"token": "thief"}'  # nor deleted


# ---- a two-process run in a gs:// workdir, killed and restarted -------------------------------
OVERRIDES = TWO_PROCESS_OVERRIDES  # those of the shared two_process_run, its local twin


def _start(workdir, tokenizer_path, env, log_dir, tag):
  """Two processes of mlmjax.main (one CPU device each) on `workdir`."""
  port = portpicker.pick_unused_port()
  env = dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=1")
  procs = []
  for i in range(2):
    log = open(os.path.join(log_dir, f"{tag}.{i}.log"), "w")
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "mlmjax.main", "--config=configs/tiny.py",
         f"--workdir={workdir}", f"--config.tokenizer.path={tokenizer_path}", *OVERRIDES,
         f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True))
  return procs


def _wait(procs, log_dir, tag):
  for p in procs:
    p.wait(timeout=600)
  logs = [open(os.path.join(log_dir, f"{tag}.{i}.log")).read() for i in range(2)]
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log[-3000:]
  return logs


def _rows(workdir):
  return [json.loads(line) for line in paths.read_text(paths.join(workdir, "metrics.jsonl"))
          .splitlines()]


def test_two_process_run_in_a_bucket_killed_and_restarted_is_bit_identical(
    gcs, tokenizer_path, tmp_path, two_process_run):
  env = {**os.environ, **gcs.env}
  local, _ = two_process_run  # the same run in a local folder, never interrupted

  workdir = f"{gcs.make_bucket()}/run"
  procs = _start(workdir, tokenizer_path, env, tmp_path, "killed")
  deadline = time.monotonic() + 600
  checkpoint = f"{workdir}/checkpoints/2/commit_success.txt"
  while not paths.exists(checkpoint) and time.monotonic() < deadline:
    assert all(p.poll() is None for p in procs), "the run ended before it was killed"
    time.sleep(0.05)
  for p in procs:
    p.send_signal(signal.SIGKILL)
    p.wait()
  assert paths.exists(f"{workdir}/lock")  # left behind by the killed run

  logs = _wait(_start(workdir, tokenizer_path, env, tmp_path, "resumed"), tmp_path, "resumed")
  assert "Resumed from checkpoint at step" in logs[0]
  assert "Taking over the lock of a trainer that is gone" in logs[0]
  assert not paths.exists(f"{workdir}/lock")  # released at the end

  assert [r["step"] for r in _rows(workdir) if "loss" in r] == [2, 4, 6, 8]
  losses = lambda rows: [r["loss"] for r in rows if "loss" in r]
  assert losses(_rows(workdir)) == losses(_rows(local))
  assert_same_arrays(saved_state(local, 8), saved_state(workdir, 8))
  for name in ("config.json", "tokenizer.model", "tokenizer_stats.npz", "curves.png"):
    assert paths.exists(f"{workdir}/{name}")
  assert paths.listdir(f"{workdir}/tensorboard")


def test_a_second_trainer_on_a_bucket_workdir_refuses(gcs, tokenizer_path, tmp_path):
  workdir = f"{gcs.make_bucket()}/run"
  with _lock(workdir):  # a live trainer (this process) holds it
    out = subprocess.run(
        [sys.executable, "-m", "mlmjax.main", "--config=configs/tiny.py", f"--workdir={workdir}",
         f"--config.tokenizer.path={tokenizer_path}", *OVERRIDES],
        cwd=REPO, env={**os.environ, **gcs.env}, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1
  assert f"error: --workdir={workdir} is in use by another trainer" in out.stderr
