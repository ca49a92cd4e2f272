"""Benchmarks that print numbers: train-step tokens/s and MFU, host-pipeline tokens/s.

  python -m mlmjax.bench --config=configs/tiny.py [--steps=20] [--config.model.hidden_size=...]

MFU is measured against this machine's own matmul peak (a large float32/bfloat16 matmul timed
here), not a datasheet number, so it is meaningful on a laptop CPU as well as on a TPU.
"""

from __future__ import annotations

import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import config_flags

from mlmjax import config_check
from mlmjax import sharding
from mlmjax import steps as steps_lib
from mlmjax import workdir as workdir_lib
from mlmjax.data import input as input_lib

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 20, "Timed train steps (after 2 warm-up steps).")


def matmul_peak_flops(dtype=jnp.float32, n: int = 2048, repeats: int = 5) -> float:
  """Best achieved FLOP/s of an n x n matmul on the default device."""
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * n**3 / best


def train_flops_per_token(config, vocab_size: int) -> float:
  """Model FLOPs (forward + backward = 3x forward) per input token, masked-only MLM head."""
  m, t = config.model, config.data.seq_len
  d, f, layers = m.hidden_size, m.intermediate_size, m.num_layers
  per_layer = 2 * (4 * d * d + 2 * d * f) + 2 * 2 * t * d  # projections + scores/context
  head = config.masking.max_predictions_per_seq / t * 2 * (d * d + d * vocab_size)
  return 3 * (layers * per_layer + head)


def main(argv):
  del argv
  config = _CONFIG.value
  config_check.check(config)
  with tempfile.TemporaryDirectory() as tmp:
    run = workdir_lib.Workdir(tmp)
    inp = input_lib.build(config, run.tokenizers, run.vocab_stats)
  tok = inp.tokenizer

  # Host pipeline alone: read, split, tokenize, pack/pair, mask (config.masking.strategy).
  it = inp.train_iter(config)
  next(it)
  t = time.perf_counter()
  n = 0
  while time.perf_counter() - t < 3.0:
    n += next(it)["input_ids"].size
  host_tps = n / (time.perf_counter() - t)

  # Train step on a fixed batch (device throughput, excluding the host pipeline).
  mesh = sharding.make_mesh(config.mesh)
  setup = steps_lib.make_setup(config, tok.vocab_size, mesh)
  step = steps_lib.make_train_step(setup, config)
  state = setup.init_fn()
  batch = sharding.to_device(next(it), mesh)
  for _ in range(2):
    state, m = step(state, batch)
  jax.block_until_ready(m)
  t = time.perf_counter()
  for _ in range(_STEPS.value):
    state, m = step(state, batch)
  jax.block_until_ready(m)
  sec = (time.perf_counter() - t) / _STEPS.value

  tokens = config.train.batch_size * config.data.seq_len
  flops = train_flops_per_token(config, tok.vocab_size) * tokens / sec
  peak = matmul_peak_flops(jnp.dtype(config.model.dtype)) * mesh.size
  params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["params"]))
  print(f"device            {jax.devices()[0].device_kind} x{mesh.size}")
  print(f"parameters        {params:,}")
  print(f"step time         {sec * 1e3:.1f} ms"
        f" (batch {config.train.batch_size} x {config.data.seq_len})")
  print(f"train tokens/s    {tokens / sec:,.0f}")
  print(f"model TFLOP/s     {flops / 1e12:.3f}")
  print(f"matmul peak       {peak / 1e12:.3f} TFLOP/s ({config.model.dtype}, measured)")
  print(f"MFU               {100 * flops / peak:.1f}%")
  print(f"host pipeline     {host_tps:,.0f} tokens/s (one process, {config.data.format},"
        f" {config.masking.strategy} masking)")
  if jax.devices()[0].platform != "cpu":
    peak_bytes = jax.devices()[0].memory_stats().get("peak_bytes_in_use", 0)
    print(f"peak memory       {peak_bytes / 2**30:.2f} GiB")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
