"""BERT encoder with a masked-only MLM head, in Flax NNX.

Shapes: B batch rows, T tokens per row, D hidden, N heads, H head size, F MLP size, P masked
predictions per row, V vocabulary.

Every parameter is an `nnx.Param` carrying `axes`: logical axis names that sharding.py maps to
mesh axes. Modules hold no RNG state; dropout keys are passed per call, so the train step can
work on plain pytrees (`nnx.split` once, `nnx.merge` inside jit).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _param(rngs: nnx.Rngs | None, shape: tuple[int, ...], axes: tuple[str | None, ...],
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

  def __init__(self, dim: int, eps: float):
    self.scale = _param(None, (dim,), ("embed",), "ones")
    self.bias = _param(None, (dim,), ("embed",), "zeros")
    self.eps = eps

  def __call__(self, x):
    x32 = x.astype(jnp.float32)  # statistics in float32 even when activations are bf16
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
    return (y * self.scale[...] + self.bias[...]).astype(x.dtype)


class Dense(nnx.Module):

  def __init__(self, rngs, d_in: int, d_out: int, axes: tuple[str | None, str | None], std: float):
    self.kernel = _param(rngs, (d_in, d_out), axes, "normal", std)
    self.bias = _param(None, (d_out,), (axes[1],), "zeros")

  def __call__(self, x):
    return x @ self.kernel[...].astype(x.dtype) + self.bias[...].astype(x.dtype)


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

  def __init__(self, cfg, rngs):
    d, n = cfg.hidden_size, cfg.num_heads
    h = d // n
    std = cfg.initializer_range
    self.qkv_kernel = _param(rngs, (3, d, n, h), (None, "embed", "heads", "kv"), "normal", std)
    self.qkv_bias = _param(None, (3, n, h), (None, "heads", "kv"), "zeros")
    self.out_kernel = _param(rngs, (n, h, d), ("heads", "kv", "embed"), "normal", std)
    self.out_bias = _param(None, (d,), ("embed",), "zeros")
    self.attention_dropout = cfg.attention_dropout_rate

  def __call__(self, x_btd, mask_b1tt, key, rope=None):
    dt = x_btd.dtype
    qkv = jnp.einsum("btd,sdnh->sbtnh", x_btd, self.qkv_kernel[...].astype(dt))
    q, k, v = qkv + self.qkv_bias[...].astype(dt)[:, None, None]
    if rope is not None:
      q, k = apply_rope(q, rope), apply_rope(k, rope)
    scores_bntt = jnp.einsum("btnh,bsnh->bnts", q, k).astype(jnp.float32)
    scores_bntt = scores_bntt * (q.shape[-1] ** -0.5)
    scores_bntt = jnp.where(mask_b1tt, scores_bntt, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores_bntt, axis=-1)
    probs = dropout(probs, self.attention_dropout, key).astype(dt)
    ctx_btnh = jnp.einsum("bnts,bsnh->btnh", probs, v)
    return jnp.einsum("btnh,nhd->btd", ctx_btnh, self.out_kernel[...].astype(dt)) + (
        self.out_bias[...].astype(dt))


class Block(nnx.Module):
  """Post-LN transformer block (original BERT): x = LN(x + f(x)) for attention, then MLP."""

  def __init__(self, cfg, rngs):
    d, f, std = cfg.hidden_size, cfg.intermediate_size, cfg.initializer_range
    self.attention = SelfAttention(cfg, rngs)
    self.attention_norm = LayerNorm(d, cfg.layer_norm_eps)
    self.mlp_in = Dense(rngs, d, f, ("embed", "mlp"), std)
    self.mlp_out = Dense(rngs, f, d, ("mlp", "embed"), std)
    self.mlp_norm = LayerNorm(d, cfg.layer_norm_eps)
    self.rate = cfg.dropout_rate

  def __call__(self, x, mask, key, rope=None):
    keys = [None] * 3 if key is None else list(jax.random.split(key, 3))
    y = self.attention(x, mask, keys[0], rope)
    x = self.attention_norm(x + dropout(y, self.rate, keys[1]))
    y = self.mlp_out(jax.nn.gelu(self.mlp_in(x), approximate=False))
    return self.mlp_norm(x + dropout(y, self.rate, keys[2]))


class BertForPretraining(nnx.Module):
  """Embeddings -> encoder blocks -> MLM head on the gathered masked positions only, and with
  `nsp_head` the NSP/SOP head (pooler + 2-way classifier) on each row's first [CLS]."""

  def __init__(self, cfg, vocab_size: int, rngs: nnx.Rngs, nsp_head: bool = False):
    d, std = cfg.hidden_size, cfg.initializer_range
    self.dtype = jnp.dtype(cfg.dtype)
    self.token_embedding = _param(rngs, (vocab_size, d), ("vocab", "embed"), "normal", std)
    self.use_rope = cfg.position_embedding_type == "rope"
    self.head_size = d // cfg.num_heads
    self.max_positions = cfg.max_position_embeddings
    if not self.use_rope:  # 'learned': BERT's absolute position table, added to the input
      self.position_embedding = _param(
          rngs, (cfg.max_position_embeddings, d), (None, "embed"), "normal", std)
    # Zero-initialised for the same reason that type 0 adds nothing (see encode).
    self.type_embedding = _param(None, (cfg.type_vocab_size, d), (None, "embed"), "zeros")
    self.embedding_norm = LayerNorm(d, cfg.layer_norm_eps)
    self.blocks = nnx.List([Block(cfg, rngs) for _ in range(cfg.num_layers)])
    self.mlm_transform = Dense(rngs, d, d, ("embed", None), std)
    self.mlm_norm = LayerNorm(d, cfg.layer_norm_eps)
    self.mlm_bias = _param(None, (vocab_size,), ("vocab",), "zeros")
    if nsp_head:
      self.pooler = Dense(rngs, d, d, ("embed", None), std)
      self.nsp_classifier = Dense(rngs, d, 2, ("embed", None), std)
    self.nsp_head = nsp_head
    self.rate = cfg.dropout_rate

  def encode(self, batch, dropout_key=None):
    """[B, T] ids -> [B, T, D] hidden states; attention only within a row's own segment."""
    ids = batch["input_ids"]
    types = batch["token_type_ids"]
    # Type 0 adds nothing: a vector shared by every token acts as a learned constant before the
    # LayerNorm, grows quickly, and squashes the token/position signal (a long loss plateau,
    # measured). Only types >= 1 add their (zero-initialised) embedding.
    type_bt1 = (types > 0)[..., None]
    x = self.token_embedding[...][ids] + jnp.where(type_bt1, self.type_embedding[...][types], 0.0)
    if not self.use_rope:
      x = x + self.position_embedding[...][batch["positions"]]
    # rope: positions enter every layer's q.k instead (relative offsets, shared weights).
    rope = rope_angles(batch["positions"], self.head_size,
                       self.max_positions) if self.use_rope else None
    keys = (None,) * (len(self.blocks) + 1) if dropout_key is None else tuple(
        jax.random.split(dropout_key, len(self.blocks) + 1))
    x = dropout(self.embedding_norm(x), self.rate, keys[0]).astype(self.dtype)
    seg = batch["segment_ids"]
    # Block-diagonal: a token sees the tokens of its own packed sequence; padding (0) sees none.
    mask_b1tt = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0))[:, None]
    for block, key in zip(self.blocks, keys[1:]):
      x = block(x, mask_b1tt, key, rope)
    return x

  def __call__(self, batch, dropout_key=None) -> dict[str, jax.Array]:
    """Returns `mlm_logits` [B, P, V] at `batch["masked_positions"]` and, with the pair head,
    `nsp_logits` [B, 2] (both float32)."""
    hidden_btd = self.encode(batch, dropout_key)
    positions_bp = batch["masked_positions"]
    hidden_bpd = jnp.take_along_axis(hidden_btd, positions_bp[..., None], axis=1)
    h = self.mlm_norm(jax.nn.gelu(self.mlm_transform(hidden_bpd), approximate=False))
    # Decoder tied to the input embedding: the vocab matmul only ever sees P positions, not T.
    logits_bpv = h @ self.token_embedding[...].astype(h.dtype).T
    out = {"mlm_logits": logits_bpv.astype(jnp.float32) + self.mlm_bias[...]}
    if self.nsp_head:
      # BERT's pooler: dense + tanh on the [CLS] token (row position 0: pair rows hold one
      # example each), then a 2-way classifier; no dropout in between (as in BERT's
      # pretraining head and Hugging Face's BertPreTrainingHeads).
      pooled_bd = jnp.tanh(self.pooler(hidden_btd[:, 0]))
      out["nsp_logits"] = self.nsp_classifier(pooled_bd).astype(jnp.float32)
    return out
