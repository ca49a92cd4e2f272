"""BERT encoder with a masked-only MLM head (and the NSP/SOP head), in Flax NNX.

Shapes: B batch rows, T tokens per row, D hidden, P masked predictions per row, V vocabulary.
The building blocks are in layers.py, the attention kernels in attention.py.

The layer stack runs one pure function per layer, `_run_layer(params, x, ...)`, either in a
Python loop over `blocks[i]` or, with `model.scan_layers`, in a `lax.scan` over parameters
stacked on a leading layer axis (one layer compiled once: compile time independent of depth).
Every layer is wrapped in `jax.checkpoint` with the `model.remat` policy:
  none           save every activation for the backward pass (fastest, most memory), but
                 no output of a layout op (reshape, transpose, cast, sharding constraint):
                 free to recompute, and what keeps gathered weights out of the saved set;
  dots_saveable  save matmul outputs, recompute the cheap elementwise work in between;
  full           save only each layer's input, recompute the layer in the backward pass.
Under FSDP a layer's weights are gathered when the layer runs (`constrain_layer`, see
steps.py); whatever the policy, the gathered copies are never saved for the backward pass
(they are gathered again there), so a device holds one layer's full weights at a time
(BERT-large on 8 devices, compiled memory per device: 6.25 GiB data parallel, 1.51 GiB FSDP).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from mlmjax.models import batch_schema
from mlmjax.models import compile_target
from mlmjax.models import layers
from mlmjax.models.settings import ModelSettings

# Outputs of these are free to recompute; the weights only ever pass through them on their way
# to a matmul, so not saving them is what frees each layer's gathered weights.
_LAYOUT_OPS = frozenset({"sharding_constraint", "convert_element_type", "reshape", "transpose",
                         "broadcast_in_dim", "squeeze", "expand_dims", "name", "copy"})


def _save_all_but_layout(prim, *_, **params) -> bool:
  return not _is_layout(prim, params)


def _is_layout(prim, params) -> bool:
  """A layout op, or a custom_vjp whose forward is only layout ops: FSDP's gather, whose
  custom gradient (parallel/sharding.py) would otherwise make its output, the layer's whole
  gathered weights, a saved residual."""
  if prim.name in _LAYOUT_OPS:
    return True
  if prim.name.startswith("custom_vjp_call"):
    jaxpr = params.get("call_jaxpr")
    eqns = getattr(getattr(jaxpr, "jaxpr", jaxpr), "eqns", None)
    return bool(eqns) and all(e.primitive.name in _LAYOUT_OPS for e in eqns)
  return False


_POLICIES = {
    "none": _save_all_but_layout,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}


def compute_dtype(name: str, platform: str | None = None) -> jnp.dtype:
  """model.dtype -> the activations' dtype; 'auto' is bfloat16 on TPU/GPU, float32 on CPU
  (`platform`: the one compiled for, compile_target.py; default this machine's)."""
  if name == "auto":
    platform = platform or compile_target.platform(None)
    return jnp.bfloat16 if platform in ("tpu", "gpu") else jnp.float32
  return jnp.dtype(name)


def _stack(blocks: list[nnx.Module]) -> nnx.Module:
  """One module whose parameters hold every block's, stacked on a leading 'layers' axis."""
  graphdef = nnx.split(blocks[0])[0]
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *(nnx.split(b)[1] for b in blocks))
  module = nnx.merge(graphdef, stacked)
  for _, v in nnx.iter_graph(module):
    if isinstance(v, nnx.Variable):
      v.set_metadata(axes=("layers",) + tuple(v.get_metadata()["axes"]))
  return module


def _split(module: nnx.Module):
  """(graphdef, parameters as a plain dict): what a layer function and its shardings take."""
  graphdef, state = nnx.split(module)
  return graphdef, nnx.to_pure_dict(state)


def _run_layer(graphdef, constrain, local_every, params, x, segment_ids, key, ropes, index):
  """Layer `index` (a Python int, or traced under scan): local (sliding window) unless its
  index is a multiple of `local_every` (0: every layer is global), with its rotary table."""
  local = local_every > 0 and index % local_every != 0
  rope = None if ropes is None else jax.tree.map(lambda g, l: jnp.where(local, l, g), *ropes)
  return nnx.merge(graphdef, constrain(params))(x, segment_ids, key, rope, local, index == 0)


