"""What pretraining buys on each kind of downstream task: a pretrained run's encoder against the
same model from random initialisation, fine-tuned the same way on the offline tasks.

  python benchmarks/downstream.py --workdir=runs/tiny [--tasks=kjv_entities,kjv_qa]
      [--inits=pretrained,random]

One JSON line per fine-tuning run, then a table (headline metric and the others, dev set).
Each task is fine-tuned with the settings of SETTINGS (each run is the plain command
`python -m mlmjax.finetune --workdir=... --task=TASK` with these --config overrides, printed
before it starts), in WORKDIR/finetune/TASK[.random_init]; a finished run is only scored again.
The settings suit configs/tiny.py on a CPU (a few minutes a run): mlmjax's defaults are BERT's
(3 epochs, learning rate 1e-4, dropout 0.1), which a 1.3M-parameter model trains too slowly
with. The same function fine-tunes every arm of benchmarks/strategies.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Before anything imports jax, as each command does first (mlmjax/cli.py): jax's unused
# plugins hidden (mlmjax/parallel/plugins.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

from mlmjax.finetuning import config as finetune_config  # pylint: disable=wrong-import-position
from mlmjax.finetuning import tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.finetuning import trainer  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import workdir as workdir_lib  # pylint: disable=wrong-import-position

# Small-model settings shared by every task: the tiny model learns best at 1e-3 without
# dropout (docs/experiments.md, "What pretraining bought").
_COMMON = {"optimizer.learning_rate": 1e-3, "model.dropout_rate": 0.0,
           "model.attention_dropout_rate": 0.0, "data.seq_len": 64, "train.epochs": 1.0}
SETTINGS = {
    "kjv_corrupted": {**_COMMON, "data.max_train_examples": 8192, "model.pooling": "mean"},
    "kjv_entities": {**_COMMON, "data.max_train_examples": 4096},
    # 4 verses and a question: 128 tokens hold most in one window.
    "kjv_qa": {**_COMMON, "data.seq_len": 128, "qa.max_query_length": 48, "train.epochs": 2.0},
    "kjv_continuation": {**_COMMON, "data.seq_len": 96, "data.max_train_examples": 4096},
    "kjv_retrieval": {**_COMMON, "data.max_train_examples": 8192},
}


def flags_of(task: str) -> list[str]:
  """The finetune command's --config flags for `task`."""
  return [f"--config.{k}={v}" for k, v in SETTINGS[task].items()]


def finetune(workdir: str, task: str, random_init: bool = False, seed: int = 0) -> dict:
  """Fine-tunes `task` with SETTINGS and `seed` on the run in `workdir`; the results
  (trainer.finetune)."""
  config = finetune_config.get_config()
  config.seed = seed
  for key, value in SETTINGS[task].items():
    section, name = key.split(".")
    config[section][name] = value
  output = workdir_lib.Workdir(workdir).finetune(task, random_init).path
  return trainer.finetune(config, workdir, tasks.load(task), output, random_init=random_init)


def cells(dev: dict, headline: str, kind: str) -> str:
  """The headline metric first, then the others, in percent (SQuAD's are percent already)."""
  scale = 1.0 if kind == "question_answering" else 100.0
  def fmt(k):
    return f"{k} {dev[k]:.2f}" if "threshold" in k else f"{k} {scale * dev[k]:.1f}"
  keys = [headline] + [k for k in dev if k not in (headline, "loss", "total") and
                       not k.endswith("_total")]
  return ", ".join(fmt(k) for k in keys if k in dev)


def print_table(rows: list[dict]) -> None:
  print("\n| task (kind) | steps | pretrained | random init | no learning |\n|---|---|---|---|---|")
  for task in dict.fromkeys(r["task"] for r in rows):
    by_init = {r["init"]: r for r in rows if r["task"] == task}
    first = next(iter(by_init.values()))
    scale = 1.0 if first["kind"] == "question_answering" else 100.0  # SQuAD: percent
    bar = ", ".join(f"{k[4:]} {scale * v:.1f}" for k, v in first.items()
                    if k.startswith("dev_") and k != "dev_examples")
    scored = {init: cells(by_init[init]["dev"], first["headline"], first["kind"])
              if init in by_init else "-" for init in ("pretrained", "random")}
    print(f"| `{task}` ({first['kind']}) | {first['steps']} | {scored['pretrained']} |"
          f" {scored['random']} | {bar} |")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--workdir", required=True, help="a pretraining run")
  parser.add_argument("--tasks", default=",".join(SETTINGS))
  parser.add_argument("--inits", default="pretrained,random")
  args = parser.parse_args()
  metrics.quiet_library_logs()
  rows = []
  for task in args.tasks.split(","):
    for init in args.inits.split(","):
      print(f"python -m mlmjax.finetune --workdir={args.workdir} --task={task}"
            f" {' '.join(flags_of(task))}{' --init=random' if init == 'random' else ''}",
            flush=True)
      start = time.perf_counter()
      r = finetune(args.workdir, task, init == "random")
      row = {"task": task, "init": init, "kind": r["kind"], "headline": r["headline_metric"],
             "dev": r["dev"], "steps": r["steps"], "train_rows": r["train_rows"],
             "minutes": round((time.perf_counter() - start) / 60, 2),
             **{k: v for k, v in r.items() if k.startswith("dev_") and k != "dev_history"}}
      rows.append(row)
      print(json.dumps(row), flush=True)
  print_table(rows)

if __name__ == "__main__":
  main()
