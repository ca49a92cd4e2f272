"""Learning efficiency on this machine at equal wall-clock: any set of arms, several seeds each,
judged by held-out MLM accuracy at 15% masking and by fine-tuning.

  python benchmarks/learning.py --minutes=5 [--arms=bert,modern,modern+muon] [--seeds=0,1,2]
      [--finetune_examples=8192] [--eval_batches=20] [--out=runs/learning]

Each finished run is appended to OUT/results.jsonl, and runs already there are not run again:
a killed study, or one given more arms or seeds later, goes on where it stopped, with the
calibrations it made first (OUT/study.json) and the same tokenizer (trained again on a fresh
machine; its digest is checked), and the table covers every run there.

An arm is a base (bert, modern, electra) with options added by '+': mask_anneal, muon,
context_extension, batch_warmup, all_mask, clm_first, time_budget (see OPTIONS). After one
JSON line per run it prints a table: mean +- sample standard deviation over the seeds.

Every arm has configs/tiny.py's size (4 layers, 128 wide, 4 heads) and trains on the built-in
corpus for the same wall-clock budget: a 40-step calibration run measures its seconds per step
(inside a real training loop, input included; see seconds_per_step), and every run of the arm
gets budget / that many steps, so each schedule runs to its end. Then the arm's encoder is
fine-tuned on `kjv_corrupted` (is this verse as written, or are 15% of its words replaced?)
with the settings of its table in docs/experiments.md.

  bert     configs/tiny.py as it is: post-LN, GELU MLP 512, biases, rotary positions, global
           attention, 30% masking, AdamW (0.9, 0.999), linear decay
  modern   the ModernBERT block at the same size: pre-LN with a final norm, GeGLU 2 x 336
           (the same parameters as GELU 512), no biases, local attention (window 32 of 64)
           with every third layer global, rotary bases 160k / 10k, 30% masking, AdamW (0.9,
           0.98) with update clipping, warmup-stable-decay with 1 - sqrt decay
  electra  an ELECTRA discriminator of the tiny size with a generator a quarter as wide,
           embeddings shared, 15% masking (85% [MASK], 15% kept), discriminator weight 50
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Before anything imports jax, as each command does first (mlmjax/cli.py): jax's unused
# plugins hidden (mlmjax/parallel/plugins.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

from mlmjax.configs import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.finetuning import config as finetune_config  # pylint: disable=wrong-import-position
from mlmjax.finetuning import tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.finetuning import trainer  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.planning import phases  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import train  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import workdir as workdir_lib  # pylint: disable=wrong-import-position


# The 2025 recipes as options on any base arm, each scaled down to the tiny size and run.
def _batch_warmup(c) -> None:
  c.optimizer.schedule_unit = "tokens"
  c.train.phases = ((0.25, c.data.seq_len, c.masking.max_predictions_per_seq,
                     {"batch_size": c.train.batch_size // 4}),
                    (0.75, c.data.seq_len, c.masking.max_predictions_per_seq))


OPTIONS = {
    # 30% -> 15% over the run (arXiv 2305.15096); the slots stay those of 30%.
    "mask_anneal": lambda c: c.masking.update(mask_rate=0.3, mask_rate_end=0.15,
                                              mask_rate_schedule="linear"),
    # Muon for the blocks' matrices, AdamW for the rest, at the arm's learning rate.
    "muon": lambda c: c.optimizer.update(kind="muon"),
    # ModernBERT's context extension: 3/4 of the steps at half length with rotary base 10k,
    # then the full length at 160k (the global layers' base).
    "context_extension": lambda c: c.train.update(phases=(
        (0.75, c.data.seq_len // 2, c.masking.max_predictions_per_seq // 2,
         {"rope_base": 10_000.0}),
        (0.25, c.data.seq_len, c.masking.max_predictions_per_seq, {"rope_base": 160_000.0}))),
    # mmBERT's batch-size warmup: a quarter of the batch for the first quarter of the steps,
    # the learning rate counted in tokens.
    "batch_warmup": _batch_warmup,
    # NeoBERT's and EuroBERT's replacement: every selected token becomes [MASK] (no 80/10/10).
    "all_mask": lambda c: c.masking.update(mask_token_prob=1.0, random_token_prob=0.0),
    # Causal LM for the first quarter of the steps, then MLM (configs/biphasic.py's split).
    "clm_first": lambda c: c.train.update(phases=(
        (0.25, c.data.seq_len, c.masking.max_predictions_per_seq, {"objective": "clm"}),
        (0.75, c.data.seq_len, c.masking.max_predictions_per_seq))),
    # The schedule keyed to the training time spent (train.budget_hours): each run's budget
    # is --minutes, its steps a cap ten times the calibrated count (see _set_length).
    "time_budget": lambda c: c.train.update(budget_hours=1.0),
}


def arm_config(arm: str):
  """'base+option+...' -> its config."""
  base_arm, *options = arm.split("+")
  config = _base_config(base_arm)
  for option in options:
    if option not in OPTIONS:
      raise ValueError(f"unknown option {option!r} (one of {', '.join(OPTIONS)})")
    OPTIONS[option](config)
  return config


def _base_config(arm: str):
  config = tiny.get_config()
  if arm == "modern":
    config.model.update(norm_position="pre", mlp="geglu", intermediate_size=336, use_bias=False,
                        local_attention_window=32, global_attention_every=3,
                        rope_base=160_000.0, local_rope_base=10_000.0, layer_norm_eps=1e-5)
    config.optimizer.update(adam_b2=0.98, schedule="wsd", decay_shape="sqrt", decay_fraction=0.1,
                            update_clip_rms=1.0)
  elif arm == "electra":
    config.objective.update(kind="electra", generator_fraction=0.25, discriminator_weight=50.0)
    config.model.embedding_size = 128
    config.masking.update(mask_rate=0.15, mask_token_prob=0.85, random_token_prob=0.0,
                          max_predictions_per_seq=10)  # 15% of 62 maskable tokens
  elif arm != "bert":
    raise ValueError(f"unknown arm {arm!r}")
  return config


def seconds_per_step(config, workdir: str, steps: int = 40) -> float:
  """An arm's seconds per step on an otherwise idle machine, from a short real run logging
  every step: per phase, its fastest step after the phase's first (which compiles), the
  fastest because other work on the machine only ever slows a step down; then the phases'
  steps weighted by their share of the run."""
  c = config.copy_and_resolve_references()
  c.train.update(steps=steps, log_every_steps=1, eval_every_steps=steps, eval_batches=1,
                 checkpoint_every_steps=steps)
  train.train_and_evaluate(c, workdir)
  rows = [r for r in metrics.rows(os.path.join(workdir, "metrics.jsonl")) if "tokens_per_sec" in r]
  plan = phases.plan(c)
  total = 0.0
  for phase in plan:
    timed = [phase.batch_size * phase.seq_len / r["tokens_per_sec"] for r in rows
             if phase.start + 1 < r["step"] <= phase.end]
    if not timed:
      raise ValueError(f"--calibration_steps={steps} leaves phase {phase.index} no timed step")
    total += min(timed) * (phase.end - phase.start)
  return total / steps


def finetune(workdir: str, examples: int) -> dict:
  """kjv_corrupted, as in docs/experiments.md: 8,192 examples, one epoch, mean pooling."""
  config = finetune_config.get_config()
  config.data.update(seq_len=64, max_train_examples=examples)
  config.train.update(epochs=1.0)
  config.optimizer.update(learning_rate=1e-3)
  config.model.update(pooling="mean", dropout_rate=0.0, attention_dropout_rate=0.0)
  return trainer.finetune(config, workdir, tasks.load("kjv_corrupted"),
                          os.path.join(workdir, "finetune", "kjv_corrupted"))


def _mean_spread(values: list[float]) -> str:
  if not values:
    return "-"
  spread = statistics.stdev(values) if len(values) > 1 else 0.0
  return f"{100 * statistics.mean(values):.1f} +- {100 * spread:.1f}"


def print_table(results: list[dict]) -> None:
  """One row per arm: steps, held-out MLM accuracy at 15% (all targets, and those whose input
  was [MASK]) and dev accuracy, mean +- sd (%),
  and each arm's held-out difference from the first arm's next to their combined spread (the
  sum of the two standard deviations): a difference inside it is no ranking."""
  print("\n| arm | seeds | s/step (calibrated) | steps | train minutes | held-out MLM accuracy"
        " (%) | vs the first arm (points; spread) | on [MASK] inputs (%) | constant baseline (%)"
        " | `kjv_corrupted` dev accuracy (%) |\n|---|---|---|---|---|---|---|---|---|---|")
  arms = list(dict.fromkeys(r["arm"] for r in results))
  accuracy = {arm: [100 * r["eval/mlm_accuracy"] for r in results if r["arm"] == arm]
              for arm in arms}
  sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
  first = accuracy[arms[0]]
  for arm in arms:
    runs = [r for r in results if r["arm"] == arm]
    tuned = [r["kjv_corrupted"]["accuracy"] for r in runs if "kjv_corrupted" in r]
    steps = statistics.mean(r["steps"] for r in runs)
    mine = accuracy[arm]
    versus = (f"{statistics.mean(mine) - statistics.mean(first):+.1f};"
              f" {sd(mine) + sd(first):.1f}")
    print(f"| {arm} | {len(runs)} | {runs[0]['seconds_per_step']} | {steps:.0f} |"
          f" {statistics.mean(r['train_wall_minutes'] for r in runs):.2f} |"
          f" {_mean_spread([r['eval/mlm_accuracy'] for r in runs])} | {versus} |"
          f" {_mean_spread([r['eval/mask_token_accuracy'] for r in runs])} |"
          f" {_mean_spread([r['eval/constant_baseline_accuracy'] for r in runs])} |"
          f" {_mean_spread(tuned)} |")


def _set_length(config, n: int, minutes: float) -> None:
  """A run of `n` steps; a short run keeps at most a tenth of them for warmup, the same for
  every arm. The time-budget arm gets `minutes` of training instead, with 10 n steps as a cap
  and its warmup scaled alike, so that warmup and decay take the same shares of its budget."""
  warmup = min(config.optimizer.warmup_steps, n // 10)
  scale = 10 if config.train.budget_hours else 1
  if scale > 1:
    config.train.budget_hours = minutes / 60
  config.train.update(steps=scale * n, eval_every_steps=scale * n, checkpoint_every_steps=scale * n)
  config.optimizer.update(warmup_steps=scale * warmup)


def _done(path: str) -> list[dict]:
  """The runs already in a results file (none if it does not exist)."""
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _study(out: str) -> dict:
  """OUT/study.json: each arm's calibrated seconds per step and the tokenizer's digest, the two
  things every later run of the study must share (a study resumed on a fresh machine trains
  the tokenizer again, and must get the same one)."""
  path = os.path.join(out, "study.json")
  if not os.path.exists(path):
    return {"seconds_per_step": {}, "tokenizer_sha256": None}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _save_study(out: str, study: dict) -> None:
  with open(os.path.join(out, "study.json"), "w", encoding="utf-8") as f:
    json.dump(study, f, indent=1, sort_keys=True)


def _tokenizer(out: str, study: dict, calibration: str = "") -> str:
  """The study's one tokenizer: the one the first calibration made on this machine (its path
  in OUT/tokenizer.txt), so that every arm reads the same vocabulary and no run trains a
  tokenizer inside its budget; its digest must be the study's."""
  record = os.path.join(out, "tokenizer.txt")
  if not os.path.exists(record):
    with open(record, "w", encoding="utf-8") as f:
      f.write(workdir_lib.Workdir(calibration).saved_tokenizer())
  with open(record, encoding="utf-8") as f:
    path = f.read().strip()
  with open(path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  if study["tokenizer_sha256"] not in (None, digest):
    raise SystemExit(f"{path} is not the tokenizer of the study in {out} (sha256 {digest},"
                     f" the study's {study['tokenizer_sha256']})")
  study["tokenizer_sha256"] = digest
  return path


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--minutes", type=float, default=5.0, help="training budget per run")
  parser.add_argument("--arms", default="bert,modern,electra")
  parser.add_argument("--seeds", default="0", help="comma-separated; every arm runs each")
  parser.add_argument("--finetune_examples", type=int, default=8192,
                      help="kjv_corrupted training examples; 0: no fine-tuning")
  parser.add_argument("--calibration_steps", type=int, default=40,
                      help="steps of the run that measures an arm's seconds per step")
  parser.add_argument("--eval_batches", type=int, default=20,
                      help="held-out batches of 32 rows (about 290 masked tokens each at 15%%)")
  parser.add_argument("--out", default="runs/learning")
  args = parser.parse_args()
  metrics.quiet_library_logs()
  os.makedirs(args.out, exist_ok=True)
  results_path = os.path.join(args.out, "results.jsonl")
  results = _done(results_path)
  done = {(r["arm"], r["seed"]) for r in results}
  arms, seeds = args.arms.split(","), [int(s) for s in args.seeds.split(",")]
  study, tokenizer, steps = _study(args.out), None, {}
  for arm in arms:  # one calibration per arm: every seed of it gets the same number of steps
    if all((arm, seed) in done for seed in seeds):
      continue
    config = arm_config(arm)
    if os.path.exists(os.path.join(args.out, "tokenizer.txt")):
      config.tokenizer.path = tokenizer = _tokenizer(args.out, study)
    calibration = os.path.join(args.out, arm + ".calibration")
    if arm not in study["seconds_per_step"] or tokenizer is None:  # (a new machine: tokenizer)
      measured = seconds_per_step(config, calibration, args.calibration_steps)
      study["seconds_per_step"].setdefault(arm, measured)
    tokenizer = _tokenizer(args.out, study, calibration)
    _save_study(args.out, study)
    per_step = study["seconds_per_step"][arm]
    steps[arm] = (per_step, int(args.minutes * 60 / per_step))
  # Seed by seed through the arms, so that a change in the machine's load hits every arm.
  for seed in seeds:
    for arm in arms:
      if (arm, seed) in done:
        continue
      per_step, n = steps[arm]
      config = arm_config(arm)
      config.seed = seed
      config.tokenizer.path = tokenizer
      _set_length(config, n, args.minutes)
      config.train.eval_batches = args.eval_batches
      workdir = os.path.join(args.out, f"{arm}.seed{seed}")
      start = time.perf_counter()
      held_out = train.train_and_evaluate(config, workdir)
      row = {"arm": arm, "seed": seed, "minutes": args.minutes,
             "seconds_per_step": round(per_step, 4),
             # Those trained: n, or as many as the time-budget arm's minutes allowed.
             "steps": max(r["step"] for r in metrics.rows(os.path.join(workdir, "metrics.jsonl"))
                          if "loss" in r),
             "train_wall_minutes": round((time.perf_counter() - start) / 60, 2),
             **{k: round(v, 4) for k, v in held_out.items() if k.startswith("eval/")}}
      if args.finetune_examples:
        tuned = finetune(workdir, args.finetune_examples)
        row["kjv_corrupted"] = {k: round(v, 4) for k, v in tuned["dev"].items()}
      results.append(row)
      with open(results_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
      print(json.dumps(row), flush=True)
  print_table([r for r in results if r["arm"] in arms])


if __name__ == "__main__":
  main()
