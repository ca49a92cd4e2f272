"""Masked diffusion against MLM at equal steps: configs/diffusion.py:tiny and configs/tiny.py on
the built-in corpus, several seeds, each scored on the same held-out rows by held-out accuracy at
15%, 50% and 85% masking and by the diffusion bound (bits per token, a Monte Carlo estimate over
the rate).

  python benchmarks/diffusion.py [--seeds=0,1,2] [--steps=2000] [--bound_samples=8]
      [--out=runs/diffusion_study]

Each (objective, seed, steps) is one JSON row in diffusion.jsonl beside this script (--rows): a
row already there is not run again, so the study can be stopped and continued. Then the table:
mean +- sample standard deviation over the seeds, and Welch's t-test between the objectives.
The arms differ only in objective.kind (diffusion: a rate per document, [MASK] only, the
1/t-weighted loss, a slot per position) and, for `diffusion_plain`, objective.diffusion_loss
('plain': the mean cross-entropy over the targets, no 1/t); all score with the run's own masking
keys (80/10/10 at the evaluated rate), so `[MASK] acc` is the accuracy on the inputs a diffusion
model was trained on. Welch's p compares MLM with the bound (1/t) and the bound with the plain
loss.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

# Before anything imports jax, as each command does first (mlmjax/cli.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

from mlmjax.configs import diffusion  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.configs import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.inference import evaluation as evaluate  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import train  # pylint: disable=g-import-not-at-top,wrong-import-position
import study_stats  # pylint: disable=g-import-not-at-top,wrong-import-position

ROWS = os.path.join(REPO, "benchmarks", "diffusion.jsonl")


def _plain():
  config = diffusion.get_config()
  config.objective.diffusion_loss = "plain"
  return config


OBJECTIVES = {"mlm": tiny.get_config, "diffusion": diffusion.get_config,
              "diffusion_plain": _plain}
COMPARED = (("mlm", "diffusion"), ("diffusion", "diffusion_plain"))  # Welch's p of each pair
RATES = (0.15, 0.5, 0.85)
# (column, row key, scale): accuracies in percent, the bound in bits per token.
COLUMNS = ([(f"acc {r:.0%}", f"accuracy_{r}", 100.0) for r in RATES]
           + [(f"[MASK] acc {r:.0%}", f"mask_token_accuracy_{r}", 100.0) for r in RATES]
           + [("bits per token", "bits_per_token", 1.0)])


def arm(objective: str, seed: int, steps: int, bound_samples: int, out: str) -> dict:
  """Trains one arm and scores it: its row."""
  config = OBJECTIVES[objective]()
  config.seed = seed
  config.train.steps = steps
  workdir = os.path.join(out, f"{objective}.seed{seed}")
  start = time.perf_counter()
  train.train_and_evaluate(config, workdir)
  row = {"objective": objective, "seed": seed, "steps": steps,
         "train_minutes": round((time.perf_counter() - start) / 60, 2)}
  for rate in RATES:
    scores = evaluate.evaluate(workdir, mask_rate=rate, bound_samples=0)
    row[f"accuracy_{rate}"] = round(scores["mlm_accuracy"], 4)
    row[f"mask_token_accuracy_{rate}"] = round(scores["mask_token_accuracy"], 4)
  bound = evaluate.evaluate(workdir, bound_samples=bound_samples)
  row.update(bits_per_token=round(bound["bits_per_token"], 4), bound_samples=bound_samples)
  return row


def table(rows: list[dict]) -> str:
  """Mean ± sd per objective, and Welch's p between the COMPARED pairs, per column."""
  by = {o: [r for r in rows if r["objective"] == o] for o in OBJECTIVES}
  lines = ["| | " + " | ".join(f"{o} ({len(by[o])} seeds)" for o in OBJECTIVES) + " | "
           + " | ".join(f"p {a} / {b}" for a, b in COMPARED) + " |",
           "|---|" + "---|" * (len(OBJECTIVES) + len(COMPARED))]
  for name, key, scale in COLUMNS:
    values = {o: [r[key] * scale for r in by[o]] for o in OBJECTIVES}
    cells = [study_stats.mean_sd(v, digits=2) for v in values.values()]
    for a, b in COMPARED:
      p = study_stats.welch_p(values[a], values[b])
      cells.append("-" if p != p else f"{p:.3f}")  # nan: fewer than 2 seeds
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--steps", type=int, default=tiny.get_config().train.steps)
  parser.add_argument("--bound_samples", type=int, default=8)
  parser.add_argument("--out", default="runs/diffusion_study")
  parser.add_argument("--rows", default=ROWS, help="the study's rows (read, then appended)")
  parser.add_argument("--table_only", action="store_true", help="print the rows' table only")
  args = parser.parse_args()
  metrics.quiet_library_logs()
  rows = [json.loads(line) for line in open(args.rows)] if os.path.exists(args.rows) else []
  if not args.table_only:
    # Seed by seed through the objectives, so that a change in the machine's load hits both.
    for seed in map(int, args.seeds.split(",")):
      for objective in OBJECTIVES:
        if any((r["objective"], r["seed"], r["steps"]) == (objective, seed, args.steps)
               for r in rows):
          continue
        row = arm(objective, seed, args.steps, args.bound_samples, args.out)
        rows.append(row)
        with open(args.rows, "a", encoding="utf-8") as f:
          f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
  print(table([r for r in rows if r["steps"] == args.steps]), end="")


if __name__ == "__main__":
  main()
