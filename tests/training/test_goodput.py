"""Goodput accounting (training/run/goodput.py) by hand, and the watchdog
(training/run/watchdog.py) in
a real process: its limits, its stop (stacks, one error line, exit status 75)."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO
from mlmjax.training.run import goodput
from mlmjax.training.run import stragglers
from mlmjax.training.run import watchdog
from mlmjax.training import settings as settings_lib


def _attempt(start, end, seconds, restored, last, marks, process=0):
  full = {k: 0.0 for k in goodput.KINDS}
  full.update(seconds)
  assert abs(sum(full.values()) - (end - start)) < 1e-9  # a clock's segments fill its life
  return {"attempt": str(start), "process": process, "host": "h", "start": start, "end": end,
          "seconds": full, "restored_step": restored, "last_step": last, "marks": marks}


def test_two_attempts_by_hand():
  """Attempt 1 trains steps 1..70 (70 s of steps) with checkpoints at 25 and 50 (20 s and 48 s
  of steps by then) and dies at 100 s; attempt 2 starts at 130 s, restores 50 and trains 51..100.
  Wasted: the 22 s of steps 51..70 of attempt 1 (20 steps, trained twice); gap: 30 s."""
  first = _attempt(0.0, 100.0, {"startup": 10, "preparation": 5, "compile": 5, "step": 70,
                                "input": 5, "save": 5}, 0, 70, [[25, 20.0], [50, 48.0]])
  second = _attempt(130.0, 200.0, {"startup": 10, "restore": 5, "compile": 5, "step": 45,
                                   "save": 5}, 50, 100, [[100, 45.0]])
  s = goodput.summarize([first, second])
  assert s["total"] == 200.0 and s["attempts"] == 2 and s["wasted_steps"] == 20
  assert s["seconds"]["gap"] == 30.0 and s["seconds"]["wasted"] == 22.0
  assert s["seconds"]["step"] == 70 - 22 + 45
  assert s["goodput"] == pytest.approx(93 / 200)
  assert sum(s["seconds"].values()) == pytest.approx(s["total"])  # every second accounted
  m = goodput.metrics(s)
  assert m["goodput"] == pytest.approx(0.465) and m["badput/gap"] == pytest.approx(0.15)
  text = goodput.report({0: s})
  assert text.splitlines()[0] == ("goodput 46.5% of 3.3 min wall time over 2 attempt(s)"
                                  " (1 restart(s)), process 0's clock")
  assert "wasted" in text and "(20 steps redone)" in text


def test_an_attempt_that_saved_nothing_wastes_all_its_steps():
  """Restored from the same checkpoint it started from: every step it trained is redone."""
  first = _attempt(0.0, 10.0, {"startup": 2, "step": 8}, 0, 4, [])
  again = _attempt(10.0, 20.0, {"startup": 2, "step": 8}, 0, 8, [[8, 8.0]])
  s = goodput.summarize([first, again])
  assert s["seconds"]["wasted"] == 8.0 and s["wasted_steps"] == 4 and s["seconds"]["gap"] == 0


def test_the_clock_fills_the_process_life_and_records_atomically(tmp_path):
  clock = goodput.Clock(str(tmp_path / "goodput"), 0)
  for kind in ("preparation", "compile", "step", "input", "step", "save"):
    clock.enter(kind)
    time.sleep(0.01)
  clock.step_done(3)
  clock.mark(3)
  clock.write()
  [record] = goodput.records(str(tmp_path / "goodput"))
  # The process's own start (10 ms ticks), not the clock's creation: imports count.
  assert record["start"] == pytest.approx(goodput.process_start_time(), abs=0.05)
  assert record["seconds"]["startup"] > 0.5
  assert sum(record["seconds"].values()) == pytest.approx(record["end"] - record["start"])
  assert record["seconds"]["step"] >= 0.02 and record["marks"][0][0] == 3
  assert os.listdir(tmp_path / "goodput") == [f"{clock.attempt}.0.json"]


def test_a_straggler_is_the_process_over_the_others_median_by_the_share():
  """Own seconds over a 10 s interval: process 2 exceeds the median of the others (1.2 s) by
  2.8 s, 28% of the interval; process 3 its others' median (1.2 s) by 0.8 s, 8%, under the 10%
  share; the others are under their others' medians."""
  assert stragglers.named([1.0, 1.2, 4.0, 2.0], 10.0, 0.1) == {2: pytest.approx(0.28)}
  assert stragglers.named([1.0, 1.2, 4.0], 10.0, 0.1) == {2: pytest.approx(0.29)}
  assert stragglers.named([1.0, 2.0], 10.0, 0.1) == {}  # 1 s over the other: exactly 10%
  assert stragglers.named([1.0, 2.01], 10.0, 0.1) == {1: pytest.approx(0.101)}
  assert stragglers.named([9.0], 10.0, 0.1) == {}  # one process: no one to compare with
  # 35 ms over the other in a 0.5 s interval: 7%, over a 5% share, but under the 1 s floor.
  assert stragglers.named([0.01, 0.045], 0.5, 0.05) == {}
  assert stragglers.named([0.01, 1.01], 5.0, 0.05) == {1: pytest.approx(0.2)}


