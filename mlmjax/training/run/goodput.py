"""Where a run's hours went: goodput (productive training time over wall time) across restarts.

MaxText's goodput accounting, for mlmjax's run: each process keeps one clock that is always in
exactly one segment, from the moment the process started (imports included) to its last
record, so the segments add up to its wall time by construction:

  startup      process start -> the run's settings (imports, jax's runtime, distributed init)
  preparation  input (corpus, tokenizer, vocab stats), mesh, model and state
  restore      reading the checkpoint
  compile      the first dispatch of each train step (tracing and compiling, or loading it from
               the compilation cache)
  step         training steps: dispatching them and waiting for their results (productive)
  input        waiting for the next batch
  eval         held-out evaluation (its first batch compiles the eval step)
  save         checkpoint saves, the part that blocks the loop
  finish       after the last step: waiting for the last save, closing files

Each process writes its clock to WORKDIR/goodput/ATTEMPT.PROCESS.json at every log interval
and checkpoint (atomically; one file per process per attempt, an attempt being one start of
the command). Across attempts, two more kinds come from the records (`summarize`):

  wasted       productive time of steps after the checkpoint the next attempt restored:
               trained, lost, and trained again
  gap          from an attempt's last record to the next attempt's start: the crash, the
               scheduler's restart, and what the crashed attempt did after its last record

goodput = step / (last record of the last attempt - start of the first attempt).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import psutil

from mlmjax import paths

KINDS = ("startup", "preparation", "restore", "compile", "step", "input", "eval", "save",
         "finish")
DERIVED = ("wasted", "gap")  # from the records of several attempts (summarize)
PRODUCTIVE = "step"


def process_start_time() -> float:
  """This process's start (Unix time): its imports count as start-up. On Linux from the kernel's
  start tick (10 ms) against the boot clock: psutil's create_time adds the boot time, which
  the kernel gives in whole seconds, and so may be a second early."""
  try:
    with open("/proc/self/stat", encoding="ascii") as f:
      start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age
  except (OSError, ValueError, IndexError, AttributeError):  # not Linux
    return psutil.Process(os.getpid()).create_time()


class Clock:
  """One process's segments. `enter(kind)` ends the current segment and starts `kind`; marks
  (step, productive seconds so far) at the checkpoint steps let a later attempt find what it
  redid. Thread-safe: the watchdog reads it from its own thread."""

  def __init__(self, folder: str | None, process: int):
    self.folder = folder  # None: nothing written (a process that keeps no records)
    self.process = process
    self.start = process_start_time()
    self.attempt = f"{int(self.start * 1000):015d}"  # names the files; sorts by start
    self.seconds = {k: 0.0 for k in KINDS}
    self.kind, self._since = "startup", self.start
    self.restored_step = 0
    self.marks: list[tuple[int, float]] = []  # (checkpoint step, productive seconds then)
    self.last_step = 0
    self.waited = 0.0  # of the productive seconds, blocked on the devices' results
    self.on_enter = None  # told of every segment entered (the watchdog sets it)
    self._lock = threading.Lock()

  def enter(self, kind: str) -> str:
    """Starts segment `kind`; returns the one it ends (to go back to it)."""
    with self._lock:
      now = time.time()
      self.seconds[self.kind] += now - self._since
      before, self.kind, self._since = self.kind, kind, now
    if self.on_enter:
      self.on_enter(kind)
    return before

  def snapshot(self) -> dict:
    """The clock as recorded: the current segment counted up to now."""
    with self._lock:
      now = time.time()
      seconds = dict(self.seconds)
      seconds[self.kind] += now - self._since
      return {"attempt": self.attempt, "process": self.process, "host": socket.gethostname(),
              "start": self.start, "end": now, "seconds": seconds,
              "restored_step": self.restored_step, "last_step": self.last_step,
              "marks": [list(m) for m in self.marks]}

  def step_done(self, step: int, waited: float = 0.0) -> None:
    """Step `step`'s result is in, after `waited` seconds blocked on the devices."""
    self.last_step = step
    self.waited += waited

  def own_seconds(self) -> float:
    """Time so far in input waits and host work: the steps' segments less their waits for the
    devices, which in a run of several processes include the waits for the others."""
    with self._lock:
      s = self.seconds["input"] + self.seconds[PRODUCTIVE] - self.waited
      if self.kind in ("input", PRODUCTIVE):
        s += time.time() - self._since
      return s

  def mark(self, step: int) -> None:
    """A checkpoint of `step` is being saved: what a later attempt may restore."""
    with self._lock:
      productive = self.seconds[PRODUCTIVE] + (
          time.time() - self._since if self.kind == PRODUCTIVE else 0.0)
      self.marks.append((step, productive))

  def write(self) -> None:
    if self.folder is None:
      return
    paths.makedirs(self.folder)
    paths.write_atomic(paths.join(self.folder, f"{self.attempt}.{self.process}.json"),
                       json.dumps(self.snapshot()))


def records(folder: str) -> list[dict]:
  """Every attempt's record in `folder`, of every process, oldest first."""
  if not paths.isdir(folder):
    return []
  out = []
  for name in sorted(paths.listdir(folder)):
    if name.endswith(".json"):
      try:
        out.append(json.loads(paths.read_text(paths.join(folder, name))))
      except ValueError:  # cannot happen with atomic writes; a foreign file is skipped
        continue
  return sorted(out, key=lambda r: (r["start"], r["process"]))


