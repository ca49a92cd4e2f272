"""What the benchmark commands measure, without the flags: `python -m mlmjax.bench` (the train
step, the eval step, the host pipeline, input wait) and `python -m mlmjax.input_bench` (the
pipeline alone).

The train step is timed on a fixed real batch, so the host pipeline is not in its numbers; the
host pipeline is timed without a model; the input wait is that of a short real training run.
All of them measure the run's base shape (data.seq_len, train.batch_size), not its phases'.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import jax
import numpy as np

from mlmjax.data.prepared import reader
from mlmjax.models import bert
from mlmjax.models import flops
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training.planning import fit
from mlmjax.training.run import metrics
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training.run_settings import RunSettings
from mlmjax.training import train


def measure(config, timed_steps: int = 10, input_seconds: float = 3.0, loop_steps: int = 0,
            trace_dir: str = "", eval_steps: int = 0) -> dict:
  """The train step of `config` (a ConfigDict or RunSettings; `timed_steps` after 2 warm-up
  steps), with `eval_steps` > 0 the eval step on the same batch, its host pipeline for
  `input_seconds` (0: not measured) and the input wait of a `loop_steps` training run (0: not
  run), in a temporary workdir; one flat dict. With `trace_dir`, a profile trace of 3 more
  steps goes there."""
  parts = config_check.checked(config)
  with tempfile.TemporaryDirectory() as tmp:
    return _measure(parts, workdir_lib.Workdir(tmp), timed_steps, input_seconds, loop_steps,
                    trace_dir, eval_steps)


def _measure(parts: assembly.Assembly, run_dir: workdir_lib.Workdir, timed_steps: int,
             input_seconds: float, loop_steps: int, trace_dir: str, eval_steps: int) -> dict:
  inp = parts.input(run_dir.tokenizers, run_dir.vocab_stats)
  if not parts.settings.tokenizer.path and os.path.exists(run_dir.tokenizer):
    # The input and loop measurements reuse the tokenizer just trained instead of each
    # training it again.
    parts = parts.with_settings(parts.settings.replace(tokenizer={"path": run_dir.tokenizer}))
  settings = parts.settings
  vocab_size = inp.tokenizer.vocab_size
  it = inp.train_iter(parts.plan.whole_run)
  batch = it.next_masked()
  it.close()
  model = settings.model
  out = {"device": jax.devices()[0].device_kind, "platform": jax.devices()[0].platform,
         "dtype": str(np.dtype(bert.compute_dtype(model.dtype))),
         "attention_impl": model.attention_impl, "remat": model.remat,
         "scan_layers": model.scan_layers,
         "batch": settings.train.batch_size, "seq_len": settings.data.seq_len}
  out.update(_train_step(parts, vocab_size, batch, timed_steps, trace_dir, eval_steps))
  tokens = settings.train.batch_size * settings.data.seq_len
  step_s = out["step_ms_median"] / 1e3
  per_token = parts.flops_per_token(vocab_size)
  achieved = per_token * tokens / step_s
  out.update({
      "tokens_per_sec": tokens / step_s,
      "flops_per_step": per_token * tokens,
      "flops_formula": "3 x [L x (2(4D^2 + 2DF) + 4TD) + (P/T) x 2(D^2 + DV)] per token",
      "model_tflops_per_sec": achieved / 1e12,
  })
  measured = flops.measured_matmul_peak(bert.compute_dtype(model.dtype))
  rated = flops.rated_peak(jax.devices()[0], bert.compute_dtype(model.dtype))
  n = out["devices"]
  out.update({
      "matmul_peak_tflops_measured": measured * n / 1e12,
      "mfu_measured_peak": achieved / (measured * n),
      "rated_peak_tflops": None if rated is None else rated * n / 1e12,
      "mfu_rated_peak": None if rated is None else achieved / (rated * n),
  })
  if input_seconds > 0:
    out.update(_input(parts, input_seconds))
  if loop_steps > 0:
    out["input_wait_fraction"] = _input_wait(settings, loop_steps)
  return out


def _train_step(parts: assembly.Assembly, vocab_size: int, batch, timed_steps: int,
                trace_dir: str, eval_steps: int) -> dict:
  mesh = sharding.make_mesh(parts.settings.mesh)
  setup = parts.setup(vocab_size, mesh)
  step = parts.train_step(setup)
  state = setup.init_fn()
  batch = sharding.to_device(batch, mesh)
  t = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - t

  def train_step():
    nonlocal state
    state, out = compiled(state, batch)
    return out

  times = _timed(train_step, timed_steps)
  if trace_dir:
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      jax.block_until_ready([train_step() for _ in range(3)])
  stats = jax.devices()[0].memory_stats() or {}
  out = {
      "parameters": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["params"])),
      "devices": mesh.size, "mesh": dict(mesh.shape),
      "step_ms_median": 1e3 * statistics.median(times), "step_ms_min": 1e3 * min(times),
      "compile_s": compile_s,
      "compiled_memory_bytes_per_device": fit.memory_bytes(compiled)["total"],
      "peak_memory_bytes": stats.get("peak_bytes_in_use"),  # accelerators only
  }
  if eval_steps:
    # The held-out step (assembly's eval_step: forward, metric sums) on the same batch.
    evaluate = parts.eval_step(setup).lower(state["params"], batch).compile()
    times = _timed(lambda: evaluate(state["params"], batch), eval_steps)
    out.update({"eval_step_ms_median": 1e3 * statistics.median(times),
                "eval_compiled_memory_bytes_per_device": fit.memory_bytes(evaluate)["total"]})
  return out


def _timed(step, timed_steps: int) -> list[float]:
  """Seconds per call of `step` (which returns arrays to wait for), after 2 warm-up calls (the
  first allocates), in rounds. Calls are dispatched back to back as the training loop does,
  the host waiting once per round of several: a wait after every call adds the next one's
  launch to every call (4.7 of BERT-base's 65 ms on an H100, seen in a profile trace)."""
  jax.block_until_ready([step(), step()])
  per_round = max(1, timed_steps // 5)
  times = []
  for _ in range(max(1, timed_steps // per_round)):
    t = time.perf_counter()
    jax.block_until_ready([step() for _ in range(per_round)])
    times.append((time.perf_counter() - t) / per_round)
  return times


def _input(parts: assembly.Assembly, seconds: float) -> dict:
  """Input tokens/s alone: the run's, and with prepared data also its text's."""
  data = parts.settings.data
  out = {"input_tokens_per_sec": input_throughput(parts, seconds)["tokens_per_sec"],
         "input": f"{data.source}, {data.format}, {parts.settings.masking.strategy},"
                  f" {data.worker_count} workers"}
  raw = raw_text(parts)
  if raw is not None:
    out["input_raw_tokens_per_sec"] = input_throughput(raw, seconds)["tokens_per_sec"]
  return out


def _input_wait(settings: RunSettings, steps_run: int) -> float:
  """The fraction of wall time a real training run of `steps_run` steps (in a temporary
  workdir) waits for input, after its first logging interval (which holds the compilation)."""
  short = settings.replace(train={"steps": steps_run, "log_every_steps": max(1, steps_run // 5),
                           "eval_every_steps": steps_run, "eval_batches": 1,
                           "checkpoint_every_steps": steps_run})
  with tempfile.TemporaryDirectory() as tmp:
    train.train_and_evaluate(short, tmp)
    waits = [r["input_wait_fraction"] for r in metrics.rows(os.path.join(tmp, "metrics.jsonl"))
             if "input_wait_fraction" in r]
  return statistics.mean(waits[1:] or waits)


def input_throughput(parts: assembly.Assembly, seconds: float = 3.0) -> dict:
  """Batches of the run's training input made for `seconds` in this process (and its grain
  workers, if `data.worker_count` > 0), after one warm-up batch (worker start-up, the first
  window). Tokenizer and stats come from the settings or the prepared data, as in a run."""
  with tempfile.TemporaryDirectory() as tmp:
    run_dir = workdir_lib.Workdir(tmp)
    inp = parts.input(run_dir.tokenizers, run_dir.vocab_stats)
  it = inp.train_iter(parts.plan.whole_run)
  try:
    next(it)
    tokens = real = batches = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
      batch = it.next_masked()
      tokens += batch["input_ids"].size
      real += int((batch["segment_ids"] > 0).sum())
      batches += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
  finally:
    it.close()
  data = parts.settings.data
  out = {"source": data.source, "format": data.format,
         "strategy": parts.settings.masking.strategy,
         "seq_len": data.seq_len, "batch_size": parts.settings.train.batch_size,
         "worker_count": data.worker_count, "batches": batches,
         "tokens_per_sec": round(tokens / elapsed), "real_tokens_per_sec": round(real / elapsed)}
  if not data.worker_count:  # this process did all the work: its CPU time ignores other load
    out["tokens_per_cpu_sec"] = round(tokens / cpu)
  return out


def raw_text(parts: assembly.Assembly) -> assembly.Assembly | None:
  """With prepared data, the same run reading the text it was prepared from with the same
  tokenizer (the cost of tokenizing every epoch); else None."""
  if not reader.is_prepared(parts.settings.data.source):
    return None
  data = reader.open_source(parts.settings.data.source)
  return parts.with_settings(parts.settings.replace(data={"source": data.manifest["source"]},
                                                    tokenizer={"path": data.tokenizer_path}))
