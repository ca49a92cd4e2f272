"""No silent hang: a thread that ends the process when its run stops making progress.

The goodput clock (goodput.py) tells the watchdog each segment the process enters; each
segment kind has a limit (config.watchdog, WatchdogSettings):

  step, input   watchdog.step_multiple x the median step time once 5 steps are timed, at least
                watchdog.min_step_seconds; before that watchdog.first_step_minutes
  compile       watchdog.first_step_minutes
  eval          watchdog.eval_minutes
  save, finish, restore   watchdog.save_minutes
  startup, preparation    not watched (a tokenizer trained on a large corpus takes what it
                takes); jax's runtime start is watched by startup_watch.py

When a segment outlasts its limit the watchdog writes every thread's Python stack to stderr
and to WORKDIR/watchdog/stacks.PROCESS.txt, records the goodput clock, prints one line

  error: watchdog: no progress for 31 s in a train step at step 12 (limit 30 s: ...); ...

ends its child processes (grain's input workers) and exits with status EXIT_STATUS (75,
sysexits' EX_TEMPFAIL: try again), which the launchers in launch/ restart; the run then
resumes from its last checkpoint. jax offers no public view of what a pending collective
waits for, so in a run of several processes each process
publishes a heartbeat (its step and segment, once a second) in jax's distributed key-value
store, and the line names the peers: silent ones (stopped, or their host gone) and live ones
elsewhere (e.g. still waiting for their input). A peer whose heartbeat stays unchanged for
watchdog.min_step_seconds stops the others too, whatever segment they are in (a collective of
a checkpoint save waits for it as a step's does): a process stopped outright is thus named by
the others well before jax's own heartbeat timeout (100 s) aborts them with a C++ dump. A
process that ends its run says so in its last heartbeat, so that its silence is not taken for
a stall.

The watchdog runs in a Python thread: jax's waits release the interpreter, so it runs while the
main thread waits in a step, a collective or a read.
"""

from __future__ import annotations

import atexit
import collections
import faulthandler
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

from absl import logging
import psutil

from mlmjax import paths

# The exit status of a watchdog stop: sysexits.h's EX_TEMPFAIL ("a temporary failure: the
# user is invited to retry"). launch/ restarts a job that exits with it.
EXIT_STATUS = 75
TICK_S = 0.5  # how often the thread looks
BEAT_S = 1.0  # how often a process publishes its heartbeat to its peers
PEER_CHECK_S = 2.0  # how often it reads theirs
_KEY = "mlmjax_watchdog/"  # the heartbeats' keys in jax's key-value store
TIMED_STEPS = 5  # step times before the median sets the step limit
# The kinds with a fixed limit, and its key in WatchdogSettings (minutes). Steps and input
# waits use first_step_minutes until TIMED_STEPS steps set a median; other kinds: unwatched.
_MINUTES = {"compile": "first_step_minutes", "eval": "eval_minutes", "save": "save_minutes",
            "finish": "save_minutes", "restore": "save_minutes"}

# What each segment kind is, in the error line.
_DOING = {"step": "a train step (waiting for its result; its collectives wait for every"
                  " process)",
          "input": "waiting for the next input batch", "compile": "compiling the train step",
          "eval": "the held-out evaluation", "save": "a checkpoint save",
          "finish": "the run's end (the last checkpoint's save)",
          "restore": "restoring the checkpoint"}


def _bounded(fn, timeout_s: float):
  """fn() in a helper thread, waited for at most `timeout_s`: (done, value). For calls that may
  hang themselves (a key-value store whose coordinator is stopped, a bucket)."""
  out = []
  t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
  t.start()
  t.join(timeout_s)
  return (True, out[0]) if out else (False, None)


def _process_count() -> int:
  import jax  # pylint: disable=g-import-not-at-top
  return jax.process_count()


def _kv_client():
  """jax's distributed key-value store, or None (a single process)."""
  if _process_count() == 1:
    return None
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  return distributed.global_state.client


def stacks_path(workdir: str, process: int) -> str:
  """Where a stop's stacks go: WORKDIR/watchdog/ (a local folder for a bucket workdir)."""
  folder = (os.path.join(tempfile.gettempdir(), "mlmjax_watchdog") if paths.is_remote(workdir)
            else os.path.join(workdir, "watchdog"))
  os.makedirs(folder, exist_ok=True)
  return os.path.join(folder, f"stacks.{process}.txt")