class SpanBoundaryHead(nnx.Module):
  """SpanBERT's span-boundary objective (Joshi et al., 2020): every token of a masked span is
  predicted from the encoder outputs just outside the span and its position in it only,
  y = LN(GELU(W2 LN(GELU(W1 [x_left; x_right; p_offset])))), then the tied decoder."""

  def __init__(self, cfg: ModelSettings, vocab_size: int, rngs: nnx.Rngs,
               target: compile_target.Target | None = None):
    d, std, bias = cfg.hidden_size, cfg.initializer_range, cfg.use_bias
    self.offset_embedding = layers.param(rngs, (cfg.max_position_embeddings, d), (None, "embed"),
                                         "normal", std)
    self.dense1 = layers.Dense(rngs, (3 * d, d), ("embed", None), std, bias)
    self.norm1 = layers.LayerNorm(d, cfg, target)
    self.dense2 = layers.Dense(rngs, (d, d), ("embed", None), std, bias)
    self.norm2 = layers.LayerNorm(d, cfg, target)
    self.bias = layers.param(None, (vocab_size,), ("vocab",), "zeros")

  def __call__(self, hidden_btd, batch, embedding_vd):
    take = lambda key: jnp.take_along_axis(hidden_btd, batch[key][..., None], axis=1)
    offsets = jnp.minimum(batch["masked_span_offset"], self.offset_embedding.shape[0] - 1)
    h = jnp.concatenate([take("masked_span_left"), take("masked_span_right"),
                         self.offset_embedding[...][offsets].astype(hidden_btd.dtype)], -1)
    gelu = functools.partial(jax.nn.gelu, approximate=False)
    h = self.norm2(gelu(self.dense2(self.norm1(gelu(self.dense1(h))))))
    return jnp.einsum("bpd,vd->bpv", h, embedding_vd.astype(h.dtype),
                      preferred_element_type=jnp.float32) + self.bias[...]


class Embeddings:
  """Token + position (learned) + token-type embeddings and their LayerNorm, as attributes of
  the model that holds them (names shared by every model, and by export)."""

  def init_embeddings(self, cfg: ModelSettings, vocab_size: int, width: int,
                      rngs: nnx.Rngs, target: compile_target.Target | None = None) -> None:
    std = cfg.initializer_range
    self.token_embedding = layers.param(rngs, (vocab_size, width), ("vocab", "embed"), "normal",
                                        std)
    if cfg.position_embedding_type == "learned":  # BERT's absolute table, added to the input
      self.position_embedding = layers.param(
          rngs, (cfg.max_position_embeddings, width), (None, "embed"), "normal", std)
    # Zero-initialised for the same reason that type 0 adds nothing (see embed).
    self.type_embedding = layers.param(None, (cfg.type_vocab_size, width), (None, "embed"),
                                       "zeros")
    self.embedding_norm = layers.LayerNorm(width, cfg, target)
    self.embedding_dropout = cfg.dropout_rate

  def embed(self, batch, key=None) -> jax.Array:
    """[B, T] ids -> [B, T, width] float32: the normalised sum of the embeddings. Every
    encoder starts here, so here the row arrays it reads are checked (models/batch_schema.py)."""
    batch_schema.require(batch, batch_schema.ROWS)
    types = batch["token_type_ids"]
    # Type 0 adds nothing: a vector shared by every token acts as a learned constant before the
    # LayerNorm, grows quickly, and squashes the token/position signal (a long loss plateau,
    # measured). Only types >= 1 add their (zero-initialised) embedding.
    x = self.token_embedding[...][batch["input_ids"]] + jnp.where(
        (types > 0)[..., None], self.type_embedding[...][types], 0.0)
    if hasattr(self, "position_embedding"):
      x = x + self.position_embedding[...][batch["positions"]]
    return layers.dropout(self.embedding_norm(x), self.embedding_dropout, key)


