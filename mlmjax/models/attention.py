"""Self-attention kernels, one call for all of them: `attend(q, k, v, segment_ids, impl)`.

q, k, v are [B, T, N, H] (batch, tokens, heads, head size); `segment_ids` [B, T] says which
packed sequence a token belongs to (0 = padding): a token attends only to the tokens of its own
sequence. Outputs for padding tokens are unspecified (nothing reads them). With a `window` W and
`local` true, a token attends only to tokens at most W // 2 positions away (ModernBERT's
sliding window; `local` may be a traced boolean, so a scanned stack can alternate). With
`causal` (the causal-LM objective, training/objectives/clm.py) a token attends only to itself and
the tokens before it in its sequence.

  xla         jax.nn.dot_product_attention's XLA path with a block-diagonal mask; every
              backend. Scores and softmax in float32 whatever the compute dtype.
  cudnn       cuDNN's fused (flash) attention through jax.nn.dot_product_attention, with the
              same mask; NVIDIA GPUs, bfloat16/float16 only.
  splash      TPU Pallas splash attention with segment ids (never builds the [T, T] mask);
              sequence lengths that are multiples of 128.
  pallas_gpu  the Pallas (Triton) flash-attention kernel for GPUs with segment ids.
  auto        splash on TPU when the length allows, cudnn on GPU in half precision, else xla.

`reference` (plain einsums, the [B, N, T, T] scores materialised in float32) is the test oracle
every kernel is checked against, never a config choice. Kernels that cannot run here raise a
ConfigError from `check` (config_check.py) rather than an XLA error mid-run. The Pallas kernels
take `interpret=True` so the tests run them on CPU.

"Here" is the platform being compiled for (compile_target.py), not necessarily this machine.
XLA cannot partition a Pallas call (Mosaic on TPU, Triton on GPU) over a mesh: it refuses
("Mosaic kernels cannot be automatically partitioned"). So on a mesh of more than one device
each Pallas kernel runs under `jax.shard_map` on the device's own rows and heads (batch over
the batch axes, heads over the tensor axis); attention never mixes rows or heads, so no
communication is needed.

Attention dropout: neither fused kernel takes it. Splash has no dropout argument at all, and
jax.nn.dot_product_attention (the public cuDNN entry) has none either (cuDNN's dropout is only
reachable through jax's private `jax._src.cudnn` module, whose signature changes between jax
releases). Dropout on the probabilities needs them, so layers.py takes the einsum path
(`reference`) for a training step with model.attention_dropout_rate > 0: set it to 0 (as
ModernBERT and most recent recipes do) to train with the fused kernels.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from mlmjax.models import compile_target

IMPLEMENTATIONS = ("auto", "xla", "cudnn", "splash", "pallas_gpu")
_HALF = (jnp.bfloat16, jnp.float16)


def mask(segment_ids_bt: jax.Array, window: int = 0, local=False,
         causal: bool = False) -> jax.Array:
  """[B, 1, T, T] bool: query t may attend to key s (same packed sequence, not padding,
  within the window on a local layer, and s <= t if `causal`)."""
  seg = segment_ids_bt
  allowed = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0)
  t = jnp.arange(seg.shape[1])
  if window:
    near = jnp.abs(t[:, None] - t[None, :]) <= window // 2
    allowed = allowed & (near | ~jnp.asarray(local))
  if causal:
    allowed = allowed & (t[:, None] >= t[None, :])
  return allowed[:, None]


def reference(q, k, v, segment_ids, dropout=None, window: int = 0, local=False,
              causal: bool = False):
  """The oracle: einsum scores in float32, a masked softmax, an einsum with v. `dropout`
  (probs -> probs) is applied to the attention probabilities when given."""
  scores = jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32)
  scores = scores * (q.shape[-1] ** -0.5)
  scores = jnp.where(mask(segment_ids, window, local, causal), scores,
                     jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1)
  if dropout is not None:
    probs = dropout(probs)
  return jnp.einsum("bnts,bsnh->btnh", probs.astype(v.dtype), v)


def resolve(impl: str, dtype, seq_len: int, platform: str) -> str:
  """The kernel `auto` stands for on `platform`; others are returned as they are."""
  if impl != "auto":
    return impl
  if platform == "tpu" and seq_len % 128 == 0:
    return "splash"
  if platform == "gpu" and jnp.dtype(dtype) in _HALF:
    return "cudnn"
  return "xla"


def check(impl: str, dtype, seq_len: int, platform: str | None = None,
          window: int = 0) -> str | None:
  """Why `impl` cannot run on `platform` (default: this machine's; a sentence for the config
  error), or None."""
  platform = platform or compile_target.platform(None)
  if impl == "pallas_gpu" and window:
    return "has no sliding-window attention (model.local_attention_window)"
  impl = resolve(impl, dtype, seq_len, platform)
  if impl == "cudnn" and (platform != "gpu" or jnp.dtype(dtype) not in _HALF):
    return "needs an NVIDIA GPU and model.dtype bfloat16"
  if impl == "splash" and (platform != "tpu" or seq_len % 128):
    return "needs a TPU and sequence lengths that are multiples of 128"
  if impl == "pallas_gpu" and platform != "gpu":
    return "needs a GPU"
  return None


def attend(q, k, v, segment_ids, impl: str = "xla", interpret: bool = False, window: int = 0,
           local=False, target: compile_target.Target | None = None, causal: bool = False):
  """Attention of [B, T, N, H] q/k/v within packed sequences; `impl` as in IMPLEMENTATIONS
  (`auto` resolved for the platform of `target`, default this machine's); `interpret` runs
  the Pallas kernels on any backend; on a `target` mesh of several devices they run on each
  device's shard."""
  impl = resolve(impl, q.dtype, q.shape[1], compile_target.platform(target))
  if impl in ("xla", "cudnn"):
    return jax.nn.dot_product_attention(q, k, v, mask=mask(segment_ids, window, local, causal),
                                        implementation=impl)
  if impl == "splash":
    splash = lambda w: _per_device(
        lambda *a: _splash(*a, interpret=interpret, window=w, causal=causal), q, k, v,
        segment_ids, target)
    if not window:
      return splash(0)
    if isinstance(local, bool):
      return splash(window if local else 0)
    # A traced `local` (scanned layers): both variants compiled, one runs.
    return jax.lax.cond(local, lambda: splash(window), lambda: splash(0))
  if impl == "pallas_gpu":
    return _per_device(lambda *a: _pallas_gpu(*a, interpret=interpret, causal=causal), q, k, v,
                       segment_ids, target)
  raise ValueError(f"unknown attention implementation {impl!r}")


def _per_device(kernel, q, k, v, segment_ids, target: compile_target.Target | None):
  """`kernel(q, k, v, segment_ids)` on each device's shard of the target's mesh (see the
  module docstring); as it is on one device or without a target. A dimension the mesh axes
  do not divide (a batch of 1, 2 heads on tensor=4) stays whole on every device."""
  if target is None or target.mesh.size == 1:
    return kernel(q, k, v, segment_ids)
  mesh = target.mesh

  def axes(size, names):
    names = tuple(a for a in names if mesh.shape.get(a, 1) > 1)
    ways = 1
    for a in names:
      ways *= mesh.shape[a]
    return (names if len(names) > 1 else names[0]) if names and size % ways == 0 else None

  b, n = axes(q.shape[0], target.batch_axes), axes(q.shape[2], target.heads_axes)
  qkv_spec = P(b, None, n, None)
  # check_vma off: a Pallas call does not declare how its outputs vary over mesh axes.
  return jax.shard_map(kernel, mesh=mesh, in_specs=(qkv_spec, qkv_spec, qkv_spec, P(b, None)),
                       out_specs=qkv_spec, check_vma=False)(q, k, v, segment_ids)


def _pallas_gpu(q, k, v, segment_ids, interpret, causal):
  from jax.experimental.pallas.ops.gpu import attention as gpu_attention  # pylint: disable=g-import-not-at-top
  block = min(128, q.shape[1])
  sizes = gpu_attention.BlockSizes(block_q=block, block_k=block, block_q_dkv=block,
                                   block_kv_dkv=block, block_q_dq=block, block_kv_dq=block)
  return gpu_attention.mha(q, k, v, segment_ids, sm_scale=q.shape[-1] ** -0.5, causal=causal,
                           block_sizes=sizes, interpret=interpret)


@functools.lru_cache(maxsize=None)
def _splash_kernel(num_heads: int, seq_len: int, interpret: bool, window: int, causal: bool):
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm  # pylint: disable=g-import-not-at-top
  shape = (seq_len, seq_len)
  # (left, right) keys a query sees: None is unbounded; causal sees none to its right.
  left = window // 2 if window else None
  right = 0 if causal else left
  one = (sm.LocalMask(shape, (left, right), offset=0) if window
         else sm.CausalMask(shape) if causal else sm.FullMask(shape))
  mask = sm.MultiHeadMask([one] * num_heads)
  block = min(512, seq_len)
  sizes = sk.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                        block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                        block_q_dq=block, block_kv_dq=block)
  return sk.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1,
                            interpret=interpret)


def _splash(q, k, v, segment_ids, interpret, window, causal):
  """Splash works on one example of [N, T, H]; the batch is vmapped."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk  # pylint: disable=g-import-not-at-top
  kernel = _splash_kernel(q.shape[2], q.shape[1], interpret, window, causal)
  scale = q.shape[-1] ** -0.5
  to_nth = lambda x: jnp.swapaxes(x, 1, 2)  # [B, T, N, H] -> [B, N, T, H]
  seg = segment_ids.astype(jnp.int32)
  out = jax.vmap(lambda qq, kk, vv, s: kernel(qq * scale, kk, vv, segment_ids=sk.SegmentIds(s, s)))(
      to_nth(q), to_nth(k), to_nth(v), seg)
  return to_nth(out)