def stop(message: str, stacks_file: str, before_exit=lambda: None,
         linger=lambda: None) -> None:
  """Stacks to stderr and `stacks_file`, `before_exit()` (bounded), the error line,
  `linger()`, exit."""
  # The main thread may end meanwhile (a collective failing as a peer exits): its exit waits
  # for this one's, so that the status is the watchdog's.
  atexit.register(threading.Event().wait)
  try:
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    with open(stacks_file, "w", encoding="utf-8") as f:
      faulthandler.dump_traceback(file=f, all_threads=True)
    _bounded(before_exit, 10.0)
    print(f"error: watchdog: {message}; stacks in {stacks_file}; exiting with status"
          f" {EXIT_STATUS} so that the launcher restarts the run from its last checkpoint",
          file=sys.stderr, flush=True)
    linger()
  finally:
    _end_children()
    os._exit(EXIT_STATUS)  # pylint: disable=protected-access  # from a thread, at once


def _end_children() -> None:
  """SIGKILL to this process's children (grain's input workers): os._exit skips the exit
  handler of multiprocessing that would end them, and they would outlive the run."""
  try:
    children = psutil.Process().children(recursive=True)
  except psutil.Error:
    return
  for child in children:
    try:
      child.kill()
    except psutil.Error:
      pass


