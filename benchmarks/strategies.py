"""Which masking strategy helps which downstream task: every strategy on configs/tiny.py at equal
steps, several seeds, scored by held-out MLM accuracy (at 15%, random masking) and by
fine-tuning on the offline task of each kind (benchmarks/downstream.py's settings).

  python benchmarks/strategies.py [--strategies=random,span,syntax] [--seeds=0,1,2]
      [--steps=2000] [--tasks=kjv_entities,kjv_qa] [--out=runs/strategies]
      [--nlp_pipeline=en_core_web_sm]

The built-in corpus is prepared once with word annotations (python -m mlmjax.prepare, spaCy's
en_core_web_sm: `pip install -e '.[nlp]'`), so every arm reads the same tokens and the
annotating strategies pay nothing for spaCy while training. Each (strategy, seed, steps) is one
JSON row in strategies.jsonl beside this script (--rows): a row already there is not run again,
so the study can be stopped and continued (it takes hours on a CPU: each arm pretrains, then
fine-tunes five tasks). Then the table: mean +- sample standard
deviation over the seeds, in percent, printed and written to docs/strategies.md (--table) after
every arm, with the usual strategy-to-application advice checked against random masking (ADVICE)
and the arms still to run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

# Before anything imports jax, as each command does first (mlmjax/cli.py): jax's unused
# plugins hidden (mlmjax/parallel/plugins.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

import downstream  # pylint: disable=g-import-not-at-top,wrong-import-position
from configs import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import train  # pylint: disable=g-import-not-at-top,wrong-import-position

ROWS = os.path.join(REPO, "benchmarks", "strategies.jsonl")
TABLE = os.path.join(REPO, "docs", "strategies.md")

# The eleven strategies of the masking literature, as mlmjax names and configures them.
STRATEGIES = {
    "static": {"strategy": "static", "static_strategy": "random"},  # BERT's fixed masks
    "random": {"strategy": "random"},  # RoBERTa's dynamic masking: fresh every step
    "whole_word": {"strategy": "whole_word"},
    "span": {"strategy": "span"},
    "entity": {"strategy": "entity", "entity_ner": True},  # recogniser + heuristic
    "frequency": {"strategy": "frequency"},
    "adaptive": {"strategy": "adaptive"},
    "syntax": {"strategy": "syntax"},
    "semantic": {"strategy": "semantic"},
    "contextual": {"strategy": "contextual"},
    "mixture": {"strategy": "mixture", "mixture": "random=0.5,span=0.25,whole_word=0.25"},
}
TASKS = ("kjv_corrupted", "kjv_entities", "kjv_qa", "kjv_continuation", "kjv_retrieval")


def prepared(out: str, nlp_pipeline: str) -> str:
  """The built-in corpus prepared with the tiny config and word annotations (once)."""
  folder = os.path.join(out, "prepared")
  if not os.path.exists(os.path.join(folder, "manifest.json")):
    subprocess.run([sys.executable, "-m", "mlmjax.prepare", "--source=builtin", f"--out={folder}",
                    "--config=configs/tiny.py", "--config.masking.strategy=syntax",
                    f"--config.masking.nlp_pipeline={nlp_pipeline}",
                    "--num_files=8"], cwd=REPO, check=True)
  return folder


def arm(strategy: str, seed: int, steps: int, data: str, out: str, tasks,
        nlp_pipeline: str) -> dict:
  config = tiny.get_config()
  config.seed = seed
  config.masking.nlp_pipeline = nlp_pipeline
  config.data.source = f"prepared:{data}"
  config.masking.update(**STRATEGIES[strategy])
  config.train.update(steps=steps, eval_every_steps=steps, checkpoint_every_steps=steps,
                      warmup_steps=min(config.train.warmup_steps, steps // 10))
  workdir = os.path.join(out, f"{strategy}.seed{seed}")
  start = time.perf_counter()
  train.train_and_evaluate(config, workdir)
  minutes = (time.perf_counter() - start) / 60
  # Held-out accuracy at 15% with random masking whatever the arm trained with, so arms compare.
  # (Imported here: the command module defines absl flags, which the table does not need.)
  from mlmjax import evaluate  # pylint: disable=g-import-not-at-top
  held_out = evaluate.evaluate(workdir, strategy="random")
  row = {"strategy": strategy, "seed": seed, "steps": steps, "train_minutes": round(minutes, 2),
         "mlm_accuracy": round(held_out["mlm_accuracy"], 4)}
  for task in tasks:
    r = downstream.finetune(workdir, task)
    row[task] = {"headline": r["headline_metric"], "kind": r["kind"],
                 **{k: round(v, 4) for k, v in r["dev"].items()}}
  return row


# The usual strategy-to-application advice, as (strategy, task this suite has for it, the
# application it stands for). There is no parsing or sentiment task offline: the nearest are
# named so the reader can judge the stand-in.
ADVICE = (
    ("span", "kjv_entities", "NER"),
    ("span", "kjv_qa", "question answering"),
    ("entity", "kjv_entities", "NER"),
    ("entity", "kjv_qa", "question answering"),
    ("syntax", "kjv_corrupted", "parsing-like tasks (nearest here: does every word fit)"),
    ("semantic", "kjv_corrupted", "sentiment (nearest here: verse classification)"),
    ("semantic", "kjv_retrieval", "semantic search"),
    ("contextual", "kjv_retrieval", "similarity and embeddings"),
    ("contextual", "kjv_continuation", "similarity (which verse follows)"),
)


def _scores(runs: list[dict], task: str) -> list[float]:
  """Each run's headline on `task` in percent (question answering's F1 already is)."""
  scored = [r[task] for r in runs if task in r]
  return [s[s["headline"]] * (1.0 if s["kind"] == "question_answering" else 100.0)
          for s in scored]


def _mean_sd(values: list[float]) -> str:
  if not values:
    return "-"
  if len(values) == 1:  # one seed has no spread to show
    return f"{values[0]:.1f}"
  return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def table(rows: list[dict], tasks) -> str:
  """The markdown table: one line per strategy, mean ± sd over its seeds."""
  head = " | ".join(f"`{t}` {next((r[t]['headline'] for r in rows if t in r), '')}"
                    for t in tasks)
  lines = [f"| strategy | seeds | steps | held-out MLM accuracy | {head} |",
           "|---" * (4 + len(tasks)) + "|"]
  for strategy in dict.fromkeys(r["strategy"] for r in rows):
    runs = [r for r in rows if r["strategy"] == strategy]
    cells = [_mean_sd(_scores(runs, t)) for t in tasks]
    lines.append(f"| {strategy} | {len(runs)} | {runs[0]['steps']} |"
                 f" {_mean_sd([100.0 * r['mlm_accuracy'] for r in runs])} | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"


def advice(rows: list[dict], tasks) -> str:
  """The advice on `tasks` checked against random masking: a strategy is called ahead or behind
  only where the gap between the means is larger than the two standard deviations added."""
  lines = ["| advice | task | strategy | random | gap | verdict |", "|---" * 6 + "|"]
  for strategy, task, application in (a for a in ADVICE if a[1] in tasks):
    mine = _scores([r for r in rows if r["strategy"] == strategy], task)
    base = _scores([r for r in rows if r["strategy"] == "random"], task)
    if len(mine) < 2 or len(base) < 2:
      verdict, gap = "fewer than 2 seeds: none yet", "-"
    else:
      diff = statistics.mean(mine) - statistics.mean(base)
      spread = statistics.stdev(mine) + statistics.stdev(base)
      gap = f"{diff:+.1f}"
      verdict = ("ahead" if diff > spread else "behind" if diff < -spread
                 else f"within the spread (± {spread:.1f})")
    lines.append(f"| {strategy} for {application} | `{task}` | {_mean_sd(mine)} |"
                 f" {_mean_sd(base)} | {gap} | {verdict} |")
  return "\n".join(lines) + "\n"


def write_page(rows: list[dict], tasks, pending: list[str], command: str, path: str) -> None:
  """docs/strategies.md: how the table was made, the table, the advice against random and
  the arms not run yet."""
  import jax  # pylint: disable=g-import-not-at-top
  text = ("# Which masking strategy helps which task\n\n"
          "Generated by `benchmarks/strategies.py` (its docstring says how; what the numbers"
          " say is in [Choose a masking strategy](masking.md)). Each arm pretrains"
          " `configs/tiny.py` on the built-in corpus, prepared once with spaCy's en_core_web_sm 3.8.0 word"
          " annotations, for the steps shown; then held-out MLM accuracy at 15% random masking"
          " and the offline task of each kind fine-tuned the same way"
          " (`benchmarks/downstream.py`). Mean ± sample standard deviation over the seeds, in"
          f" percent (question answering's F1 already is). Measured on a 2-core CPU, jax"
          f" {jax.__version__}. Regenerate, or go on, with:\n\n    {command}\n\n"
          + table(rows, tasks)
          + "\n## The usual advice, against random masking\n\n"
          "Each strategy on the task that stands for the application the advice names, against"
          " `random` on the same task. A gap is called ahead or behind only where it is larger"
          " than the two standard deviations added together; anything smaller is within what"
          " another seed can change.\n\n" + advice(rows, tasks))
  if pending:
    text += ("\nNot run yet (the command above goes on with them): " + ", ".join(pending)
             + ".\n")
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--strategies", default=",".join(STRATEGIES))
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--steps", type=int, default=tiny.get_config().train.steps)
  parser.add_argument("--tasks", default=",".join(TASKS))
  parser.add_argument("--out", default="runs/strategies")
  parser.add_argument("--nlp_pipeline", default=tiny.get_config().masking.nlp_pipeline,
                      help="spaCy pipeline that annotates the corpus (a package or a folder)")
  parser.add_argument("--rows", default=ROWS, help="the study's rows (read, then appended)")
  parser.add_argument("--table", default=TABLE, help="the page the table is written to")
  parser.add_argument("--table_only", action="store_true",
                      help="print the rows' table and write its page only")
  args = parser.parse_args()
  metrics.quiet_library_logs()
  tasks = args.tasks.split(",")
  args.out = os.path.abspath(args.out)  # the prepare command runs in the repository
  rows = [json.loads(line) for line in open(args.rows)] if os.path.exists(args.rows) else []
  # The command that made (and goes on with) this study: the options that choose its arms.
  command = " ".join(["python benchmarks/strategies.py", *(
      f"--{k}={getattr(args, k)}" for k in ("strategies", "seeds", "steps", "tasks", "nlp_pipeline")
      if getattr(args, k) != parser.get_default(k))])
  arms = [(strategy, int(seed)) for seed in args.seeds.split(",")
          for strategy in args.strategies.split(",")]

  def done(strategy, seed):
    return any((r["strategy"], r["seed"], r["steps"]) == (strategy, seed, args.steps)
               for r in rows)

  def write():
    write_page([r for r in rows if r["steps"] == args.steps], tasks,
               [f"{a} seed {s}" for a, s in arms if not done(a, s)], command, args.table)

  if not args.table_only:
    data = prepared(args.out, args.nlp_pipeline)
    # Seed by seed through the strategies, so that a change in the machine's load hits all.
    for strategy, seed in arms:
      if done(strategy, seed):
        continue
      row = arm(strategy, seed, args.steps, data, args.out, tasks, args.nlp_pipeline)
      rows.append(row)
      with open(args.rows, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
      print(json.dumps(row), flush=True)
      write()
  write()
  print("\n" + table([r for r in rows if r["steps"] == args.steps], tasks), end="")


if __name__ == "__main__":
  main()
