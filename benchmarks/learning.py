"""Learning efficiency on this machine at equal wall-clock: the modern block against the tiny
BERT block, and ELECTRA against MLM judged by fine-tuning.

  python benchmarks/learning.py --minutes=5 [--arms=bert,modern,electra] [--out=runs/learning]

Every arm has configs/tiny.py's size (4 layers, 128 wide, 4 heads) and trains on the built-in
corpus for the same wall-clock budget: a 40-step calibration run measures its seconds per step
(inside a real training loop, input included), and the real run gets budget / that many steps,
so each schedule runs to its end. Then the arm's encoder is fine-tuned on `kjv_corrupted` (is
this verse as written, or are 15% of its words replaced?) with the settings the README reports
for it. Prints one JSON line per arm: held-out metrics at eval.mask_rate (15%) and dev accuracy.

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
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.finetuning import config as finetune_config  # pylint: disable=wrong-import-position
from mlmjax.finetuning import tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.finetuning import trainer  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import train  # pylint: disable=g-import-not-at-top,wrong-import-position


def arm_config(arm: str):
  config = tiny.get_config()
  if arm == "modern":
    config.model.update(norm_position="pre", mlp="geglu", intermediate_size=336, use_bias=False,
                        local_attention_window=32, global_attention_every=3,
                        rope_base=160_000.0, local_rope_base=10_000.0, layer_norm_eps=1e-5)
    config.train.update(adam_b2=0.98, schedule="wsd", decay_shape="sqrt", decay_fraction=0.1,
                        update_clip_rms=1.0)
  elif arm == "electra":
    config.objective.update(kind="electra", generator_fraction=0.25, discriminator_weight=50.0)
    config.model.embedding_size = 128
    config.masking.update(mask_rate=0.15, mask_token_prob=0.85, random_token_prob=0.0,
                          max_predictions_per_seq=10)  # 15% of 62 maskable tokens
  elif arm != "bert":
    raise ValueError(f"unknown arm {arm!r}")
  return config


def seconds_per_step(config, workdir: str) -> float:
  """The median step time of a 40-step real run (after its first interval: compilation)."""
  c = config.copy_and_resolve_references()
  c.train.update(steps=40, log_every_steps=10, eval_every_steps=40, eval_batches=1,
                 checkpoint_every_steps=40)
  train.train_and_evaluate(c, workdir)
  tokens = c.train.batch_size * c.data.seq_len
  rows = [r for r in metrics.rows(os.path.join(workdir, "metrics.jsonl")) if "tokens_per_sec" in r]
  return statistics.median(tokens / r["tokens_per_sec"] for r in rows[1:])


def finetune(workdir: str) -> dict:
  """kjv_corrupted, as the README's table: 8,192 examples, one epoch, mean pooling."""
  config = finetune_config.get_config()
  config.data.update(seq_len=64, max_train_examples=8192)
  config.train.update(epochs=1.0, learning_rate=1e-3)
  config.model.update(pooling="mean", dropout_rate=0.0, attention_dropout_rate=0.0)
  return trainer.finetune(config, workdir, tasks.load("kjv_corrupted"),
                          os.path.join(workdir, "finetune", "kjv_corrupted"))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--minutes", type=float, default=5.0, help="training budget per arm")
  parser.add_argument("--arms", default="bert,modern,electra")
  parser.add_argument("--out", default="runs/learning")
  args = parser.parse_args()
  metrics.quiet_library_logs()
  for arm in args.arms.split(","):
    config = arm_config(arm)
    per_step = seconds_per_step(config, os.path.join(args.out, arm + ".calibration"))
    steps = int(args.minutes * 60 / per_step)
    config.train.update(steps=steps, eval_every_steps=steps, checkpoint_every_steps=steps)
    workdir = os.path.join(args.out, arm)
    start = time.perf_counter()
    held_out = train.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - start
    tuned = finetune(workdir)
    print(json.dumps({
        "arm": arm, "seconds_per_step": round(per_step, 4), "steps": steps,
        "train_wall_minutes": round(wall / 60, 2),
        **{k: round(v, 4) for k, v in held_out.items() if k.startswith("eval/")},
        "kjv_corrupted": {k: round(v, 4) for k, v in tuned["dev"].items()},
    }), flush=True)


if __name__ == "__main__":
  main()
