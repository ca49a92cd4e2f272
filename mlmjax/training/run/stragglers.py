"""Stragglers named: the process the others wait for, at each log interval.

In a synchronous data-parallel step every process waits, in the gradient's collectives, for
the slowest. So the step time is the same everywhere and says nothing about who is slow; what
differs is each process's own time: its input waits and its host work, the time it is not
blocked on the devices' results (goodput.Clock.own_seconds). Each process's own time over the
interval is gathered (one small collective per log interval: every process logs at the same
steps); a process whose own time exceeds the median of the others' by more than
`watchdog.straggler_share` of the interval, and by at least MIN_EXCESS_S (a short interval's
jitter is no straggler), is named in the log, with its host, and in metrics.jsonl
(`straggler/process_P`: its excess as a share of the interval). A process slow on
its devices (a throttled chip) is not seen this way: its own time is not larger.
"""

from __future__ import annotations

import socket
import statistics
import time

from absl import logging

from mlmjax.parallel import distributed

MIN_EXCESS_S = 1.0  # an excess under this is never a straggler, whatever its share


def named(own_s: list[float], interval_s: float, share: float,
          min_excess_s: float = MIN_EXCESS_S) -> dict[int, float]:
  """{process: its excess over the others' median own time, as a share of the interval} of
  the processes whose excess is over `share` of the interval and at least `min_excess_s`."""
  out = {}
  if len(own_s) < 2 or interval_s <= 0:
    return out
  for p, own in enumerate(own_s):
    excess_s = own - statistics.median(own_s[:p] + own_s[p + 1:])
    if excess_s > share * interval_s and excess_s >= min_excess_s:
      out[p] = excess_s / interval_s
  return out


class StragglerCheck:
  """At each log interval (every process calls `check` at the same step): the straggler
  metrics of metrics.jsonl's row."""

  def __init__(self, clock, share: float, process_count: int):
    self.clock, self.share = clock, share
    self.enabled = share > 0 and process_count > 1
    self._own, self._t = clock.own_seconds(), time.monotonic()

  def check(self, step: int) -> dict[str, float]:
    if not self.enabled:
      return {}
    own, now = self.clock.own_seconds(), time.monotonic()
    mine = {"own": own - self._own, "interval": now - self._t, "host": socket.gethostname()}
    self._own, self._t = own, now
    everyone = distributed.allgather_json(mine)  # a collective: every process is here
    interval = max(e["interval"] for e in everyone)
    slow = named([e["own"] for e in everyone], interval, self.share)
    for p, excess in slow.items():
      logging.warning("Straggler at step %d: process %d (%s) spent %.0f%% of the last %.1f s"
                      " in input waits and host work beyond the others' median", step, p,
                      everyone[p]["host"], 100 * excess, interval)
    return {f"straggler/process_{p}": excess for p, excess in slow.items()}