class Watchdog:
  """Watches the segments `clock` (a goodput.Clock) enters, and records it before a stop."""

  def __init__(self, settings, workdir: str, process: int, clock=None):
    self.settings = settings  # a WatchdogSettings
    self.process = process
    self.clock = clock
    self.stacks_file = stacks_path(workdir, process)
    self._times = collections.deque(maxlen=100)  # recent step times, s
    self._kind, self._since, self._step = "startup", time.monotonic(), 0
    self._deadline = None  # monotonic time, or None: not watched
    self._client = _kv_client()
    # Asked once: jax's runtime may be shutting down by the time a stop is written.
    self._peers_ids = [] if self._client is None else [
        p for p in range(_process_count()) if p != process]
    self._stop = threading.Event()
    self._firing, self._fired = threading.Lock(), False
    # Two threads: the heartbeat goes on while the watchdog stops the process (its peers
    # see it alive until it exits).
    self._threads = [threading.Thread(target=self._watch, name="mlmjax-watchdog", daemon=True)]
    if self._client is not None:
      self._threads.append(threading.Thread(target=self._heartbeat, name="mlmjax-heartbeat",
                                            daemon=True))
    if settings.enabled:
      if clock is not None:
        clock.on_enter = self.enter
      for t in self._threads:
        t.start()

  # ---- what the loop tells it ----------------------------------------------------------------
  def enter(self, kind: str) -> None:
    limit = self.limit(kind)
    now = time.monotonic()
    self._kind, self._since = kind, now
    self._deadline = None if limit is None else now + limit

  def step_time(self, seconds: float, step: int) -> None:
    self._times.append(seconds)
    self._step = step

  def at_step(self, step: int) -> None:
    self._step = step

  def limit(self, kind: str) -> float | None:
    s = self.settings
    if kind in ("step", "input") and len(self._times) >= TIMED_STEPS:
      return max(s.step_multiple * statistics.median(self._times), s.min_step_seconds)
    key = "first_step_minutes" if kind in ("step", "input") else _MINUTES.get(kind)
    return None if key is None else 60 * getattr(s, key)

  def close(self) -> None:
    """Stops watching; the peers are told this process is done (not silent)."""
    if self._client is not None and self._threads[1].is_alive():
      self._publish("done")
    self._stop.set()
    for t in self._threads:
      if t.is_alive():
        t.join(timeout=2 * BEAT_S)  # a heartbeat stuck on a gone coordinator is left

  # ---- the threads ---------------------------------------------------------------------------
  def _watch(self) -> None:
    while not self._stop.wait(TICK_S):
      now = time.monotonic()
      deadline = self._deadline
      if deadline is not None and now > deadline and not self._stop.is_set():
        self._fire(self._no_progress(now))

  def _publish(self, kind: str) -> None:
    beat = json.dumps({"t": time.time(), "step": self._step, "kind": kind,
                       "host": socket.gethostname()})
    try:
      self._client.key_value_set(f"{_KEY}{self.process}", beat, allow_overwrite=True)
    except Exception:  # pylint: disable=broad-except  # the coordinator gone: said at a stop
      pass

  def _heartbeat(self) -> None:
    """Publishes this process's heartbeat every beat; every PEER_CHECK_S reads the others':
    one whose heartbeat has not changed for watchdog.min_step_seconds is stopped or gone,
    and every collective will wait for it, whatever this process is doing."""
    changed: dict[int, tuple[float, float]] = {}  # peer -> (its beat's t, when it changed)
    last_check = time.monotonic()
    while not self._stop.wait(BEAT_S):
      self._publish(self._kind)
      now = time.monotonic()
      if now - last_check < PEER_CHECK_S:
        continue
      last_check = now
      beats = self._beats() or {}
      for p, beat in beats.items():
        if p != self.process and beat["kind"] != "done" and (
            changed.get(p, (None,))[0] != beat["t"]):
          changed[p] = (beat["t"], now)
      silent = sorted(p for p, (t, since) in changed.items()
                      if now - since > self.settings.min_step_seconds
                      and beats.get(p, {}).get("kind") != "done")
      if silent and not self._stop.is_set():
        self._fire(self._peer_silent(silent, beats, now - changed[silent[0]][1]))

  def _no_progress(self, now: float) -> str:
    kind = self._kind
    return (f"no progress for {now - self._since:.0f} s in {_DOING.get(kind, kind)} at step"
            f" {self._step} (limit {self.limit(kind):.0f} s: {self._limit_text(kind)})")

  def _peer_silent(self, silent: list[int], beats: dict, seconds: float) -> str:
    names = ", ".join(f"process {p} ({beats[p]['host']})" for p in silent)
    return (f"{names} silent for {seconds:.0f} s (limit {self.settings.min_step_seconds:g} s:"
            f" watchdog.min_step_seconds), while this process is in"
            f" {_DOING.get(self._kind, self._kind)} at step {self._step}")

  def _limit_text(self, kind: str) -> str:
    s = self.settings
    if kind in ("step", "input") and len(self._times) >= TIMED_STEPS:
      return (f"{s.step_multiple:g} x the median step {statistics.median(self._times):.3g} s,"
              f" at least {s.min_step_seconds:g} s: watchdog.step_multiple,"
              f" watchdog.min_step_seconds")
    key = _MINUTES.get(kind, "first_step_minutes")
    return f"watchdog.{key}={getattr(s, key):g}"

  def _fire(self, message: str) -> None:
    with self._firing:  # once, from whichever thread saw it first
      if self._fired:
        return
      self._fired = True
    peers = self._peers()
    if peers:
      message += f"; {peers}"
    logging.error("watchdog: %s", message)
    # The coordinator's key-value store (and jax's runtime) end with process 0: it waits,
    # boundedly, until the others have stopped, so that each says its own line.
    linger = self._until_peers_stop if self.process == 0 and self._client else lambda: None
    stop(message, self.stacks_file, self.clock.write if self.clock else lambda: None, linger)

  def _beats(self) -> dict[int, dict] | None:
    """Every process's last heartbeat; None if the store does not answer (bounded: its
    coordinator may be the stopped process)."""
    done, entries = _bounded(lambda: self._client.key_value_dir_get(_KEY), 5.0)
    if not done:
      return None
    return {int(k.rsplit("/", 1)[1]): json.loads(v) for k, v in entries}

  def _peers(self) -> str:
    """What the other processes are doing: two reads of their heartbeats, 2.5 beats apart;
    a process whose heartbeat did not change in between is silent."""
    if self._client is None:
      return ""
    first = self._beats()
    time.sleep(2.5 * BEAT_S)
    beats = self._beats()
    if first is None or beats is None:
      return ("the coordinator (process 0) does not answer: it is stopped or its host is"
              " gone")
    silent, elsewhere = [], []
    for p in self._peers_ids:
      beat = beats.get(p)
      if beat is None:
        silent.append(f"process {p} (never heard from)")
        continue
      name = f"process {p} ({beat['host']})"
      if beat["t"] == first.get(p, {}).get("t"):
        silent.append(f"{name} silent for {time.time() - beat['t']:.0f} s, last at step"
                      f" {beat['step']} in {beat['kind']}")
      elif beat["kind"] != self._kind or beat["step"] != self._step:
        elsewhere.append(f"{name} alive in {beat['kind']} at step {beat['step']}")
    parts = []
    if silent:
      parts.append("stalled peers: " + ", ".join(silent) + " (stopped, or its host gone)")
    if elsewhere:
      parts.append("waiting for: " + ", ".join(elsewhere))
    return "; ".join(parts) or "every peer alive at the same step and segment"

  def _until_peers_stop(self, limit_s: float = 60.0) -> None:
    """Waits until no other process's heartbeat has changed for 3 beats, at most `limit_s`."""
    changed, last = time.monotonic(), self._beats() or {}
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and time.monotonic() - changed < 3 * BEAT_S:
      time.sleep(BEAT_S / 2)
      beats = self._beats() or {}
      if any(beats.get(p, {}).get("t") != last.get(p, {}).get("t") for p in self._peers_ids):
        changed = time.monotonic()
      last = beats
