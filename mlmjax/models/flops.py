"""Model FLOPs per token and device peaks: what MFU is measured against.

Training FLOPs per token (forward + backward = 3 x forward, multiply-adds counted as 2):

    3 x [ L x 2 (4 D^2 + k D F)                 projections (k = 2, or 3 for a gated MLP)
          + sum over layers of 4 C D            attention scores and context, C keys per query
          + (P / T) x 2 (D^2 + D V) ]           MLM head on the P masked slots of a row only

for L layers, hidden D, MLP F, T tokens per row (C = T, or min(T, W + 1) on a local layer of
window W), P prediction slots, V vocabulary. Embedding
lookups, LayerNorms, softmax and the NSP head are left out (under 1% at BERT sizes). This is
the "model FLOPs" of MFU (PaLM, appendix B): rematerialised recomputation does not count.

Peaks: a device's rated dense peak where known (datasheets, per chip: models/chip_rates.py),
and one measured here (`measured_matmul_peak`): the best rate of a large matmul, which is what
"MFU against this machine" means on a CPU, where no datasheet number applies.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

from mlmjax.models import chip_rates
from mlmjax.models.settings import ModelSettings

def _keys(m: ModelSettings, t: int) -> int:
  """Keys per query summed over the layers (a local layer sees its window)."""
  global_layers = m.num_layers
  if m.local_attention_window:
    global_layers = len(range(0, m.num_layers, m.global_attention_every))
  return global_layers * t + (m.num_layers - global_layers) * min(t, m.local_attention_window + 1)


def _encoder(m: ModelSettings, t: int) -> float:
  """Forward FLOPs per token of one encoder stack."""
  d, f = m.hidden_size, m.intermediate_size
  projections = 2 * (4 * d * d + (2 if m.mlp == "gelu" else 3) * d * f)
  return m.num_layers * projections + attention_flops_per_token(m, t)


def attention_flops_per_token(m: ModelSettings, seq_len: int,
                              generator_fraction: float | None = None) -> float:
  """Forward FLOPs per token of attention's scores and context alone (4 C D a layer), of both
  stacks with an ELECTRA `generator_fraction`: what a fused attention kernel computes."""
  own = 4 * _keys(m, seq_len) * m.hidden_size
  if generator_fraction is None:
    return own
  from mlmjax.models import electra  # pylint: disable=g-import-not-at-top
  g = electra.generator_settings(m, generator_fraction)
  return own + 4 * _keys(g, seq_len) * g.hidden_size


def encoder_flops_per_token(m: ModelSettings, seq_len: int) -> float:
  """Forward FLOPs per token of the encoder stack alone (all its layers)."""
  return _encoder(m, seq_len)


def train_flops_per_token(m: ModelSettings, vocab_size: int, seq_len: int,
                          max_predictions: int, generator_fraction: float | None = None
                          ) -> float:
  """The formula above, for model `m` at a row length with `max_predictions` slots. With a
  `generator_fraction`, ELECTRA: the generator's stack and MLM head (at its width) plus the
  discriminator's stack and its per-token head, 2 (D^2 + D)."""
  t, p = seq_len, max_predictions
  if generator_fraction is None:
    d = m.hidden_size
    return 3 * (_encoder(m, t) + p / t * 2 * (d * d + d * vocab_size))
  from mlmjax.models import electra  # pylint: disable=g-import-not-at-top
  g = electra.generator_settings(m, generator_fraction)
  e, d, dg = m.embedding_size or m.hidden_size, m.hidden_size, g.hidden_size
  projections = 2 * e * (d * (e != d) + dg * (e != dg))
  generator_head = p / t * 2 * (dg * e + e * vocab_size)
  return 3 * (_encoder(g, t) + generator_head + _encoder(m, t) + 2 * (d * d + d) + projections)


def rated_peak(device: jax.Device, dtype) -> float | None:
  """FLOP/s of one chip at the compute dtype from its datasheet (models/chip_rates.py), or
  None if unknown."""
  rates = chip_rates.find(device.device_kind)
  return None if rates is None else rates.peak_flops(dtype)


@functools.lru_cache(maxsize=None)
def measured_matmul_peak(dtype=jnp.float32, n: int | None = None, repeats: int = 5) -> float:
  """Best achieved FLOP/s of an n x n matmul on the default device. Default n: 1024 on CPU,
  8192 on accelerators (2048 leaves an H100 half idle). On a CPU 1024 already reaches the rate
  of 2048 (298 against 292 GFLOP/s on this project's 2-core CPU, float32) in a sixth of the
  time that every CPU run pays at its start (0.07 against 0.42 s). Random operands: zeros and
  ones multiply faster than real data on some GPUs."""
  n = n or (1024 if jax.default_backend() == "cpu" else 8192)
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * n**3 / best