def _settings(**kw):
  values = {"enabled": True, "first_step_minutes": 1.0, "step_multiple": 10.0,
            "min_step_seconds": 2.0, "eval_minutes": 3.0, "save_minutes": 4.0,
            "startup_minutes": 5.0, "straggler_share": 0.2}
  values.update(kw)
  return settings_lib.WatchdogSettings(**values)


def test_limits_follow_the_median_step_once_there_is_one(tmp_path):
  dog = watchdog.Watchdog(_settings(enabled=False), str(tmp_path), 0)
  assert dog.limit("step") == 60.0 and dog.limit("compile") == 60.0
  for t in (0.1, 1.4, 0.3, 0.2):
    dog.step_time(t, 1)
  assert dog.limit("input") == 60.0  # 4 timed steps: still the first-step limit
  dog.step_time(0.4, 5)
  assert dog.limit("step") == pytest.approx(3.0)  # 10 x the median 0.3 s (the mean: 0.48 s)
  dog.step_time(0.01, 6)
  dog.step_time(0.01, 7)
  assert dog.limit("step") == 2.0  # never under min_step_seconds
  assert (dog.limit("eval"), dog.limit("save"), dog.limit("preparation")) == (180.0, 240.0,
                                                                              None)


_STUCK_EVAL = """
import sys, time
from mlmjax.training import settings; from mlmjax.training.run import goodput, watchdog
s = settings.WatchdogSettings(enabled=True, first_step_minutes=1, step_multiple=10,
    min_step_seconds=1, eval_minutes=0.02, save_minutes=1, startup_minutes=1,
    straggler_share=0.2)
clock = goodput.Clock(sys.argv[1] + "/goodput", 0)
dog = watchdog.Watchdog(s, sys.argv[1], 0, clock)
dog.at_step(7)
clock.enter("eval")
time.sleep(60)
"""


def test_a_stuck_evaluation_ends_the_process_with_its_stacks_and_one_line(tmp_path):
  start = time.monotonic()
  proc = subprocess.run([sys.executable, "-c", _STUCK_EVAL, str(tmp_path)], cwd=REPO,
                        capture_output=True, text=True, timeout=60, check=False)
  assert proc.returncode == watchdog.EXIT_STATUS == 75
  assert time.monotonic() - start < 20  # the 1.2 s limit, not the 60 s sleep
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  stacks = tmp_path / "watchdog" / "stacks.0.txt"
  assert len(errors) == 1 and re.fullmatch(re.escape(
      "error: watchdog: no progress for ") + "[12]" + re.escape(
      f" s in the held-out evaluation at step 7 (limit 1 s: watchdog.eval_minutes=0.02);"
      f" stacks in {stacks}; exiting with status 75 so that the launcher restarts the run"
      f" from its last checkpoint"), errors[0]), errors
  # Every thread's stack: the main thread in its sleep (line 11 of the script), the watchdog's.
  for text in (stacks.read_text(), proc.stderr):
    assert 'File "<string>", line 11 in <module>' in text and "in _fire" in text
  [record] = goodput.records(str(tmp_path / "goodput"))  # the clock recorded before the exit
  assert record["seconds"]["eval"] >= 1.0
  assert json.loads(json.dumps(record)) == record
