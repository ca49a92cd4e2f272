"""What the goodput clock and the watchdog cost the tiny preset's step (docs/goodput.md).

    python benchmarks/watchdog_cost.py [--steps=300] [--repeats=3]

Prints two figures, on this machine's default devices:
  - the loop's bookkeeping per step (the clock's segment changes, the step's record, the
    watchdog's step time), timed over 100,000 steps' worth of calls;
  - the tiny preset's tokens/s with the watchdog on and off (its thread and heartbeat), runs
    of `--steps` steps alternating `--repeats` times, the median of each run's logged rows
    after the first;
and each as a share of the step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position

plugins.hide()

from mlmjax.configs import tiny  # pylint: disable=wrong-import-position
from mlmjax.training.run import goodput  # pylint: disable=wrong-import-position
from mlmjax.training import settings  # pylint: disable=wrong-import-position
from mlmjax.training import train  # pylint: disable=wrong-import-position
from mlmjax.training.run import watchdog  # pylint: disable=wrong-import-position


def bookkeeping_s(calls: int = 100_000) -> float:
  """Seconds per step of what the loop adds for the clock and the watchdog."""
  clock = goodput.Clock(None, 0)
  dog = watchdog.Watchdog(settings.WatchdogSettings.from_config(tiny.get_config().watchdog),
                          tempfile.mkdtemp(), 0, clock)
  t = time.perf_counter()
  for step in range(calls):
    clock.enter("input")
    clock.enter("step")
    clock.step_done(step, waited=0.0)
    dog.at_step(step)
    clock.enter("step")
    dog.step_time(0.01, step)
  per_step = (time.perf_counter() - t) / calls
  dog.close()
  return per_step


def tokens_per_sec(steps: int, enabled: bool) -> float:
  config = tiny.get_config()
  config.train.update(steps=steps, log_every_steps=max(steps // 6, 1), eval_every_steps=steps,
                      checkpoint_every_steps=steps, eval_batches=1)
  config.watchdog.enabled = enabled
  with tempfile.TemporaryDirectory() as workdir:
    train.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
      rows = [json.loads(line) for line in f]
  return statistics.median(r["tokens_per_sec"] for r in rows if "tokens_per_sec" in r)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=300)
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  per_step = bookkeeping_s()
  runs = {True: [], False: []}
  for _ in range(args.repeats):
    for enabled in (True, False):
      runs[enabled].append(tokens_per_sec(args.steps, enabled))
  on, off = statistics.median(runs[True]), statistics.median(runs[False])
  tokens_per_step = tiny.get_config().train.batch_size * tiny.get_config().data.seq_len
  step_s = tokens_per_step / off
  print(json.dumps({
      "bookkeeping_us_per_step": round(per_step * 1e6, 2),
      "step_ms_watchdog_off": round(step_s * 1e3, 3),
      "bookkeeping_share_of_step": round(per_step / step_s, 5),
      "tokens_per_sec_watchdog_on": [round(x) for x in runs[True]],
      "tokens_per_sec_watchdog_off": [round(x) for x in runs[False]],
      "watchdog_on_vs_off": round(on / off - 1, 4)}))


if __name__ == "__main__":
  main()
