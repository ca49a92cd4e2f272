"""Parameters between mlmjax and Hugging Face `transformers`: plain functions on numpy dicts.

    to_hf(params, arch, ...)      mlmjax params (nnx.to_pure_dict) -> HF state dict {name: array}
    from_hf(state, arch, ...)     HF state dict -> mlmjax params (only what the checkpoint has)
    model_settings(hf_config)     HF config.json -> mlmjax's config.model architecture keys

Every name mapping lives in `_rules`: one rule per mlmjax leaf, naming the HF tensor(s) it
becomes and the two directions of the conversion. A new model variant adds rules there.

Where the two models differ in more than names, the conversion keeps the function unchanged:
- Linear weights: mlmjax kernels are [in, out], torch's are [out, in].
- Attention: mlmjax's qkv_kernel [3, D, N, H] is three [N*H, D] torch matrices; heads are the
  major part of N*H on both sides.
- Rotary layout: mlmjax rotates the pairs (i, i + H/2) of each head (rotate-half); RoFormer the
  pairs (2i, 2i+1), both at frequency base^(-2i/H). Permuting the query and key output columns
  of each head the same way maps one onto the other (q.k is unchanged by a shared permutation).
- Token type 0 adds nothing in mlmjax (model.py: a row shared by every token only slows
  learning), HF always adds row 0. Export writes row 0 as zeros; import folds HF's row 0 into
  the position table (pos' = pos + T0, T'[k] = T[k] - T0: the same sum for every type). A
  rotary model has no position table: there T0 goes into the token embedding, which the tied
  decoder then also sees, but only as h.T0, the same number added to every logit of a
  position: the probabilities and the loss are unchanged.
- Vocabulary: mlmjax's special ids are 0-4; a tokenizer with other ids is used through a
  permutation (`vocab_to_hf[mlmjax id] = HF id`, see data/hf_tokenizer.py). Embedding rows and
  the output bias are permuted with it, so an export writes the original tokenizer's ids back.
- RoBERTa's position table starts at padding_idx + 1 (its rows 0..padding_idx are never used).
- Scanned layers (blocks stacked on a leading layer axis) are unstacked before mapping and
  stacked after, by `unstack_layers` / `stack_layers`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

from mlmjax import errors

Params = dict  # nested {name: {...} | np.ndarray}, blocks under "blocks": {0: {...}, 1: ...}


class ConversionError(errors.UserError):
  """A checkpoint or config that cannot be mapped, with what differs."""


@dataclasses.dataclass(frozen=True)
class Arch:
  """Which transformers model a checkpoint is: its name prefix and head layout."""

  model_type: str  # "bert", "roberta" or "roformer"
  position_offset: int = 0  # RoBERTa: padding_idx + 1

  @property
  def prefix(self) -> str:
    return self.model_type + "."

  @property
  def rope(self) -> bool:
    return self.model_type == "roformer"

  @property
  def mlm_names(self) -> dict[str, str]:
    if self.model_type == "roberta":
      return {"transform": "lm_head.dense", "norm": "lm_head.layer_norm", "bias": "lm_head.bias"}
    return {"transform": "cls.predictions.transform.dense",
            "norm": "cls.predictions.transform.LayerNorm", "bias": "cls.predictions.bias"}


ARCHES = ("bert", "roberta", "roformer")


# ------------------------------------------------------------------------- layer stacking

def unstack_layers(params: Params) -> Params:
  """`blocks` as {layer index: block params}: a scanned model's blocks (one dict whose leaves
  have a leading layer axis) are split into per-layer dicts; per-layer blocks stay as they are."""
  blocks = params["blocks"]
  if all(isinstance(k, int) for k in blocks):
    return params
  num_layers = len(jax.tree.leaves(blocks)[0])
  return {**params, "blocks": {i: jax.tree.map(lambda x, i=i: np.asarray(x[i]), blocks)
                               for i in range(num_layers)}}


def stack_layers(params: Params) -> Params:
  """The inverse: per-layer `blocks` -> one dict of arrays with a leading layer axis."""
  layers = [params["blocks"][i] for i in sorted(params["blocks"])]
  return {**params, "blocks": jax.tree.map(lambda *xs: np.stack(xs), *layers)}


def _name(path: tuple) -> str:
  return "/".join(map(str, path))


def _get(tree, path):
  for k in path:
    tree = tree[k]
  return tree


def _set(tree, path, value) -> None:
  for k in path[:-1]:
    tree = tree.setdefault(k, {})
  tree[path[-1]] = value


# ------------------------------------------------------------------------------ the rules

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
      raise ConversionError(f"{_name(path)} has a {k.shape} kernel: not a linear layer of"
                            " transformers' BERT")
    return (k.T,)
  return [_Rule(path + ("kernel",), (name + ".weight",), to_hf, lambda w: w.T, head),
          _copy(path + ("bias",), name + ".bias", head)]


def _norm(path: tuple, name: str, head: bool = False) -> list[_Rule]:
  return [_copy(path + ("scale",), name + ".weight", head),
          _copy(path + ("bias",), name + ".bias", head)]


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


def _rules(arch: Arch, num_layers: int, num_heads: int, nsp: bool) -> list[_Rule]:
  p, mlm = arch.prefix, arch.mlm_names
  rules = [
      _copy(("token_embedding",), p + "embeddings.word_embeddings.weight"),
      # Row 0 written as zeros: mlmjax never adds it (see the module docstring).
      _Rule(("type_embedding",), (p + "embeddings.token_type_embeddings.weight",),
            lambda t: (np.concatenate([np.zeros_like(t[:1]), t[1:]]),), lambda t: t),
      *_norm(("embedding_norm",), p + "embeddings.LayerNorm"),
      *_dense(("mlm_transform",), mlm["transform"], head=True),
      *_norm(("mlm_norm",), mlm["norm"], head=True),
      _copy(("mlm_bias",), mlm["bias"], head=True),
  ]
  if not arch.rope:
    off = arch.position_offset
    rules.append(_Rule(
        ("position_embedding",), (p + "embeddings.position_embeddings.weight",),
        lambda e: (np.concatenate([np.zeros((off, e.shape[1]), e.dtype), e]),),
        lambda e: e[off:]))
  if nsp:
    rules += _dense(("pooler",), p + "pooler.dense", head=True)
    rules += _dense(("nsp_classifier",), "cls.seq_relationship", head=True)
  for i in range(num_layers):
    block, hf = ("blocks", i), f"{p}encoder.layer.{i}"
    rules += _attention(block + ("attention",), hf + ".attention", num_heads, arch.rope)
    rules += _norm(block + ("attention_norm",), hf + ".attention.output.LayerNorm")
    rules += _dense(block + ("mlp_in",), hf + ".intermediate.dense")
    rules += _dense(block + ("mlp_out",), hf + ".output.dense")
    rules += _norm(block + ("mlp_norm",), hf + ".output.LayerNorm")
  return rules


# ------------------------------------------------------------------------------ directions

def to_hf(params: Params, arch: Arch, model_cfg, vocab_to_hf: np.ndarray | None = None
          ) -> dict[str, np.ndarray]:
  """The HF state dict (float32) of mlmjax `params`, for `model_cfg` (config.model). The MLM
  decoder weight is left out: transformers ties it to the word embeddings on load.
  `vocab_to_hf` (mlmjax id -> HF id) puts the vocabulary rows in the tokenizer's own order."""
  params = unstack_layers(jax.tree.map(lambda x: np.asarray(x, np.float32), params))
  if vocab_to_hf is not None:
    hf_order = np.argsort(vocab_to_hf)  # HF id -> mlmjax id
    params = {**params, "token_embedding": params["token_embedding"][hf_order],
              "mlm_bias": params["mlm_bias"][hf_order]}
  out, used = {}, set()
  for rule in _rules(arch, len(params["blocks"]), model_cfg.num_heads, "pooler" in params):
    try:
      leaf = _get(params, rule.path)
    except KeyError:
      raise ConversionError(f"the model has no {_name(rule.path)}, which transformers'"
                            f" {arch.model_type} needs") from None
    used.add(rule.path)
    for name, value in zip(rule.names, rule.to_hf(leaf)):
      out[name] = np.ascontiguousarray(value, np.float32)
  # A parameter no rule maps (another block design) must not be dropped silently.
  unused = [_name(tuple(getattr(k, "key", k) for k in path))
            for path, _ in jax.tree_util.tree_leaves_with_path(params)
            if tuple(getattr(k, "key", k) for k in path) not in used]
  if unused:
    raise ConversionError(f"transformers' {arch.model_type} has no place for"
                          f" {', '.join(unused[:5])}{' ...' if len(unused) > 5 else ''}")
  if arch.rope:  # written so that nothing is left to transformers' initialisation
    out[arch.prefix + "encoder.embed_positions.weight"] = roformer_sinusoids(
        model_cfg.max_position_embeddings, model_cfg.hidden_size // model_cfg.num_heads)
  return out


def from_hf(state: dict[str, np.ndarray], arch: Arch, model_cfg, nsp: bool,
            vocab_to_hf: np.ndarray | None = None) -> tuple[Params, list[str]]:
  """mlmjax params from an HF state dict, for `model_cfg` (config.model, already set from
  the checkpoint by `model_settings`), and the mlmjax names of the pretraining-head
  parameters the checkpoint lacks (the caller initialises those afresh). Everything else
  must be there."""
  params: Params = {}
  missing_heads = []
  for rule in _rules(arch, model_cfg.num_layers, model_cfg.num_heads, nsp):
    present = [n in state for n in rule.names]
    if not all(present):
      if rule.head and not any(present):
        missing_heads.append(_name(rule.path))
        continue
      absent = next(n for n, ok in zip(rule.names, present) if not ok)
      raise ConversionError(f"the checkpoint has no tensor {absent!r}")
    _set(params, rule.path, rule.from_hf(*(np.asarray(state[n], np.float32)
                                          for n in rule.names)))
  _fold_type_zero(params, model_cfg.type_vocab_size)
  if vocab_to_hf is not None:
    rows = params["token_embedding"].shape[0]
    if vocab_to_hf.max() >= rows:
      raise ConversionError(f"the tokenizer has ids up to {vocab_to_hf.max()} but the"
                            f" checkpoint's embedding only {rows} rows")
    # Rows past the tokenizer's vocabulary (padding to a round size) are never used: dropped.
    params["token_embedding"] = params["token_embedding"][vocab_to_hf]
    if "mlm_bias" in params:
      params["mlm_bias"] = params["mlm_bias"][vocab_to_hf]
  return params, missing_heads


def _fold_type_zero(params: Params, type_vocab_size: int) -> None:
  """HF adds type row 0 to every token, mlmjax adds nothing for type 0: move T0 into the
  positions (or, without a position table, the token embedding) and subtract it from every
  type row; then pad to `type_vocab_size` rows with zeros (types the checkpoint never saw
  start equal to type 0)."""
  types = params["type_embedding"]
  t0 = types[0].copy()
  target = "position_embedding" if "position_embedding" in params else "token_embedding"
  params[target] = params[target] + t0
  types = types - t0
  if len(types) < type_vocab_size:
    types = np.concatenate([types, np.zeros((type_vocab_size - len(types), types.shape[1]),
                                            types.dtype)])
  params["type_embedding"] = types


def roformer_sinusoids(num_positions: int, head_size: int) -> np.ndarray:
  """RoFormer's position table as its `_init_weight` computes it: sin of the angles in the
  first half of a row, cos in the second, angle (pos, i) = pos * 10000^(-2i/H)."""
  angle = np.arange(num_positions)[:, None] / np.power(
      10000.0, 2 * np.arange(head_size // 2) / head_size)
  return np.concatenate([np.sin(angle), np.cos(angle)], -1).astype(np.float32)


# ------------------------------------------------------------------------------- configs

def model_settings(hf_config: dict, pair_format: bool) -> tuple[Arch, dict]:
  """(architecture, config.model keys) of an HF config.json; a model mlmjax cannot compute
  exactly is refused with the setting that differs."""
  c = hf_config
  model_type = c.get("model_type")
  if model_type not in ARCHES:
    raise ConversionError(f"model_type {model_type!r}: mlmjax imports {', '.join(ARCHES)}")
  wanted = {"hidden_act": "gelu", "is_decoder": False, "add_cross_attention": False}
  if model_type == "roformer":
    wanted.update(rotary_value=False, embedding_size=c["hidden_size"])
  else:
    wanted["position_embedding_type"] = "absolute"
  for key, value in wanted.items():
    if c.get(key) not in (None, value):  # None: transformers' default, which is `value`
      raise ConversionError(f"{key}={c[key]!r} is not supported (mlmjax computes {value!r})")
  offset = c.get("pad_token_id", 1) + 1 if model_type == "roberta" else 0
  types = c.get("type_vocab_size", 2)
  settings = {
      "hidden_size": c["hidden_size"],
      "num_layers": c["num_hidden_layers"],
      "num_heads": c["num_attention_heads"],
      "intermediate_size": c["intermediate_size"],
      "max_position_embeddings": c["max_position_embeddings"] - offset,
      # Pair formats use type 1: a one-type model (RoBERTa) gets a zero row for it.
      "type_vocab_size": max(types, 2) if pair_format else types,
      "layer_norm_eps": c.get("layer_norm_eps", 1e-12),
      "position_embedding_type": "rope" if model_type == "roformer" else "learned",
  }
  return Arch(model_type, offset), settings


def hf_settings(model_cfg, vocab_size: int, pad_id: int) -> dict:
  """transformers config keys of an mlmjax model (BERT for learned positions, RoFormer for
  rotary ones); `pad_id` in the exported tokenizer's ids."""
  m = model_cfg
  rope = m.position_embedding_type == "rope"
  kind = ({"model_type": "roformer", "rotary_value": False, "embedding_size": m.hidden_size}
          if rope else {"model_type": "bert", "position_embedding_type": "absolute"})
  return {
      **kind,
      "vocab_size": vocab_size,
      "hidden_size": m.hidden_size,
      "num_hidden_layers": m.num_layers,
      "num_attention_heads": m.num_heads,
      "intermediate_size": m.intermediate_size,
      "hidden_act": "gelu",  # exact (erf) GELU, as mlmjax computes
      "hidden_dropout_prob": m.dropout_rate,
      "attention_probs_dropout_prob": m.attention_dropout_rate,
      "max_position_embeddings": m.max_position_embeddings,
      "type_vocab_size": m.type_vocab_size,
      "initializer_range": m.initializer_range,
      "layer_norm_eps": m.layer_norm_eps,
      "pad_token_id": int(pad_id),
  }
