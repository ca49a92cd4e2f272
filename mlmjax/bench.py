"""Benchmarks that print numbers: one JSON line per run.

  python -m mlmjax.bench --config=bert:base [--steps=10] [--config.model.dtype=...]

Reports the train step (median and best step time, tokens/s, FLOPs per step and the formula,
MFU against this machine's measured matmul peak and the device's rated peak where known,
compile time, memory), with --eval_steps the eval step on the same batch (time, memory), the
host pipeline alone (tokens/s of batches with fresh masks, with the config's
data.worker_count; for prepared data also of the raw text it came from), and, with
--loop_steps, the fraction of a short real training run spent waiting for input; --trace=DIR
keeps a profile trace of three steps. The step is timed on a fixed real batch, so the host
pipeline is not in its numbers.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import json

from absl import flags
from ml_collections import config_flags

from mlmjax import cli
from mlmjax.training import benchmark
from mlmjax.training.run import metrics

_CONFIG = cli.define_config_file()
_STEPS = flags.DEFINE_integer("steps", 10, "Timed train steps (after 2 warm-up steps).")
_EVAL_STEPS = flags.DEFINE_integer("eval_steps", 0, "Timed eval steps (forward and held-out"
                                   " metrics) on the train step's batch (0: skip).")
_INPUT_SECONDS = flags.DEFINE_float("input_seconds", 3.0,
                                    "How long to time the host pipeline alone (0: skip).")
_LOOP_STEPS = flags.DEFINE_integer("loop_steps", 0, "Steps of a real training run whose input-"
                                   "wait fraction is reported (0: skip).")
_TRACE = flags.DEFINE_string("trace", "", "Folder for a profile trace of 3 more steps after the"
                             " timed ones (TensorBoard's xplane.pb and Perfetto's trace.json.gz).")


def main(argv):
  del argv
  metrics.quiet_library_logs()
  out = {"config": config_flags.get_config_filename(flags.FLAGS["config"]),
         **benchmark.measure(_CONFIG.value, _STEPS.value, _INPUT_SECONDS.value, _LOOP_STEPS.value,
                            _TRACE.value, _EVAL_STEPS.value)}
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  cli.run(main, required=("config",))
