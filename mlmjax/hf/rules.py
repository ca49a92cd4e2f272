"""The name rules between mlmjax parameters and transformers' tensors: one table per
architecture, one rule per mlmjax leaf (convert.py applies them in both directions).

  bert, roberta   BERT's post-LN block and heads (RoBERTa's MLM head names)
  roformer        the same block with rotary attention (query/key columns permuted per head)
  modernbert      ModernBERT: pre-LN (the first block has no attention norm, a final norm),
                  gated MLP, optional biases, rotary bases and sliding windows in its config
  electra         ElectraForPreTraining: the discriminator; the generator and its MLM head are
                  not part of it and are left out
A rule may name no tensor: a parameter the HF model has no place for but whose value it does
not need (ModernBERT's unused first attention norm, all-zero token types).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from mlmjax import errors
from mlmjax.models import param_names


class ConversionError(errors.UserError):
  """A checkpoint or config that cannot be mapped, with what differs."""


@dataclasses.dataclass(frozen=True)
class Arch:
  """Which transformers model a checkpoint is: its name prefix and head layout."""

  model_type: str  # "bert", "roberta", "roformer", "modernbert" or "electra"
  position_offset: int = 0  # RoBERTa: padding_idx + 1

  @property
  def prefix(self) -> str:
    return "model." if self.model_type == "modernbert" else self.model_type + "."

  @property
  def rope(self) -> bool:
    return self.model_type == "roformer"

  @property
  def dropped(self) -> tuple[str, ...]:
    """Top-level parameters an export leaves out on purpose."""
    return ("generator", "mlm_transform", "mlm_norm", "mlm_bias") if (
        self.model_type == "electra") else ()

  @property
  def mlm_names(self) -> dict[str, str]:
    if self.model_type == "roberta":
      return {"transform": "lm_head.dense", "norm": "lm_head.layer_norm", "bias": "lm_head.bias"}
    return {"transform": "cls.predictions.transform.dense",
            "norm": "cls.predictions.transform.LayerNorm", "bias": "cls.predictions.bias"}


@dataclasses.dataclass(frozen=True)
class _Rule:
  path: tuple  # the mlmjax leaf
  names: tuple[str, ...]  # the HF tensor(s) it maps to
  to_hf: Callable[[np.ndarray], tuple[np.ndarray, ...]]
  from_hf: Callable[..., np.ndarray]  # one argument per name
  head: bool = False  # part of a pretraining head: a checkpoint may lack it


def _copy(path: tuple, name: str, head: bool = False) -> _Rule:
  return _Rule(path, (name,), lambda x: (x,), lambda x: x, head)


def _dense(path: tuple, name: str, head: bool = False) -> list[_Rule]:
  def to_hf(k):
    if k.ndim != 2:  # e.g. a gated MLP's [D, 2, F]: not a torch Linear
      raise ConversionError(f"{param_names.param_name(path)} has a {k.shape} kernel: not a"
                            f" linear layer of transformers' BERT")
    return (k.T,)
  return [_Rule(path + ("kernel",), (name + ".weight",), to_hf, lambda w: w.T, head),
          _copy(path + ("bias",), name + ".bias", head)]


def _norm(path: tuple, name: str, head: bool = False, bias: bool = True) -> list[_Rule]:
  return [_copy(path + ("scale",), name + ".weight", head)] + (
      [_copy(path + ("bias",), name + ".bias", head)] if bias else [])


def _dropped(path: tuple, check: Callable[[np.ndarray], None] = lambda x: None) -> _Rule:
  """A parameter the HF model has no tensor for, after `check` says its value is not needed."""
  def to_hf(x):
    check(x)
    return ()
  return _Rule(path, (), to_hf, lambda: None)


def _type_zero(path: tuple, model_type: str) -> _Rule:
  """Token types of a model without them: fine while only type 0 was used (it adds nothing)."""
  def check(types):
    if np.any(types[1:]):
      raise ConversionError(f"transformers' {model_type} has no token types, but this model"
                            " learned a type-1 embedding (a pair data.format)")
  return _dropped(path, check)


def rotary_permutation(head_size: int) -> np.ndarray:
  """RoFormer's column j of a query/key head is mlmjax's column perm[j]: mlmjax rotates the
  pairs (i, i + H/2), RoFormer the pairs (2i, 2i + 1), both by position * base^(-2i/H)."""
  half = head_size // 2
  return np.stack([np.arange(half), np.arange(half) + half], -1).reshape(-1)


def _attention(path: tuple, name: str, num_heads: int, rope: bool) -> list[_Rule]:
  """qkv_kernel [3, D, N, H] <-> query/key/value weights [N*H, D] (heads major in N*H, as
  transformers splits them), out_kernel [N, H, D] <-> [D, N*H]."""
  names = [f"{name}.self.{x}" for x in ("query", "key", "value")]

  def layout(j: int, x_nh: np.ndarray, to_roformer: bool) -> np.ndarray:
    if not rope or j == 2:  # values are not rotated
      return x_nh
    perm = rotary_permutation(x_nh.shape[-1])
    return x_nh[..., perm if to_roformer else np.argsort(perm)]

  def qkv_to_hf(k):
    return tuple(layout(j, k[j], True).reshape(k.shape[1], -1).T for j in range(3))

  def qkv_from_hf(*ws):
    return np.stack([layout(j, w.T.reshape(w.shape[1], num_heads, -1), False)
                     for j, w in enumerate(ws)])

  def bias_to_hf(b):
    return tuple(layout(j, b[j], True).reshape(-1) for j in range(3))

  def bias_from_hf(*bs):
    return np.stack([layout(j, b.reshape(num_heads, -1), False) for j, b in enumerate(bs)])

  return [
      _Rule(path + ("qkv_kernel",), tuple(n + ".weight" for n in names), qkv_to_hf, qkv_from_hf),
      _Rule(path + ("qkv_bias",), tuple(n + ".bias" for n in names), bias_to_hf, bias_from_hf),
      _Rule(path + ("out_kernel",), (f"{name}.output.dense.weight",),
            lambda k: (k.reshape(-1, k.shape[-1]).T,),
            lambda w: w.T.reshape(num_heads, -1, w.shape[0])),
      _copy(path + ("out_bias",), f"{name}.output.dense.bias"),
  ]


def rules(arch: Arch, model_cfg, nsp: bool) -> list[_Rule]:
  """Every rule of `arch` for a model of `model_cfg` (config.model)."""
  if arch.model_type == "modernbert":
    return _modernbert(model_cfg)
  return _bert(arch, model_cfg, nsp)


def _bert_layers(arch: Arch, blocks: tuple, hf: str, num_layers: int, num_heads: int):
  out = []
  for i in range(num_layers):
    block, name = blocks + (i,), f"{hf}.{i}"
    out += _attention(block + ("attention",), name + ".attention", num_heads, arch.rope)
    out += _norm(block + ("attention_norm",), name + ".attention.output.LayerNorm")
    out += _dense(block + ("mlp_in",), name + ".intermediate.dense")
    out += _dense(block + ("mlp_out",), name + ".output.dense")
    out += _norm(block + ("mlp_norm",), name + ".output.LayerNorm")
  return out


def _bert(arch: Arch, model_cfg, nsp: bool) -> list[_Rule]:
  """BERT, RoBERTa, RoFormer, and ELECTRA's discriminator: the post-LN family."""
  p, electra = arch.prefix, arch.model_type == "electra"
  out = [
      _copy(("token_embedding",), p + "embeddings.word_embeddings.weight"),
      # Row 0 written as zeros: mlmjax never adds it (see convert.py's docstring).
      _Rule(("type_embedding",), (p + "embeddings.token_type_embeddings.weight",),
            lambda t: (np.concatenate([np.zeros_like(t[:1]), t[1:]]),), lambda t: t),
      *_norm(("embedding_norm",), p + "embeddings.LayerNorm"),
  ]
  if electra:
    if model_cfg.embedding_size not in (0, model_cfg.hidden_size):
      out += _dense(("discriminator", "projection"), p + "embeddings_project")
    out += _bert_layers(arch, ("discriminator", "blocks"), p + "encoder.layer",
                        model_cfg.num_layers, model_cfg.num_heads)
    out += _dense(("rtd_dense",), "discriminator_predictions.dense", head=True)
    out += _dense(("rtd_out",), "discriminator_predictions.dense_prediction", head=True)
  else:
    mlm = arch.mlm_names
    out += [*_dense(("mlm_transform",), mlm["transform"], head=True),
            *_norm(("mlm_norm",), mlm["norm"], head=True),
            _copy(("mlm_bias",), mlm["bias"], head=True)]
    out += _bert_layers(arch, ("blocks",), p + "encoder.layer", model_cfg.num_layers,
                        model_cfg.num_heads)
  if not arch.rope:
    off = arch.position_offset
    out.append(_Rule(
        ("position_embedding",), (p + "embeddings.position_embeddings.weight",),
        lambda e: (np.concatenate([np.zeros((off, e.shape[1]), e.dtype), e]),),
        lambda e: e[off:]))
  if nsp:
    out += _dense(("pooler",), p + "pooler.dense", head=True)
    out += _dense(("nsp_classifier",), "cls.seq_relationship", head=True)
  return out


