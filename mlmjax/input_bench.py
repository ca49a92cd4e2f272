"""Input throughput: how fast a run's input makes masked training batches, without a model.

  python -m mlmjax.input_bench --config=configs/tiny.py \
      --config.data.source=prepared:data/kjv [--seconds=5] [--raw_too]

prints one JSON line per measurement: tokens/s of finished (packed, masked) batches counting
every position (`tokens_per_sec`, what the device consumes) and only real tokens
(`real_tokens_per_sec`, padding excluded), for the config's format, strategy, seq_len, batch
size and `data.worker_count` (0: one process; then also `tokens_per_cpu_sec`, per second of
this process's CPU time, which other load on a shared machine does not change). `--raw_too`
with prepared data measures the text it was prepared from as well, with the same tokenizer:
the cost of tokenizing every epoch.
`input_throughput` is the function the benchmark command calls.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time

from absl import app
from absl import flags
from ml_collections import config_flags

from mlmjax import config_check
from mlmjax import workdir as workdir_lib
from mlmjax.data import input as input_lib
from mlmjax.data import prepared

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_SECONDS = flags.DEFINE_float("seconds", 5.0, "Measured time, after one warm-up batch.")
_RAW_TOO = flags.DEFINE_bool("raw_too", False, "With prepared data, also measure its text.")


def input_throughput(config, seconds: float = 3.0) -> dict:
  """Batches of `config`'s training input made for `seconds` in this process (and its grain
  workers, if `data.worker_count` > 0), after one warm-up batch (worker start-up, the first
  window). Tokenizer and stats come from `config` or the prepared data, as in a run."""
  with tempfile.TemporaryDirectory() as tmp:
    run = workdir_lib.Workdir(tmp)
    inp = input_lib.build(config, run.tokenizers, run.vocab_stats)
  it = inp.train_iter(config)
  try:
    next(it)
    tokens = real = batches = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
      batch = next(it)
      tokens += batch["input_ids"].size
      real += int((batch["segment_ids"] > 0).sum())
      batches += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
  finally:
    it.close()
  d = config.data
  out = {"source": d.source, "format": d.format, "strategy": config.masking.strategy,
         "seq_len": d.seq_len, "batch_size": config.train.batch_size,
         "worker_count": d.worker_count, "batches": batches,
         "tokens_per_sec": round(tokens / elapsed), "real_tokens_per_sec": round(real / elapsed)}
  if not d.worker_count:  # this process did all the work: its CPU time ignores other load
    out["tokens_per_cpu_sec"] = round(tokens / cpu)
  return out


def main(argv):
  del argv
  config = _CONFIG.value
  config_check.check(config)
  configs = [config]
  if _RAW_TOO.value and prepared.is_prepared(config.data.source):
    data = prepared.open_source(config.data.source)
    raw = copy.deepcopy(config)
    raw.data.source = data.manifest["source"]
    raw.tokenizer.path = data.tokenizer_path
    configs.append(raw)
  for c in configs:
    print(json.dumps(input_throughput(c, _SECONDS.value)), flush=True)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
