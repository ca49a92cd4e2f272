"""Input throughput: how fast a run's input makes masked training batches, without a model.

  python -m mlmjax.input_bench --config=tiny \\
      --config.data.source=prepared:data/kjv [--seconds=5] [--raw_too]

prints one JSON line per measurement: tokens/s of finished (packed, masked) batches counting
every position (`tokens_per_sec`, what the device consumes) and only real tokens
(`real_tokens_per_sec`, padding excluded), for the config's format, strategy, seq_len, batch
size and `data.worker_count` (0: one process; then also `tokens_per_cpu_sec`, per second of
this process's CPU time, which other load on a shared machine does not change). `--raw_too`
with prepared data measures the text it was prepared from as well, with the same tokenizer:
the cost of tokenizing every epoch.
The measuring itself is in training/benchmark.py (the benchmark command uses it too).
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import json

from absl import flags

from mlmjax import cli
from mlmjax.training import benchmark
from mlmjax.training import config_check

_CONFIG = cli.define_config_file()
_SECONDS = flags.DEFINE_float("seconds", 5.0, "Measured time, after one warm-up batch.")
_RAW_TOO = flags.DEFINE_bool("raw_too", False, "With prepared data, also measure its text.")


def main(argv):
  del argv
  parts = config_check.checked(_CONFIG.value)
  raw = benchmark.raw_text(parts) if _RAW_TOO.value else None
  for s in [parts] + ([raw] if raw is not None else []):
    print(json.dumps(benchmark.input_throughput(s, _SECONDS.value)), flush=True)


if __name__ == "__main__":
  cli.run(main, required=("config",))
