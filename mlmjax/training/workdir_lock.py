"""One trainer per workdir: a second run on a workdir in use refuses, naming the holder.

A resubmitted job, a re-run notebook cell or a second terminal would otherwise train side by
side with the first, both writing checkpoints and metrics. The lock is a small JSON file
(`WORKDIR/lock`: host, pid, start time, a heartbeat counter) created atomically; the holder
rewrites it every `heartbeat_s` seconds from a background thread and removes it when the run
ends. A lock left behind by a process that died (SIGKILL, power loss) is taken over:

  same host     the holder's pid no longer exists (decided at once);
  another host  (a shared disk, e.g. a pod's NFS workdir) the heartbeat does not move while
                this process watches it for `stale_s` seconds. Clocks of different hosts are
                never compared.

Multi-host runs: only process 0 takes the lock (all processes of a run are one trainer); the
others learn its answer and refuse with the same message.
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
    if (self._read() or {}).get("token") == self._me["token"]:
      os.remove(self.path)

  # ---- process 0 ------------------------------------------------------------------------------
  def _acquire(self) -> str | None:
    """None when the lock is ours now, else the refusal."""
    try:
      fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(self._me, f)
      return None
    except FileExistsError:
      pass
    holder = self._read()
    if holder and self._alive(holder):
      return (f"--workdir={self.workdir} is in use by another trainer (host {holder['host']},"
              f" pid {holder['pid']}, since {holder.get('started', '?')}); stop it first, or use"
              " another --workdir")
    logging.warning("Taking over the lock of a trainer that is gone (%s)",
                    holder and f"host {holder['host']}, pid {holder['pid']}")
    self._write()
    time.sleep(0.05)  # two takers at once: the last rename wins, and the loser sees it
    if (self._read() or {}).get("token") != self._me["token"]:
      return f"--workdir={self.workdir} was just taken by another trainer; use another --workdir"
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
      return True
    return self._heartbeat_moves(holder)

  def _heartbeat_moves(self, holder: dict) -> bool:
    deadline = time.monotonic() + self.stale_s
    while time.monotonic() < deadline:
      time.sleep(min(1.0, self.stale_s / 10))
      now = self._read()
      if now is None or now.get("token") != holder.get("token"):
        return False  # released or replaced meanwhile: free to take
      if now.get("heartbeat") != holder.get("heartbeat"):
        return True
    return False

  def _read(self) -> dict | None:
    try:
      with open(self.path, encoding="utf-8") as f:
        return json.load(f)
    except (OSError, ValueError):
      return None  # gone, or cut short by a crash mid-write

  def _write(self) -> None:
    tmp = f"{self.path}.{self._me['token']}"
    with open(tmp, "w", encoding="utf-8") as f:
      json.dump(self._me, f)
    os.replace(tmp, self.path)  # atomic: readers see the old or the new record

  def _beat(self) -> None:
    while not self._stop.wait(self.heartbeat_s):
      if (self._read() or {}).get("token") != self._me["token"]:
        logging.error("The lock of %s was taken by another trainer", self.workdir)
        return
      self._me["heartbeat"] += 1
      try:
        self._write()
      except OSError as e:  # a full disk must not kill training; the next beat retries
        logging.warning("Could not refresh the workdir lock: %s", e)
