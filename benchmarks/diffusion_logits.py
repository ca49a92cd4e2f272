"""Masked diffusion's targets, three ways: memory and time of the train step and of the bound's
eval step (`python -m mlmjax.evaluate`'s for a diffusion run: a slot a position, logits whole).

  python benchmarks/diffusion_logits.py [--size=tiny] [--steps=10]     # here: measured
  python benchmarks/diffusion_logits.py --size=base --target=v5p-8    # compiled: memory and
                                                                       # predicted time

  slots         mlmjax's way: the hidden states gathered at the masked positions into slots,
                one a position (a rate near 1 masks nearly every token), and the logits of
                the slots: MLM's batch contract, so a run switches between the two objectives
                with one step function and one loss
  slots, chunks the same, decoded --chunk slots at a time (objective.logits_chunk)
  full logits   every position decoded where it is: the same step with the gather left out
                (bert.gather made the identity; with a slot a position the shapes agree, and
                what is left is what a full-sequence-logits step computes; its loss values are
                not the bound's and are not used)

One JSON row per variant and step, then a table. On a target, base is compiled with its layers
scanned (one layer body to compile; the roofline counts it once per layer).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# Before anything imports jax, as each command does first (mlmjax/cli.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

from mlmjax.configs import diffusion  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.models import bert  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.parallel import targets  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.planning import aot  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training import benchmark  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top,wrong-import-position

GiB = 2**30


@contextlib.contextmanager
def _full_logits():
  """bert.gather as the identity, for the steps built inside."""
  gather = bert.gather
  bert.gather = lambda hidden_btd, positions_bp: hidden_btd
  try:
    yield
  finally:
    bert.gather = gather


def variants(chunk: int):
  """(name, logits_chunk, context) of each variant."""
  return (("slots", 0, contextlib.nullcontext), (f"slots, chunks of {chunk}", chunk,
          contextlib.nullcontext), ("full logits", 0, _full_logits))


def measured(config, steps: int) -> list[dict]:
  """On this machine: each step's median time and its compiled memory per device."""
  out = benchmark.measure(config, steps, input_seconds=0, eval_steps=steps)
  return [{"step": "train", "ms": out["step_ms_median"],
           "mib": out["compiled_memory_bytes_per_device"] / 2**20},
          {"step": "eval_bound", "ms": out["eval_step_ms_median"],
           "mib": out["eval_compiled_memory_bytes_per_device"] / 2**20}]


def compiled(config, target_name: str) -> list[dict]:
  """For a target: each step's predicted time and its memory per device."""
  config.model.scan_layers = True
  target = targets.get(target_name)
  return [{"step": c.report["step"], "ms": c.report["predicted"]["step_s"] * 1e3,
           "mib": c.report["memory_gib"] * 1024, "compile_s": c.report["compile_s"]}
          for c in aot.compile_steps(config, target, which=("train", "eval_bound"))]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--size", default="tiny", choices=diffusion.SIZES)
  parser.add_argument("--target", default="", help="compile for it (e.g. v5p-8); default: run"
                      " here")
  parser.add_argument("--steps", type=int, default=10, help="timed steps of each (here)")
  parser.add_argument("--chunk", type=int, default=0,
                      help="logits_chunk of the chunked variant (default: a quarter of a row)")
  args = parser.parse_args()
  metrics.quiet_library_logs()
  seq_len = diffusion.get_config(args.size).data.seq_len
  rows = []
  for name, chunk, context in variants(args.chunk or seq_len // 4):
    config = diffusion.get_config(args.size)
    config.objective.logits_chunk = chunk
    with context():
      steps = compiled(config, args.target) if args.target else measured(config, args.steps)
    for step in steps:
      rows.append({"size": args.size, "target": args.target or "here", "variant": name, **step})
      print(json.dumps(rows[-1]), flush=True)
  kind = "predicted" if args.target else "measured"
  print(f"\n| variant | step | {kind} ms | memory MiB per device |\n|---|---|---|---|")
  for r in rows:
    print(f"| {r['variant']} | {r['step']} | {r['ms']:.2f} | {r['mib']:.1f} |")


if __name__ == "__main__":
  main()