class LayerStack:
  """The encoder's blocks (a list, or one module of stacked parameters under `scan_layers`)
  and, pre-LN, the final norm, as attributes of the model or tower that holds them."""

  def init_stack(self, cfg: ModelSettings, rngs: nnx.Rngs, name: str,
                 target: compile_target.Target | None) -> None:
    """`name`: the path of `blocks` in the whole model's parameters (FSDP's layer shardings);
    `target`: the mesh it is built for (compile_target.py; None: this machine)."""
    self.stack_name = name
    self.dtype = compute_dtype(cfg.dtype, compile_target.platform(target))
    self.use_rope = cfg.position_embedding_type == "rope"
    self.head_size = cfg.hidden_size // cfg.num_heads
    self.max_positions = cfg.max_position_embeddings
    self.rope_bases = (cfg.rope_base, cfg.local_rope_base)
    self.local_every = cfg.global_attention_every if cfg.local_attention_window else 0
    # Built one by one in both layouts, so a scanned model starts from the same weights.
    blocks = [layers.Block(cfg, rngs, target) for _ in range(cfg.num_layers)]
    self.scan_layers = cfg.scan_layers
    self.blocks = _stack(blocks) if cfg.scan_layers else nnx.List(blocks)
    self.num_layers = cfg.num_layers
    self.remat = cfg.remat
    # Pre-LN: the residual stream is normalised once more after the last block.
    self.final_norm = (layers.LayerNorm(cfg.hidden_size, cfg, target)
                       if cfg.norm_position == "pre" else None)

  def run_stack(self, x, batch, dropout_key=None, constrain_layer=None) -> jax.Array:
    """[B, T, D] -> [B, T, D] through every block; attention only within a row's segments.
    `constrain_layer(stack_name, layer_params)` runs on each layer's parameters (FSDP)."""
    x = x.astype(self.dtype)
    # rope: positions enter every layer's q.k (relative offsets, shared weights); global and
    # local layers may use different bases (ModernBERT: 160k and 10k).
    ropes = tuple(layers.rope_angles(batch["positions"], self.head_size, self.max_positions, b)
                  for b in self.rope_bases) if self.use_rope else None
    keys = (None,) * self.num_layers if dropout_key is None else tuple(
        jax.random.split(dropout_key, self.num_layers))
    seg = batch["segment_ids"]
    constrain = functools.partial(constrain_layer or (lambda name, params: params),
                                  self.stack_name)
    policy = _POLICIES[self.remat]
    if self.scan_layers:
      graphdef, params = _split(self.blocks)
      layer = jax.checkpoint(functools.partial(_run_layer, graphdef, constrain, self.local_every),
                             policy=policy)
      layer_keys = None if dropout_key is None else jnp.stack(keys)
      x, _ = jax.lax.scan(lambda h, xs: (layer(xs[0], h, seg, xs[1], ropes, xs[2]), None), x,
                          (params, layer_keys, jnp.arange(self.num_layers)))
    else:
      for index, (block, key) in enumerate(zip(self.blocks, keys)):
        graphdef, params = _split(block)
        layer = jax.checkpoint(functools.partial(_run_layer, graphdef, constrain,
                                                 self.local_every), policy=policy,
                               static_argnums=(5,))
        x = layer(params, x, seg, key, ropes, index)
    return x if self.final_norm is None else self.final_norm(x)


def mlm_logits(hidden_bpd, transform, norm, embedding_vd, bias_v) -> jax.Array:
  """BERT's MLM head: dense, GELU, LayerNorm, then the decoder tied to the input embedding
  (+ bias), in float32. Only ever given the P masked positions, never all T."""
  return decode(head_features(hidden_bpd, transform, norm), embedding_vd, bias_v)


def head_features(hidden_bpd, transform, norm) -> jax.Array:
  """The MLM head up to its decoder: dense, GELU, LayerNorm."""
  return norm(jax.nn.gelu(transform(hidden_bpd), approximate=False))


def decode(features_bpd, embedding_vd, bias_v) -> jax.Array:
  """[B, P, D] -> [B, P, V] float32 logits: the decoder tied to the input embedding, + bias."""
  return jnp.einsum("bpd,vd->bpv", features_bpd, embedding_vd.astype(features_bpd.dtype),
                    preferred_element_type=jnp.float32) + bias_v


def gather(hidden_btd, positions_bp) -> jax.Array:
  """[B, T, D] at [B, P] positions -> [B, P, D]."""
  return jnp.take_along_axis(hidden_btd, positions_bp[..., None], axis=1)


