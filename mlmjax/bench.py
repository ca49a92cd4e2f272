"""Benchmarks that print numbers: one JSON line per run.

  python -m mlmjax.bench --config=configs/bert.py:base [--steps=10] [--config.model.dtype=...]

Reports the train step (median and best step time, tokens/s, FLOPs per step and the formula,
MFU against this machine's measured matmul peak and the device's rated peak where known,
compile time, memory), the host pipeline alone (tokens/s of batches with fresh masks, with the
config's data.worker_count; for prepared data also of the raw text it came from), and, with
--loop_steps, the fraction of a short real training run spent waiting for input. The step is
timed on a fixed real batch, so the host pipeline is not in its numbers.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import tempfile
import time

from absl import app
from absl import flags
import jax
import numpy as np
from ml_collections import config_flags

from mlmjax.training import config_check
from mlmjax.models import flops
from mlmjax.training import metrics
from mlmjax.models import bert as model_lib
from mlmjax.parallel import sharding
from mlmjax.training import steps as steps_lib
from mlmjax.training import train
from mlmjax.training import workdir as workdir_lib
from mlmjax.data import run_input as input_lib
from mlmjax.data import throughput

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 10, "Timed train steps (after 2 warm-up steps).")
_INPUT_SECONDS = flags.DEFINE_float("input_seconds", 3.0,
                                    "How long to time the host pipeline alone (0: skip).")
_LOOP_STEPS = flags.DEFINE_integer("loop_steps", 0, "Steps of a real training run whose input-"
                                   "wait fraction is reported (0: skip).")


def _input(config, seconds: float) -> dict:
  """Input tokens/s alone: the config's, and with prepared data also its text's."""
  out = {"input_tokens_per_sec": throughput.input_throughput(config, seconds)["tokens_per_sec"],
         "input": f"{config.data.source}, {config.data.format}, {config.masking.strategy},"
                  f" {config.data.worker_count} workers"}
  raw = throughput.raw_text_config(config)
  if raw is not None:
    out["input_raw_tokens_per_sec"] = throughput.input_throughput(raw, seconds)["tokens_per_sec"]
  return out


def _input_wait(config, steps: int) -> float:
  """The fraction of wall time a real training run of `steps` steps (in a temporary workdir)
  waits for input, after its first logging interval (which holds the compilation)."""
  c = copy.deepcopy(config)
  c.train.update(steps=steps, log_every_steps=max(1, steps // 5), eval_every_steps=steps,
                 eval_batches=1, checkpoint_every_steps=steps)
  with tempfile.TemporaryDirectory() as tmp:
    train.train_and_evaluate(c, tmp)
    waits = [r["input_wait_fraction"] for r in metrics.rows(os.path.join(tmp, "metrics.jsonl"))
             if "input_wait_fraction" in r]
  return statistics.mean(waits[1:] or waits)


def _train_step(config, vocab_size: int, batch) -> dict:
  mesh = sharding.make_mesh(config.mesh)
  setup = steps_lib.make_setup(config, vocab_size, mesh)
  step = steps_lib.make_train_step(setup, config)
  state = setup.init_fn()
  batch = sharding.to_device(batch, mesh)
  t = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - t
  m = compiled.memory_analysis()
  state, out = compiled(state, batch)  # warm-up: first run allocates
  state, out = compiled(state, batch)
  jax.block_until_ready(out)
  times = []
  for _ in range(_STEPS.value):
    t = time.perf_counter()
    state, out = compiled(state, batch)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t)
  stats = jax.devices()[0].memory_stats() or {}
  return {
      "parameters": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["params"])),
      "devices": mesh.size, "mesh": dict(mesh.shape),
      "step_ms_median": 1e3 * statistics.median(times), "step_ms_min": 1e3 * min(times),
      "compile_s": compile_s,
      "compiled_memory_bytes_per_device": int(
          m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes) if m is not None else None,
      "peak_memory_bytes": stats.get("peak_bytes_in_use"),  # accelerators only
  }


def run(config) -> dict:
  config_check.check(config)
  with tempfile.TemporaryDirectory() as tmp:
    return _measure(config, workdir_lib.Workdir(tmp))


def _measure(config, run_dir: workdir_lib.Workdir) -> dict:
  inp = input_lib.build(config, run_dir.tokenizers, run_dir.vocab_stats)
  if not config.tokenizer.path and os.path.exists(run_dir.tokenizer):
    # The input and loop measurements reuse the tokenizer just trained instead of each
    # training it again.
    config = copy.deepcopy(config)
    config.tokenizer.path = run_dir.tokenizer
  vocab_size = inp.tokenizer.vocab_size
  it = inp.train_iter(config)
  batch = next(it)
  it.close()
  out = {"config": config_flags.get_config_filename(flags.FLAGS["config"]),
         "device": jax.devices()[0].device_kind, "platform": jax.devices()[0].platform,
         "dtype": str(np.dtype(model_lib.compute_dtype(config.model.dtype))),
         "attention_impl": config.model.attention_impl, "remat": config.model.remat,
         "scan_layers": config.model.scan_layers,
         "batch": config.train.batch_size, "seq_len": config.data.seq_len}
  out.update(_train_step(config, vocab_size, batch))
  tokens = config.train.batch_size * config.data.seq_len
  step_s = out["step_ms_median"] / 1e3
  per_token = flops.train_flops_per_token(config, vocab_size)
  achieved = per_token * tokens / step_s
  out.update({
      "tokens_per_sec": tokens / step_s,
      "flops_per_step": per_token * tokens,
      "flops_formula": "3 x [L x (2(4D^2 + 2DF) + 4TD) + (P/T) x 2(D^2 + DV)] per token",
      "model_tflops_per_sec": achieved / 1e12,
  })
  measured = flops.measured_matmul_peak(model_lib.compute_dtype(config.model.dtype))
  rated = flops.rated_peak(jax.devices()[0], model_lib.compute_dtype(config.model.dtype))
  n = out["devices"]
  out.update({
      "matmul_peak_tflops_measured": measured * n / 1e12,
      "mfu_measured_peak": achieved / (measured * n),
      "rated_peak_tflops": None if rated is None else rated * n / 1e12,
      "mfu_rated_peak": None if rated is None else achieved / (rated * n),
  })
  if _INPUT_SECONDS.value > 0:
    out.update(_input(config, _INPUT_SECONDS.value))
  if _LOOP_STEPS.value > 0:
    out["input_wait_fraction"] = _input_wait(config, _LOOP_STEPS.value)
  return out


def main(argv):
  del argv
  metrics.quiet_library_logs()
  print(json.dumps(run(_CONFIG.value)), flush=True)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
