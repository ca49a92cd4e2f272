"""jax's distributed runtime start, watched: a peer that never joins is named, not waited for.

jax's own initialization waits for every process until its timeout, then aborts with a C++
dump that names neither the coordinator nor the missing processes. Each process instead leaves
a start-up record in WORKDIR/watchdog/ (the workdir of a run of several processes is shared);
past watchdog.startup_minutes the watch stops the process the watchdog's way (watchdog.stop:
stacks, one `error:` line naming the coordinator and the processes without a record from this
attempt, exit status 75).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from mlmjax import paths
from mlmjax.training.run import watchdog


class StartupWatch:
  """jax's distributed runtime start, watched: each process leaves a start-up record in
  WORKDIR/watchdog/; if the runtime has not started within the limit, the line names the
  coordinator and the processes that left no record in this attempt (jax itself would abort
  at its initialization timeout with a C++ dump that names neither)."""

  def __init__(self, workdir: str, coordinator: str | None, num_processes: int | None,
               process: int | None, limit_s: float):
    self.workdir, self.coordinator = workdir, coordinator
    self.num_processes, self.process = num_processes, process
    self.folder = paths.join(workdir, "watchdog")
    self.started = time.time()
    self.limit_s = limit_s
    if process is not None:
      paths.makedirs(self.folder)
      paths.write_atomic(self._record(process), json.dumps(
          {"t": self.started, "host": socket.gethostname(), "pid": os.getpid()}))
    self._timer = threading.Timer(limit_s, self._fire)
    self._timer.daemon = True
    self._timer.start()

  def _record(self, process: int) -> str:
    return paths.join(self.folder, f"joined.{process}.json")

  @property
  def jax_timeout_s(self) -> int:
    """jax's own limit for the start: a minute after ours, so that ours speaks first."""
    return int(self.limit_s) + 60

  def joined(self) -> None:
    self._timer.cancel()

  def missing(self) -> list[int]:
    """Processes without a start-up record from this attempt (within the limit of ours)."""
    out = []
    for p in range(self.num_processes or 0):
      try:
        t = json.loads(paths.read_text(self._record(p)))["t"]
      except (OSError, ValueError, KeyError):
        t = None
      if t is None or t < self.started - self.limit_s:
        out.append(p)
    return out

  def _fire(self) -> None:
    message = (f"jax's distributed runtime did not start within {self.limit_s:.0f} s"
               f" (watchdog.startup_minutes)")
    if self.coordinator:
      message += f": the coordinator is {self.coordinator} (process 0)"
    missing = self.missing()
    if missing:
      message += (f"; no start-up record in {self.folder} from process(es) "
                  + ", ".join(map(str, missing)) + " in this attempt: never started?")
    elif self.num_processes:
      message += "; every process left a start-up record: check the coordinator's address"
    watchdog.stop(message, watchdog.stacks_path(self.workdir, self.process or 0))