class BertForPretraining(nnx.Module, Embeddings, LayerStack):
  """Embeddings -> encoder blocks -> MLM head on the gathered masked positions only; with
  `nsp_head` the NSP/SOP head (pooler + 2-way classifier) on each row's first [CLS]; with
  `sbo_head` the span-boundary head on the same masked positions."""

  def __init__(self, cfg: ModelSettings, vocab_size: int, rngs: nnx.Rngs,
               nsp_head: bool = False, sbo_head: bool = False,
               target: compile_target.Target | None = None):
    d, std = cfg.hidden_size, cfg.initializer_range
    self.init_embeddings(cfg, vocab_size, d, rngs, target)
    self.init_stack(cfg, rngs, "blocks", target)
    self.mlm_transform = layers.Dense(rngs, (d, d), ("embed", None), std, cfg.use_bias)
    self.mlm_norm = layers.LayerNorm(d, cfg, target)
    self.mlm_bias = layers.param(None, (vocab_size,), ("vocab",), "zeros")  # decoder bias
    if nsp_head:
      self.pooler = layers.Dense(rngs, (d, d), ("embed", None), std)
      self.nsp_classifier = layers.Dense(rngs, (d, 2), ("embed", None), std)
    self.nsp_head = nsp_head
    self.span_boundary = (SpanBoundaryHead(cfg, vocab_size, rngs, target) if sbo_head
                          else None)

  def encode(self, batch, dropout_key=None, constrain_layer=None):
    """[B, T] ids -> [B, T, D] hidden states."""
    keys = (None, None) if dropout_key is None else jax.random.split(dropout_key)
    return self.run_stack(self.embed(batch, keys[0]), batch, keys[1], constrain_layer)

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> dict[str, jax.Array]:
    """Returns `mlm_logits` [B, P, V] at `batch["masked_positions"]`, with the pair head
    `nsp_logits` [B, 2], with the span-boundary head `sbo_logits` [B, P, V] (all float32)."""
    batch_schema.require(batch, ["masked_positions", *(
        batch_schema.SPAN_BOUNDARIES if self.span_boundary is not None else ())])
    hidden_btd = self.encode(batch, dropout_key, constrain_layer)
    out = {"mlm_logits": mlm_logits(gather(hidden_btd, batch["masked_positions"]),
                                    self.mlm_transform, self.mlm_norm, self.token_embedding[...],
                                    self.mlm_bias[...])}
    if self.nsp_head:
      out["nsp_logits"] = self._nsp_logits(hidden_btd)
    if self.span_boundary is not None:
      out["sbo_logits"] = self.span_boundary(hidden_btd, batch, self.token_embedding[...])
    return out

  def _nsp_logits(self, hidden_btd) -> jax.Array:
    """BERT's pooler: dense + tanh on the [CLS] token (row position 0: pair rows hold one
    example each), then a 2-way classifier; no dropout in between (as in BERT's pretraining
    head and Hugging Face's BertPreTrainingHeads)."""
    pooled_bd = jnp.tanh(self.pooler(hidden_btd[:, 0]))
    return self.nsp_classifier(pooled_bd).astype(jnp.float32)

  def masked_features(self, batch, dropout_key=None, constrain_layer=None
                      ) -> dict[str, jax.Array]:
    """What __call__ gives, with the MLM head stopped before its decoder: `mlm_features`
    [B, P, D] at the masked positions, `decoder` [V, D] and `decoder_bias` [V], which the loss
    applies a chunk of slots at a time (training/core/losses.py chunked_model_sums), so that
    [B, P, V] logits never exist whole; `nsp_logits` with the pair head."""
    batch_schema.require(batch, ["masked_positions"])
    hidden_btd = self.encode(batch, dropout_key, constrain_layer)
    out = {"mlm_features": head_features(gather(hidden_btd, batch["masked_positions"]),
                                         self.mlm_transform, self.mlm_norm),
           "decoder": self.token_embedding[...], "decoder_bias": self.mlm_bias[...]}
    if self.nsp_head:
      out["nsp_logits"] = self._nsp_logits(hidden_btd)
    return out

  def next_token_features(self, batch, dropout_key=None, constrain_layer=None
                          ) -> dict[str, jax.Array]:
    """The causal-LM objective on the same encoder and MLM head: `clm_features` [B, T-1, D],
    the head's features (head_features) at every position but the last, each token attending
    only to itself and the tokens before it in its sequence; `decoder` [V, D] and
    `decoder_bias` [V], which the loss applies a chunk of positions at a time
    (training/objectives/clm.py), so that [B, T-1, V] logits never exist whole. Call it on a copy
    of the model (train_state.forward makes one per step): it switches the copy's attention
    to causal."""
    self.set_attributes(causal=True, raise_if_not_found=False)
    hidden_btd = self.encode(batch, dropout_key, constrain_layer)[:, :-1]
    return {"clm_features": head_features(hidden_btd, self.mlm_transform, self.mlm_norm),
            "decoder": self.token_embedding[...], "decoder_bias": self.mlm_bias[...]}
