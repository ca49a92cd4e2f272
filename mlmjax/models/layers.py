"""The building blocks of the encoder, in Flax NNX: parameters, dropout, LayerNorm, Dense,
rotary embeddings, self-attention and the transformer block.

Shapes: B batch rows, T tokens per row, D hidden, N heads, H head size, F MLP size.
Every parameter is an `nnx.Param` carrying `axes`: logical axis names that sharding.py maps to
mesh axes. Modules hold no RNG state; dropout keys are passed per call, so the train step can
work on plain pytrees (`nnx.split` once, `nnx.merge` inside jit).

Mixed precision: parameters stay float32 (the optimizer's master copy); activations are in the
compute dtype `x.dtype` (bfloat16 on accelerators), weights are cast to it at use, and the
numerically delicate parts are float32 whatever it is: LayerNorm statistics, attention scores
and softmax (attention.py), the rotation of rotary embeddings, MLM logits and losses.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.models import attention
from mlmjax.models import compile_target
from mlmjax.models.settings import ModelSettings


def param(rngs: nnx.Rngs | None, shape: tuple[int, ...], axes: tuple[str | None, ...],
          init: str, std: float = 0.02) -> nnx.Param:
  if init == "normal":
    value = std * jax.random.truncated_normal(rngs.params(), -2.0, 2.0, shape, jnp.float32)
  elif init == "zeros":
    value = jnp.zeros(shape, jnp.float32)
  else:  # ones
    value = jnp.ones(shape, jnp.float32)
  return nnx.Param(value, axes=axes)


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  """Inverted dropout; identity when `key` is None (eval) or rate is 0."""
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


class LayerNorm(nnx.Module):
  """LayerNorm with float32 statistics; model.layer_norm_backward picks its gradient: `fused`
  (layer_norm below: one pass) or `autodiff` (jax's, of the same forward); `auto`: fused on
  TPU and GPU, jax's on CPU (`target`: the mesh the model is built for, compile_target.py)."""

  def __init__(self, dim: int, cfg: ModelSettings, target: compile_target.Target | None = None):
    self.scale = param(None, (dim,), ("embed",), "ones")
    self.bias = param(None, (dim,), ("embed",), "zeros") if cfg.use_bias else None
    self.eps = cfg.layer_norm_eps
    self.fused = fused_layer_norm(cfg.layer_norm_backward, compile_target.platform(target))

  def __call__(self, x):
    bias = None if self.bias is None else self.bias[...]
    if self.fused:
      return layer_norm(x, self.scale[...], bias, self.eps)
    return _layer_norm(x, self.scale[...], bias, self.eps)[0]


def fused_layer_norm(backward: str, platform: str) -> bool:
  """model.layer_norm_backward on `platform`. 'auto' is the written-out backward where it was
  predicted faster (TPU, GPU: fewer bytes and kernels, docs/performance.md) and jax's own on
  CPU, where the written-out one made a BERT-base step 1.7-2.1x slower (mlmjax.bench)."""
  return backward == "fused" or (backward == "auto" and platform != "cpu")


def _layer_norm(x, scale, bias, eps):
  """(y in x's dtype, what the backward needs: x, its mean and 1/std in float32)."""
  x32 = x.astype(jnp.float32)  # statistics in float32 even when activations are bf16
  mean = x32.mean(-1, keepdims=True)
  rstd = jax.lax.rsqrt(jnp.square(x32 - mean).mean(-1, keepdims=True) + eps)
  y = (x32 - mean) * rstd * scale
  return (y if bias is None else y + bias).astype(x.dtype), (x, mean, rstd, scale, bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x, scale, bias, eps):
  """LayerNorm whose backward is written out: jax's own differentiates the statistics step by
  step and keeps float32 copies of the activations for it; this keeps x (in its dtype) and two
  numbers a row, and computes dx, dscale and dbias in one pass (fewer kernels and bytes, and
  less memory: docs/performance.md)."""
  return _layer_norm(x, scale, bias, eps)[0]


def _layer_norm_backward(eps, saved, dy):
  del eps
  x, mean, rstd, scale, bias = saved
  xhat = (x.astype(jnp.float32) - mean) * rstd
  dy32 = dy.astype(jnp.float32)
  dxhat = dy32 * scale
  # d/dx of (x - mean) * rstd: the gradient less its mean and its projection on xhat.
  dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
               - xhat * (dxhat * xhat).mean(-1, keepdims=True))
  rows = tuple(range(dy.ndim - 1))
  dbias = None if bias is None else dy32.sum(rows)
  return dx.astype(x.dtype), (dy32 * xhat).sum(rows), dbias


