"""Held-out MLM metrics of a run's checkpoint, printed as one JSON object.

  python -m mlmjax.evaluate --workdir=runs/tiny [--source=more_text.txt] [--step=N]
      [--strategy=random] [--mask_rate=0.5] [--bound_samples=4]

Without --source it scores the run's own held-out split, exactly as training's evaluations do
(the same fixed batches and masks); with --source, every document of that text (the syntax of
config.data.source). Masking is at `eval.mask_rate` (15% unless the run set it; --mask_rate
overrides), whatever rate the run trained at, so runs compare; with the run's own masking
strategy, or --strategy's (random: runs trained with different strategies compare). Prints
loss, accuracy, perplexity, accuracy on [MASK] inputs, the constant-prediction baseline and,
for pair formats, the NSP/SOP loss and accuracy.

With --bound_samples=K (by default 4 for a run whose last phase is masked diffusion, else 0),
also masked diffusion's variational bound on the negative log-likelihood, per maskable token
(`diffusion_bound` in nats, `bits_per_token`): the same held-out rows masked K times as the
diffusion objective masks (a rate per document, data/masking/diffusion.py), averaged: a Monte
Carlo estimate over the rate. Any run can be scored so, an MLM run's too. The library:
mlmjax/inference/evaluation.py.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import json

from absl import flags

from mlmjax import cli
from mlmjax.inference.evaluation import evaluate
from mlmjax.training.run import metrics as metrics_lib

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's workdir.")
_SOURCE = flags.DEFINE_string(
    "source", "", "Text to score instead of the run's held-out split: every document of it"
    " (builtin, .txt/.jsonl files or globs, tfds:NAME[:SPLIT[:FEATURE]]).")
_STEP = flags.DEFINE_integer("step", None, "The checkpoint to score (default: the latest).")
_MASK_RATE = flags.DEFINE_float("mask_rate", None,
                                "Mask rate (default: the run's eval.mask_rate, else 0.15).")
_BATCHES = flags.DEFINE_integer("batches", None,
                                "Batches to score (default: the run's train.eval_batches).")
_STRATEGY = flags.DEFINE_string("strategy", None, "Masking strategy to score with (default: the"
                                " run's); e.g. random, so runs trained with different strategies"
                                " compare.")
_BOUND_SAMPLES = flags.DEFINE_integer(
    "bound_samples", None, "Monte Carlo samples of the diffusion bound (default: 4 for a"
    " diffusion run, else 0: none).", lower_bound=0)


def main(argv):
  del argv
  metrics_lib.quiet_library_logs()
  print(json.dumps(evaluate(_WORKDIR.value, _SOURCE.value, _STEP.value, _MASK_RATE.value,
                            _BATCHES.value, _STRATEGY.value, _BOUND_SAMPLES.value), indent=2))


if __name__ == "__main__":
  cli.run(main, required=("workdir",))
