"""CI: `python -m mlmjax.main --config=tiny` trains 8 steps straight, and again stopped after
step 4 (`--stop_after`, as a preemption leaves it) and resumed;
the two runs must end bit-identical: every logged loss and metric, and the whole saved state
(parameters, optimizer, step) at step 8.

Run by .ci/newest_jax under the newest jax setup.py admits; prints what it checked.
"""

import json
import os
import subprocess
import sys
import tempfile

from mlmjax.parallel import plugins  # first, before anything imports jax (mlmjax/cli.py)
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import jax
import numpy as np

from mlmjax.training import finished_run

STEPS, STOP = 8, 4
COMMON = ["--config=tiny", "--config.model.num_layers=1", "--config.train.log_every_steps=1",
          "--config.train.eval_every_steps=8", "--config.train.eval_batches=1",
          f"--config.train.checkpoint_every_steps={STOP}"]
TIMINGS = ("tokens_per_sec", "eta_sec", "mfu", "input_wait_fraction")  # differ run to run


def _main(workdir: str, steps: int, *extra: str) -> str:
  proc = subprocess.run([sys.executable, "-m", "mlmjax.main", f"--workdir={workdir}", *COMMON,
                         f"--config.train.steps={steps}", *extra],
                        capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    sys.exit(f"mlmjax.main failed ({workdir}, {steps} steps):\n{proc.stderr[-3000:]}")
  return proc.stderr


def _metrics(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in f]


def main() -> None:
  tmp = tempfile.mkdtemp()
  straight, split = os.path.join(tmp, "straight"), os.path.join(tmp, "split")
  _main(straight, STEPS)
  # the straight run's tokenizer, so that only the stop and the resume differ
  tokenizer = f"--config.tokenizer.path={os.path.join(straight, 'tokenizer.model')}"
  _main(split, STEPS, tokenizer, f"--stop_after={STOP}")
  log = _main(split, STEPS, tokenizer)
  if f"Resumed from checkpoint at step {STOP}" not in log:
    sys.exit(f"the second run did not resume at step {STOP}:\n{log[-3000:]}")
  a, b = _metrics(straight), _metrics(split)
  if a != b:
    sys.exit(f"the logged metrics differ:\nstraight {a}\nresumed  {b}")
  losses = [r["loss"] for r in a if "loss" in r]
  if len(losses) != STEPS:
    sys.exit(f"expected a loss for each of {STEPS} steps, got {losses}")
  print(f"metrics.jsonl: {len(a)} rows identical, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
  states = [jax.tree.map(np.asarray, finished_run.load(w).state) for w in (straight, split)]
  if jax.tree.structure(states[0]) != jax.tree.structure(states[1]):
    sys.exit("the saved states differ in structure")
  leaves = jax.tree_util.tree_leaves_with_path(states[0])
  for (path, x), y in zip(leaves, jax.tree.leaves(states[1])):
    np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))
  print(f"state at step {int(states[0]['step'])}: {len(leaves)} arrays bit-identical")


if __name__ == "__main__":
  main()
