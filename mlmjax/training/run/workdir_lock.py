"""One trainer per workdir: a second run on a workdir in use refuses, naming the holder.

A resubmitted job, a re-run notebook cell or a second terminal would otherwise train side by
side with the first, both writing checkpoints and metrics. The lock is a small JSON file
(`WORKDIR/lock`: host, pid, start time, a heartbeat counter) created atomically; the holder
rewrites it every `heartbeat_s` seconds from a background thread and removes it when the run
ends. A lock left behind by a process that died (SIGKILL, power loss) is taken over:

  same host     the holder's pid no longer exists, or is a zombie (decided at once);
  another host  (a shared disk, e.g. a pod's NFS workdir) the heartbeat does not move while
                this process watches it for `stale_s` seconds. Clocks of different hosts are
                never compared.

Multi-host runs: only process 0 takes the lock (all processes of a run are one trainer); the
others learn its answer and refuse with the same message.

A workdir in a bucket (`gs://`, `s3://`) has the same lock as a lease object: created only if
absent (GCS `ifGenerationMatch=0`, S3 `If-None-Match: *`), renewed and released only if it is
still the version this trainer wrote (`ifGenerationMatch` / `If-Match`), and taken over, once
stale, only if nobody renewed or took it meanwhile. The store arbitrates every race, so two
trainers can never both hold it; a trainer whose renewal is refused has lost the lease and says
so.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from absl import logging
import jax

from mlmjax import errors
from mlmjax import paths
from mlmjax.parallel import distributed


class WorkdirBusyError(errors.UserError):
  """Another live trainer holds the workdir."""


class WorkdirLock:

  def __init__(self, path: str, workdir: str, heartbeat_s: float = 10.0,
               stale_s: float = 60.0):
    self.path, self.workdir = path, workdir
    self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
    self._me = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex,
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "heartbeat": 0}
    self._stop = threading.Event()
    self._thread = None
    self._remote = paths.is_remote(path)
    self._version: str | None = None  # bucket: the lease version last seen or written

  def __enter__(self) -> "WorkdirLock":
    error = self._acquire() if jax.process_index() == 0 else None
    error = distributed.allgather_json(error)[0]  # every process learns process 0's answer
    if error:
      raise WorkdirBusyError(error)
    if jax.process_index() == 0:
      self._thread = threading.Thread(target=self._beat, daemon=True, name="workdir-lock")
      self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    if self._thread is None:
      return
    self._stop.set()
    self._thread.join()
    if self._remote:
      if self._version is not None:
        paths.delete_if(self.path, self._version)  # not if another trainer took it meanwhile
    elif (self._read() or {}).get("token") == self._me["token"]:
      os.remove(self.path)

  # ---- process 0 ------------------------------------------------------------------------------
  def _acquire(self) -> str | None:
    """None when the lock is ours now, else the refusal."""
    if self._create():
      return None
    holder = self._read()
    if holder and self._alive(holder):
      return (f"--workdir={self.workdir} is in use by another trainer (host {holder['host']},"
              f" pid {holder['pid']}, since {holder.get('started', '?')}); stop it first, or use"
              " another --workdir")
    logging.warning("Taking over the lock of a trainer that is gone (%s)",
                    holder and f"host {holder['host']}, pid {holder['pid']}")
    taken = f"--workdir={self.workdir} was just taken by another trainer; use another --workdir"
    if self._remote:  # only if still the version judged stale (or still absent): the store
      return None if self._write_if(self._version) else taken  # decides races
    self._write()
    time.sleep(0.05)  # two takers at once: the last rename wins, and the loser sees it
    if (self._read() or {}).get("token") != self._me["token"]:
      return taken
    return None

  def _alive(self, holder: dict) -> bool:
    if holder.get("host") == self._me["host"]:
      try:
        os.kill(int(holder["pid"]), 0)
      except ProcessLookupError:
        return False
      except PermissionError:
        pass  # the pid exists (another user's process)
      except (ValueError, KeyError, TypeError):
        return False  # not a record we wrote
      return not _zombie(int(holder["pid"]))
    return self._heartbeat_moves(holder)

  def _heartbeat_moves(self, holder: dict) -> bool:
    deadline = time.monotonic() + self.stale_s
    while time.monotonic() < deadline:
      time.sleep(min(1.0, self.stale_s / 10))
      now = self._read()
      if self._remote and now is not None and now.get("token") != holder.get("token"):
        return True  # another trainer took the lease meanwhile: it is alive
      if now is None or now.get("token") != holder.get("token"):
        return False  # released or replaced meanwhile: free to take
      if now.get("heartbeat") != holder.get("heartbeat"):
        return True
    return False

  def _create(self) -> bool:
    """Creates the lock if there is none; True if this call created it."""
    if self._remote:
      return self._write_if(None)
    try:
      fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      json.dump(self._me, f)
    return True

  def _read(self) -> dict | None:
    """The lock's record (None: gone, or cut short by a crash mid-write); in a bucket, also
    remembers its version, which a takeover must still find."""
    try:
      if self._remote:
        got = paths.read_versioned(self.path)
        self._version = got and got[1]
        return json.loads(got[0]) if got else None
      with open(self.path, encoding="utf-8") as f:
        return json.load(f)
    except (OSError, ValueError):
      return None

  def _write_if(self, version: str | None) -> bool:
    """Bucket only: writes our record if the lease is at `version` (None: absent)."""
    new = paths.write_if(self.path, json.dumps(self._me).encode(), version)
    if new is not None:
      self._version = new
    return new is not None

  def _write(self) -> None:
    tmp = f"{self.path}.{self._me['token']}"
    with open(tmp, "w", encoding="utf-8") as f:
      json.dump(self._me, f)
    os.replace(tmp, self.path)  # atomic: readers see the old or the new record

  def _beat(self) -> None:
    while not self._stop.wait(self.heartbeat_s):
      if not self._remote and (self._read() or {}).get("token") != self._me["token"]:
        logging.error("The lock of %s was taken by another trainer", self.workdir)
        return
      self._me["heartbeat"] += 1
      try:
        if self._remote and not self._write_if(self._version):
          self._version = None
          logging.error("The lock of %s was taken by another trainer", self.workdir)
          return
        if not self._remote:
          self._write()
      except Exception as e:  # pylint: disable=broad-except
        # A full disk or a network blip must not kill training; the next beat retries.
        logging.warning("Could not refresh the workdir lock: %s", e)


def _zombie(pid: int) -> bool:
  """Whether `pid` exited and waits to be reaped: it still answers kill(pid, 0), and lingers
  where its parent died too and the init process is slow to reap (containers). Linux's /proc;
  elsewhere False."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]  # after "pid (name)", which may hold spaces
  except (OSError, IndexError):
    return False
  return state in ("Z", "X")