layer_norm.defvjp(_layer_norm, _layer_norm_backward)


class Dense(nnx.Module):
  """x @ kernel [+ bias]; a kernel of more than two dimensions maps the last axis of x to the
  remaining ones (e.g. a GLU's [D, 2, F])."""

  def __init__(self, rngs, shape: tuple[int, ...], axes: tuple[str | None, ...], std: float,
               bias: bool = True):
    self.kernel = param(rngs, shape, axes, "normal", std)
    self.bias = param(None, shape[1:], axes[1:], "zeros") if bias else None

  def __call__(self, x):
    w = self.kernel[...].astype(x.dtype)
    y = (x @ w.reshape(w.shape[0], -1)).reshape(*x.shape[:-1], *w.shape[1:])
    return y if self.bias is None else y + self.bias[...].astype(x.dtype)


def rope_angles(positions_bt: jax.Array, head_size: int, max_positions: int,
                base: float = 10000.0):
  """(cos, sin) [B, T, 1, H/2] of rotary embeddings (RoFormer, ModernBERT), computed once per
  forward pass and shared by every layer.

  Looked up in a [max_positions, H/2] table built in numpy: computing cos/sin in the graph made
  XLA-CPU re-evaluate the transcendentals inside every fused consumer, forward and backward,
  which cost a quarter of the tiny model's step (about 210 -> 165 ms with mlmjax.bench)."""
  inv_freq = base ** (-np.arange(head_size // 2, dtype=np.float64) / (head_size // 2))
  angle = np.arange(max_positions, dtype=np.float64)[:, None] * inv_freq  # [P, H/2]
  cos, sin = (jnp.asarray(f(angle), jnp.float32)[positions_bt][:, :, None, :]
              for f in (np.cos, np.sin))
  return cos, sin


def apply_rope(x_btnh: jax.Array, rope) -> jax.Array:
  """Rotate-half form: rotates each (i, i + H/2) pair of a head by position * base^(-2i/H),
  so the q.k of two tokens depends only on their offset t - s."""
  cos, sin = rope
  h = x_btnh.shape[-1] // 2
  x1, x2 = x_btnh[..., :h].astype(jnp.float32), x_btnh[..., h:].astype(jnp.float32)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x_btnh.dtype)


class SelfAttention(nnx.Module):
  """Fused q/k/v projection, a kernel from attention.py, the output projection.

  The q/k/v kernel is stored [3, D, N, H] (named axes for sharding) and used as one [D, 3NH]
  matmul, which XLA lays out without transposes of the activations."""

  def __init__(self, cfg: ModelSettings, rngs, target: compile_target.Target | None = None):
    d, n = cfg.hidden_size, cfg.num_heads
    h = d // n
    std = cfg.initializer_range
    self.qkv_kernel = param(rngs, (3, d, n, h), (None, "embed", "heads", "kv"), "normal", std)
    self.qkv_bias = param(None, (3, n, h), (None, "heads", "kv"), "zeros") if cfg.use_bias else None
    self.out_kernel = param(rngs, (n, h, d), ("heads", "kv", "embed"), "normal", std)
    self.out_bias = param(None, (d,), ("embed",), "zeros") if cfg.use_bias else None
    self.attention_dropout = cfg.attention_dropout_rate
    self.impl = cfg.attention_impl
    self.window = cfg.local_attention_window
    self.target = target  # the mesh the kernels run on (compile_target.py)
    # Set on a model copy for the causal-LM objective (bert.py next_token_logits): part of the
    # graph, not of the parameters, so the same weights serve both objectives.
    self.causal = False

  def __call__(self, x_btd, segment_ids, key, rope=None, local=False):
    dt = x_btd.dtype
    b, t, d = x_btd.shape
    _, _, n, h = self.qkv_kernel.shape
    w = jnp.moveaxis(self.qkv_kernel[...].astype(dt), 0, 1).reshape(d, 3 * n * h)
    qkv = (x_btd @ w).reshape(b, t, 3, n, h)
    if self.qkv_bias is not None:
      qkv = qkv + self.qkv_bias[...].astype(dt)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if rope is not None:
      q, k = apply_rope(q, rope), apply_rope(k, rope)
    if key is not None and self.attention_dropout > 0:
      # Dropout on the attention probabilities needs them materialised, which the fused
      # kernels never do: training with attention dropout takes the einsum path.
      ctx_btnh = attention.reference(
          q, k, v, segment_ids, dropout=lambda p: dropout(p, self.attention_dropout, key),
          window=self.window, local=local, causal=self.causal)
    else:
      ctx_btnh = attention.attend(q, k, v, segment_ids, self.impl, window=self.window,
                                  local=local, target=self.target, causal=self.causal)
    y = ctx_btnh.reshape(b, t, n * h) @ self.out_kernel[...].astype(dt).reshape(n * h, d)
    return y if self.out_bias is None else y + self.out_bias[...].astype(dt)


class Block(nnx.Module):
  """A transformer block, BERT's or a modern one, by flags (config.model):

    norm_position  'post' (BERT: x = LN(x + f(x))) or 'pre' (x = x + f(LN(x)); the model adds
                   a final norm). In a pre-LN stack the first block's attention norm is skipped
                   (the embeddings were just normalised), as in ModernBERT.
    mlp            'gelu' (dense, GELU, dense) or a gated 'geglu' / 'swiglu' (Shazeer 2020):
                   act(x W_in) * (x W_gate), with the kernel stored [D, 2, F] so that splitting
                   F over devices keeps each unit's input and gate together.
    use_bias       biases in every linear layer and norm, or none (ModernBERT).
  A layer of a stack with `model.local_attention_window` is local (sliding window) unless its
  index is a multiple of `model.global_attention_every`.
  """

  def __init__(self, cfg: ModelSettings, rngs, target: compile_target.Target | None = None):
    d, f, std = cfg.hidden_size, cfg.intermediate_size, cfg.initializer_range
    self.attention = SelfAttention(cfg, rngs, target)
    self.attention_norm = LayerNorm(d, cfg, target)
    self.gated = cfg.mlp != "gelu"
    shape, axes = ((d, 2, f), ("embed", None, "mlp")) if self.gated else ((d, f), ("embed", "mlp"))
    self.mlp_in = Dense(rngs, shape, axes, std, cfg.use_bias)
    self.mlp_out = Dense(rngs, (f, d), ("mlp", "embed"), std, cfg.use_bias)
    self.mlp_norm = LayerNorm(d, cfg, target)
    self.activation = jax.nn.silu if cfg.mlp == "swiglu" else functools.partial(
        jax.nn.gelu, approximate=False)
    self.pre_ln = cfg.norm_position == "pre"
    self.rate = cfg.dropout_rate

  def mlp(self, x):
    h = self.mlp_in(x)
    h = self.activation(h[..., 0, :]) * h[..., 1, :] if self.gated else self.activation(h)
    return self.mlp_out(h)

  def __call__(self, x, segment_ids, key, rope=None, local=False, first=False):
    keys = [None] * 3 if key is None else list(jax.random.split(key, 3))
    if self.pre_ln:
      h = jnp.where(first, x, self.attention_norm(x))
      x = x + dropout(self.attention(h, segment_ids, keys[0], rope, local), self.rate, keys[1])
      return x + dropout(self.mlp(self.mlp_norm(x)), self.rate, keys[2])
    y = self.attention(x, segment_ids, keys[0], rope, local)
    x = self.attention_norm(x + dropout(y, self.rate, keys[1]))
    return self.mlp_norm(x + dropout(self.mlp(x), self.rate, keys[2]))