def _modernbert(m) -> list[_Rule]:
  """ModernBertForMaskedLM: one fused Wqkv [3*N*H, D] and a GLU Wi [2F, D] (input, then gate:
  transformers' chunk(2) order, which is mlmjax's [D, 2, F] axis 1)."""
  bias = m.use_bias
  out = [_copy(("token_embedding",), "model.embeddings.tok_embeddings.weight"),
         _type_zero(("type_embedding",), "modernbert"),
         *_norm(("embedding_norm",), "model.embeddings.norm", bias=bias),
         *_norm(("final_norm",), "model.final_norm", bias=bias),
         *_dense(("mlm_transform",), "head.dense", head=True)[:1 + bias],
         *_norm(("mlm_norm",), "head.norm", head=True, bias=bias),
         _copy(("mlm_bias",), "decoder.bias", head=True)]
  n = m.num_heads
  for i in range(m.num_layers):
    block, hf = ("blocks", i), f"model.layers.{i}"
    out.append(_dropped(block + ("attention_norm", "scale")) if i == 0 else
               _copy(block + ("attention_norm", "scale"), hf + ".attn_norm.weight"))
    if bias:
      out.append(_dropped(block + ("attention_norm", "bias")) if i == 0 else
                 _copy(block + ("attention_norm", "bias"), hf + ".attn_norm.bias"))
    out += [
        _Rule(block + ("attention", "qkv_kernel"), (hf + ".attn.Wqkv.weight",),
              lambda k: (k.transpose(0, 2, 3, 1).reshape(-1, k.shape[1]),),
              lambda w: w.reshape(3, n, -1, w.shape[1]).transpose(0, 3, 1, 2)),
        _Rule(block + ("attention", "out_kernel"), (hf + ".attn.Wo.weight",),
              lambda k: (k.reshape(-1, k.shape[-1]).T,),
              lambda w: w.T.reshape(n, -1, w.shape[0])),
        *_norm(block + ("mlp_norm",), hf + ".mlp_norm", bias=bias),
        _Rule(block + ("mlp_in", "kernel"), (hf + ".mlp.Wi.weight",),
              lambda k: (k.reshape(k.shape[0], -1).T,),
              lambda w: w.T.reshape(w.shape[1], 2, -1)),
        _Rule(block + ("mlp_out", "kernel"), (hf + ".mlp.Wo.weight",), lambda k: (k.T,),
              lambda w: w.T),
    ]
    if bias:
      out += [_Rule(block + ("attention", "qkv_bias"), (hf + ".attn.Wqkv.bias",),
                    lambda b: (b.reshape(-1),), lambda b: b.reshape(3, n, -1)),
              _copy(block + ("attention", "out_bias"), hf + ".attn.Wo.bias"),
              _Rule(block + ("mlp_in", "bias"), (hf + ".mlp.Wi.bias",),
                    lambda b: (b.reshape(-1),), lambda b: b.reshape(2, -1)),
              _copy(block + ("mlp_out", "bias"), hf + ".mlp.Wo.bias")]
  return out