def redone(attempt: dict, nxt: dict) -> tuple[float, int]:
  """(productive seconds, steps) of `attempt` after the checkpoint that `nxt` restored: trained,
  lost, and trained again."""
  redone_from = nxt["restored_step"]
  if attempt["last_step"] <= redone_from:
    return 0.0, 0
  kept = [p for s, p in attempt["marks"] if s <= redone_from]
  lost = attempt["seconds"][PRODUCTIVE] - (kept[-1] if kept else 0.0)
  return lost, attempt["last_step"] - max(redone_from, attempt["restored_step"])


def summarize(attempts: list[dict]) -> dict:
  """One process's attempts (oldest first) -> {"total": s, "seconds": {kind: s}, "goodput":
  fraction, "attempts": n, "wasted_steps": n}. Of each attempt, the productive time after the
  checkpoint that the next attempt restored moves to `wasted`; the time between an attempt's
  last record and the next one's start is `gap`."""
  seconds = {k: 0.0 for k in KINDS + DERIVED}
  wasted_steps = 0
  for a, nxt in zip(attempts, attempts[1:] + [None]):
    for k, v in a["seconds"].items():
      seconds[k] += v
    if nxt is not None:
      seconds["gap"] += max(0.0, nxt["start"] - a["end"])
      lost, steps = redone(a, nxt)
      seconds[PRODUCTIVE] -= lost
      seconds["wasted"] += lost
      wasted_steps += steps
  total = attempts[-1]["end"] - attempts[0]["start"] if attempts else 0.0
  return {"total": total, "seconds": seconds, "attempts": len(attempts),
          "wasted_steps": wasted_steps,
          "goodput": seconds[PRODUCTIVE] / total if total > 0 else 0.0}


def by_process(folder: str) -> dict[int, dict]:
  """summarize() of each process's attempts in `folder`."""
  grouped: dict[int, list[dict]] = {}
  for r in records(folder):
    grouped.setdefault(r["process"], []).append(r)
  return {p: summarize(a) for p, a in sorted(grouped.items())}


def metrics(summary: dict) -> dict[str, float]:
  """A summary as metrics.jsonl's keys: goodput and each other kind's share of the wall time."""
  total = summary["total"] or 1.0
  out = {"goodput": summary["goodput"]}
  out.update({f"badput/{k}": v / total for k, v in summary["seconds"].items()
              if k != PRODUCTIVE})
  return out


def report(summaries: dict[int, dict]) -> str:
  """The one-screen summary of a run's records (plot.py prints it)."""
  if not summaries:
    return "no goodput records (a run writes them in WORKDIR/goodput/ as it trains)"
  first = summaries[min(summaries)]
  total = first["total"]
  lines = [f"goodput {100 * first['goodput']:.1f}% of {_hours(total)} wall time over"
           f" {first['attempts']} attempt(s) ({first['attempts'] - 1} restart(s)),"
           f" process 0's clock"]
  for kind in KINDS + DERIVED:
    s = first["seconds"][kind]
    if s > 0:
      extra = f" ({first['wasted_steps']} steps redone)" if kind == "wasted" else ""
      lines.append(f"  {kind:<12} {_hours(s):>10}  {100 * s / total:5.1f}%{extra}")
  if len(summaries) > 1:
    lines.append("per process: " + ", ".join(
        f"{p}: {100 * s['goodput']:.1f}%" for p, s in summaries.items()))
  return "\n".join(lines)


def _hours(seconds: float) -> str:
  if seconds >= 3600:
    return f"{seconds / 3600:.2f} h"
  return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def save_picture(folder: str, out: str) -> str:
  """Process 0's attempts on the run's timeline, each a bar of its segments' shares (kinds in
  KINDS order, not in time order) with its redone steps' time hatched at the end, and the gaps
  between them; returns `out`."""
  import io  # pylint: disable=g-import-not-at-top
  import matplotlib  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  attempts = [r for r in records(folder) if r["process"] == 0]
  summary = summarize(attempts)
  colors = dict(zip(KINDS + DERIVED, matplotlib.colormaps["tab20"].colors))
  t0 = attempts[0]["start"]
  fig = Figure(figsize=(12, 2.5 + 0.4 * len(attempts)))
  ax = fig.subplots()
  drawn = set()

  def bar(i, kind, left, width):
    ax.barh(i, width, left=left, color=colors[kind], hatch="//" if kind == "wasted" else None,
            label=kind if kind not in drawn else None)
    drawn.add(kind)

  for i, (a, nxt) in enumerate(zip(attempts, attempts[1:] + [None])):
    widths = dict(a["seconds"], wasted=0.0, gap=0.0)
    if nxt is not None:
      lost, _ = redone(a, nxt)
      widths[PRODUCTIVE] -= lost
      widths["wasted"] = lost
      widths["gap"] = max(0.0, nxt["start"] - a["end"])
    left = a["start"] - t0
    for kind in KINDS + DERIVED:
      if widths[kind] > 0:
        bar(i, kind, left, widths[kind])
        left += widths[kind]
  ax.set_yticks(range(len(attempts)), [f"attempt {i + 1}" for i in range(len(attempts))])
  ax.invert_yaxis()
  ax.set_xlabel("seconds since the first attempt started")
  ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
  ax.set_title(f"goodput {100 * summary['goodput']:.1f}%: {summary['attempts']} attempt(s),"
               f" {summary['wasted_steps']} steps redone ({_hours(summary['seconds']['wasted'])}"
               f" wasted), {_hours(summary['seconds']['gap'])} between attempts")
  fig.tight_layout()
  png = io.BytesIO()
  fig.savefig(png, format="png", dpi=100)
  paths.write_atomic(out, png.getvalue())
  return out
