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
fine-tunes five tasks). The arm `random_init` pretrains nothing: the same model from random
initialisation, fine-tuned the same way, shows which tasks respond to pretraining at all. Then
the table: mean +- sample standard deviation over the seeds, in percent, printed and written to
docs/strategies.md (--table) after every arm, with the tasks that respond to pretraining, the
usual strategy-to-application advice tested against random masking (ADVICE: a paired t-test
over the seeds, Holm-corrected across the advice rows) and the arms still to run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from scipy import stats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

# Before anything imports jax, as each command does first (mlmjax/cli.py): jax's unused
# plugins hidden (mlmjax/parallel/plugins.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

import downstream  # pylint: disable=g-import-not-at-top,wrong-import-position
import study_stats  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.configs import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
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
# No pretraining: the model of configs/tiny.py from random initialisation, fine-tuned with the
# arm's seed (the pretrained arms all fine-tune with seed 0: their seed is the pretraining's).
RANDOM_INIT = "random_init"
TASKS = ("kjv_corrupted", "kjv_entities", "kjv_qa", "kjv_continuation", "kjv_retrieval")
# A verdict needs a p-value below this, after Holm's correction where there are several.
ALPHA = 0.05


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
  random_init = strategy == RANDOM_INIT
  # random_init: one step, for a run folder with the model's settings and the tokenizer that
  # fine-tuning reads; its weights are not used.
  pretrain_steps = 1 if random_init else steps
  config.masking.update(**STRATEGIES["random" if random_init else strategy])
  config.train.update(steps=pretrain_steps, eval_every_steps=pretrain_steps,
                      checkpoint_every_steps=pretrain_steps)
  config.optimizer.update(warmup_steps=min(config.optimizer.warmup_steps, pretrain_steps // 10))
  workdir = os.path.join(out, f"{strategy}.seed{seed}")
  start = time.perf_counter()
  train.train_and_evaluate(config, workdir)
  minutes = (time.perf_counter() - start) / 60
  row = {"strategy": strategy, "seed": seed, "steps": steps, "train_minutes": round(minutes, 2)}
  if random_init:
    row.update(pretrain_steps=0, mlm_accuracy=None)
  else:
    # Held-out accuracy at 15% with random masking whatever the arm trained with, so arms
    # compare. (Imported here: the command module defines absl flags the table does not need.)
    from mlmjax.inference import evaluation as evaluate  # pylint: disable=g-import-not-at-top
    row["mlm_accuracy"] = round(evaluate.evaluate(workdir, strategy="random")["mlm_accuracy"], 4)
  for task in tasks:
    r = downstream.finetune(workdir, task, random_init, seed if random_init else 0)
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


def _score(result: dict) -> float:
  """A task's headline in percent (question answering's F1 already is)."""
  return result[result["headline"]] * (1.0 if result["kind"] == "question_answering" else 100.0)


def _scores(runs: list[dict], task: str) -> list[float]:
  """Each run's headline on `task` in percent."""
  return [_score(r[task]) for r in runs if task in r]


def _of(rows: list[dict], strategy: str) -> list[dict]:
  return [r for r in rows if r["strategy"] == strategy]


def _p(p: float) -> str:
  return "-" if p != p else f"{p:.3f}"  # nan: no test


def table(rows: list[dict], tasks) -> str:
  """The markdown table: one line per strategy, mean ± sd over its seeds."""
  head = " | ".join(f"`{t}` {next((r[t]['headline'] for r in rows if t in r), '')}"
                    for t in tasks)
  lines = [f"| strategy | seeds | steps | held-out MLM accuracy | {head} |",
           "|---" * (4 + len(tasks)) + "|"]
  for strategy in dict.fromkeys(r["strategy"] for r in rows):
    runs = _of(rows, strategy)
    cells = [study_stats.mean_sd(_scores(runs, t)) for t in tasks]
    mlm = [100.0 * r["mlm_accuracy"] for r in runs if r["mlm_accuracy"] is not None]
    lines.append(f"| {strategy} | {len(runs)} | {runs[0].get('pretrain_steps', runs[0]['steps'])}"
                 f" | {study_stats.mean_sd(mlm)} | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"


def paired_p(rows: list[dict], strategy: str, task: str) -> tuple[list[float], float]:
  """`strategy` minus `random` on `task`, seed by seed (the seeds both have), and the two-sided
  p of a paired t-test on these differences (nan below 2 seeds). Paired because an arm and
  random of one seed share everything but the masks: the initial weights, the order of the
  data and the fine-tuning."""
  base = {r["seed"]: _score(r[task]) for r in _of(rows, "random") if task in r}
  diffs = [_score(r[task]) - base[r["seed"]] for r in _of(rows, strategy)
           if task in r and r["seed"] in base]
  if len(diffs) < 2:
    return diffs, float("nan")
  return diffs, float(stats.ttest_1samp(diffs, 0.0).pvalue)


def responds(rows: list[dict], task: str) -> tuple[float, float]:
  """Whether `task` responds to pretraining: `random` against `random_init`, the gap of the
  means and the two-sided p of Welch's t-test (the two share no seed-by-seed pairing)."""
  pre, init = _scores(_of(rows, "random"), task), _scores(_of(rows, RANDOM_INIT), task)
  if len(pre) < 2 or len(init) < 2:
    return float("nan"), float("nan")
  return statistics.mean(pre) - statistics.mean(init), study_stats.welch_p(pre, init)


def anova_p(rows: list[dict], task: str) -> float:
  """One-way ANOVA across the strategies with 2 seeds or more on `task`: the p that they all
  have one mean (nan below 2 such strategies)."""
  groups = [_scores(_of(rows, s), task) for s in STRATEGIES]
  groups = [g for g in groups if len(g) >= 2]
  return float(stats.f_oneway(*groups).pvalue) if len(groups) >= 2 else float("nan")


def detectable(rows: list[dict], task: str, seeds: int, level: float) -> tuple[float, float]:
  """(the pooled standard deviation of strategy-minus-random differences on `task`, seed by
  seed, over every strategy; the smallest mean difference a row's paired t-test over `seeds`
  seeds finds with power study_stats.POWER at `level`), nan where no strategy has 2 paired
  seeds."""
  squares = dof = 0.0
  for strategy in STRATEGIES:
    if strategy != "random":
      diffs, _ = paired_p(rows, strategy, task)
      if len(diffs) > 1:
        squares += (len(diffs) - 1) * statistics.variance(diffs)
        dof += len(diffs) - 1
  if not dof:
    return float("nan"), float("nan")
  sd = math.sqrt(squares / dof)
  return sd, study_stats.detectable_sds(seeds, level) * sd


def pretraining(rows: list[dict], tasks) -> str:
  """Per task: what pretraining buys (random against random_init) and whether the strategies
  differ at all (one-way ANOVA)."""
  seeds, level = _design(rows, tasks)
  lines = ["| task | random init | random | gap | p (Welch) | responds to pretraining |"
           " strategies differ: p (ANOVA) | sd of a paired difference | detectable difference |",
           "|---" * 9 + "|"]
  for task in tasks:
    gap, p = responds(rows, task)
    verdict = ("-" if p != p else "yes" if p < ALPHA and gap > 0
               else "no: it cannot tell strategies apart")
    sd, smallest = detectable(rows, task, seeds, level)
    lines.append(f"| `{task}` | {study_stats.mean_sd(_scores(_of(rows, RANDOM_INIT), task))} |"
                 f" {study_stats.mean_sd(_scores(_of(rows, 'random'), task))} |"
                 f" {'-' if gap != gap else f'{gap:+.1f}'} | {_p(p)} | {verdict} |"
                 f" {_p(anova_p(rows, task))} | {_points(sd)} | {_points(smallest)} |")
  return "\n".join(lines) + "\n"


def _points(x: float) -> str:
  return "-" if x != x else f"{x:.1f}"


def _design(rows: list[dict], tasks) -> tuple[int, float]:
  """(the seeds of `random`: each row's paired test has that many pairs at most; the level
  a row's p must clear at the corrected level: ALPHA over the advice rows on `tasks`, Holm's
  first step, which the one row with a real difference among nulls faces)."""
  rows_tested = max(1, sum(1 for a in ADVICE if a[1] in tasks))
  return max(2, len(_of(rows, "random"))), ALPHA / rows_tested


def advice(rows: list[dict], tasks) -> str:
  """The advice on `tasks` tested against random masking: a paired t-test over the seeds per
  row, Holm-corrected across the rows; ahead or behind only where the adjusted p is below
  ALPHA, and a task that does not respond to pretraining said so."""
  entries = [a for a in ADVICE if a[1] in tasks]
  tests = [paired_p(rows, strategy, task) for strategy, task, _ in entries]
  adjusted = study_stats.holm([p for _, p in tests])
  lines = ["| advice | task | strategy | random | paired gap | p | Holm p | verdict |",
           "|---" * 8 + "|"]
  for (strategy, task, application), (diffs, p), p_holm in zip(entries, tests, adjusted):
    if p != p:
      verdict = "fewer than 2 seeds: none yet"
    elif p_holm < ALPHA:
      verdict = "ahead" if statistics.mean(diffs) > 0 else "behind"
    else:
      verdict = "no difference shown"
    gap, p_response = responds(rows, task)
    if p_response == p_response and not (p_response < ALPHA and gap > 0):
      verdict += "; the task does not respond to pretraining"
    lines.append(f"| {strategy} for {application} | `{task}` |"
                 f" {study_stats.mean_sd(_scores(_of(rows, strategy), task))} |"
                 f" {study_stats.mean_sd(_scores(_of(rows, 'random'), task))} |"
                 f" {study_stats.mean_sd(diffs) if len(diffs) > 1 else '-'} | {_p(p)} |"
                 f" {_p(p_holm)} |"
                 f" {verdict} |")
  return "\n".join(lines) + "\n"


def write_page(rows: list[dict], tasks, pending: list[str], command: str, path: str) -> None:
  """docs/strategies.md: how the table was made, the table, what pretraining buys each task,
  the advice tested against random and the arms not run yet."""
  import jax  # pylint: disable=g-import-not-at-top
  text = ("# Which masking strategy helps which task\n\n"
          "Generated by `benchmarks/strategies.py` (its docstring says how; what the numbers"
          " say is in [Choose a masking strategy](masking.md)). Each arm pretrains"
          " `configs/tiny.py` on the built-in corpus, prepared once with spaCy's"
          " en_core_web_sm 3.8.0 word"
          " annotations, for the steps shown; then held-out MLM accuracy at 15% random masking"
          " and the offline task of each kind fine-tuned the same way"
          " (`benchmarks/downstream.py`). `random_init` pretrains nothing: the same model"
          " from random initialisation, fine-tuned with the arm's seed. Mean ± sample standard"
          " deviation over the seeds, in percent (question answering's F1 already is)."
          f" Measured on a 2-core CPU, jax {jax.__version__}. Regenerate, or go on, with:\n\n"
          f"    {command}\n\n"
          + table(rows, tasks)
          + "\nThe held-out MLM accuracy is taken with random masking at 15%, the task the"
          " random-like arms (`random`, `static`, `adaptive`, `mixture`) train on: it favours"
          " them and says little about the others. `static` draws each sequence's masks from"
          " `dupe_factor` = 10 fixed copies; 2,000 steps cover the corpus about 4 times (2,000 x"
          " 32 rows x 64 tokens over its 1.0M tokens), so no copy repeats and it masks as"
          " dynamically as `random`.\n"
          "\n## What pretraining buys each task\n\n"
          "`random` against `random_init` (Welch's t-test: the two share no seeds), and whether"
          " the pretrained strategies differ on the task at all (one-way ANOVA across them). A"
          " task that pretraining does not move cannot tell strategies apart. The last two"
          " columns are the study's power: the standard deviation of a strategy-minus-random"
          " difference, seed by seed (pooled over the strategies), and the smallest true"
          " difference a row of the advice below would find"
          f" {study_stats.POWER:.0%} of the time with {_design(rows, tasks)[0]} seeds at the"
          " corrected level"
          f" ({ALPHA} over the {sum(1 for a in ADVICE if a[1] in tasks)} rows, Holm's first"
          " step). \"No difference shown\" below means no difference that large; a smaller one"
          " may be there.\n\n"
          + pretraining(rows, tasks)
          + "\n## The usual advice, against random masking\n\n"
          "Each strategy on the task that stands for the application the advice names, against"
          " `random` on the same task. The gap is taken seed by seed (an arm and `random` of one"
          " seed share their initial weights, data order and fine-tuning) and tested with a"
          f" paired t-test; the p-values are Holm-corrected across the rows, and a row is called"
          f" ahead or behind only where the corrected p is below {ALPHA}.\n\n"
          + advice(rows, tasks))
  if pending:
    text += ("\nNot run yet (the command above goes on with them): " + ", ".join(pending)
             + ".\n")
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--strategies", default=",".join([*STRATEGIES, RANDOM_INIT]))
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
