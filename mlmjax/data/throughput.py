"""How fast a run's input makes masked training batches, without a model: what
`python -m mlmjax.input_bench` and `python -m mlmjax.bench` print."""

from __future__ import annotations

import copy
import tempfile
import time

from mlmjax.training import workdir as workdir_lib
from mlmjax.data import run_input as input_lib
from mlmjax.data import prepared


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


def raw_text_config(config):
  """With prepared data, the same config reading the text it was prepared from with the same
  tokenizer (the cost of tokenizing every epoch); else None."""
  if not prepared.is_prepared(config.data.source):
    return None
  data = prepared.open_source(config.data.source)
  raw = copy.deepcopy(config)
  raw.data.source = data.manifest["source"]
  raw.tokenizer.path = data.tokenizer_path
  return raw
