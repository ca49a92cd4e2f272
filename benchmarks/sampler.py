"""Samplers of a masked-diffusion run compared (docs/diffusion.md): LLaDA's fixed schedule at
several step counts, with low-confidence and random remasking, and Fast-dLLM's confidence
threshold, each at several temperatures: model calls and wall time per generated token, and the
texts' generative perplexity under a causal-LM reference run with their token entropy and
repeated 4-grams (models/sample_quality.py).

  python benchmarks/sampler.py --workdir=runs/diffusion --reference=runs/clm [--length=32]
      [--num_samples=64] [--steps=32,16,8] [--thresholds=0.9,0.7,0.5]
      [--temperatures=0.7,1.0] [--reference_temperatures=0.7,0.85,1.0] [--seed=0]

Prints one JSON line per sampler and temperature, from nothing (--num_samples texts of
--length tokens), then the reference's own samples (token by token, left to right) at
--reference_temperatures: a text's generative perplexity is read at its token entropy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position

plugins.hide()

from mlmjax.models import sample_quality  # pylint: disable=wrong-import-position
from mlmjax.inference import unmasking  # pylint: disable=wrong-import-position
from mlmjax.training import finished_run  # pylint: disable=wrong-import-position


def _floats(text: str) -> list[float]:
  return [float(x) for x in text.split(",")]


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workdir", required=True, help="the masked-diffusion (or MLM) run")
  p.add_argument("--reference", required=True, help="a causal-LM run on the same corpus")
  p.add_argument("--length", type=int, default=32)
  p.add_argument("--num_samples", type=int, default=64)
  p.add_argument("--steps", default="32,16,8")
  p.add_argument("--thresholds", default="0.9,0.7,0.5")
  p.add_argument("--temperatures", default="0.7,1.0")
  p.add_argument("--reference_temperatures", default="0.7,0.85,1.0")
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args()
  run, reference = finished_run.load(args.workdir), finished_run.load(args.reference)
  ids = unmasking.rows([run.encode_masked("")] * args.num_samples, args.length,
                       run.settings.model.max_position_embeddings)
  run.mlm_logits(ids), reference.causal_log_probs(ids)  # compiled once, outside the timing
  calls = []

  def logits_fn(x):
    calls.append(1)
    return run.mlm_logits(x)

  samplers = [{"steps": int(s), "remasking": r} for s in args.steps.split(",")
              for r in unmasking.REMASKING]
  samplers += [{"steps": 1, "threshold": t} for t in _floats(args.thresholds)]
  for temperature in _floats(args.temperatures):
    for kw in samplers:
      calls.clear()
      start = time.perf_counter()
      out, filled_at = unmasking.generate(logits_fn, ids, unmasking.Sampling(
          temperature=temperature, seed=args.seed, **kw))
      seconds = time.perf_counter() - start
      name = (f"threshold {kw['threshold']:g}" if "threshold" in kw
              else f"{kw['steps']} steps, {kw['remasking']}")
      _print(name, temperature, len(calls), out, filled_at, seconds, reference)
  # The reference's own samples, token by token (calls: --length), for entropies to match.
  for temperature in _floats(args.reference_temperatures):
    start = time.perf_counter()
    out, filled_at = unmasking.generate(reference.causal_log_probs, ids, unmasking.Sampling(
        steps=args.length, block_length=1, temperature=temperature, seed=args.seed))
    _print("causal LM (the reference)", temperature, args.length, out, filled_at,
           time.perf_counter() - start, reference)


def _print(name, temperature, calls, out, filled_at, seconds, reference):
  tokens = int((filled_at >= 0).sum())
  texts = len(out)
  print(json.dumps({
      "sampler": name, "temperature": temperature, "model_calls": calls,
      "tokens_per_text_per_call": round(tokens / calls / texts, 2),
      "ms_per_token": round(1e3 * seconds / tokens, 3),
      **{k: round(v, 4) for k, v in sample_quality.scores(reference.next_token_log_probs,
                                                          out).items()}}), flush=True)


if __name__ == "__main__":
  main()
