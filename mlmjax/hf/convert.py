"""Parameters between mlmjax and Hugging Face `transformers`: plain functions on numpy dicts.

    to_hf(params, arch, ...)      mlmjax params (nnx.to_pure_dict) -> HF state dict {name: array}
    from_hf(state, arch, ...)     HF state dict -> mlmjax params (only what the checkpoint has)
    model_settings(hf_config)     HF config.json -> mlmjax's config.model architecture keys

Every name mapping lives in rules.py: one rule per mlmjax leaf, naming the HF tensor(s) it
becomes and the two directions of the conversion. A new model variant adds rules there.

Where the two models differ in more than names, the conversion keeps the function unchanged:
- Linear weights: mlmjax kernels are [in, out], torch's are [out, in].
- Attention: mlmjax's qkv_kernel [3, D, N, H] is three [N*H, D] torch matrices; heads are the
  major part of N*H on both sides.
- Rotary layout: mlmjax rotates the pairs (i, i + H/2) of each head (rotate-half); RoFormer the
  pairs (2i, 2i+1), both at frequency base^(-2i/H). Permuting the query and key output columns
  of each head the same way maps one onto the other (q.k is unchanged by a shared permutation).
- Token type 0 adds nothing in mlmjax (models/bert.py: a row shared by every token only slows
  learning), HF always adds row 0. Export writes row 0 as zeros; import folds HF's row 0 into
  the position table (pos' = pos + T0, T'[k] = T[k] - T0: the same sum for every type). A
  rotary model has no position table: there T0 goes into the token embedding, which the tied
  decoder then also sees, but only as h.T0, the same number added to every logit of a
  position: the probabilities and the loss are unchanged.
- Vocabulary: mlmjax's special ids are 0-4; a tokenizer with other ids is used through a
  permutation (`vocab_to_hf[mlmjax id] = HF id`, see data/text/hf_tokenizer.py). Embedding rows and
  the output bias are permuted with it, so an export writes the original tokenizer's ids back.
- RoBERTa's position table starts at padding_idx + 1 (its rows 0..padding_idx are never used).
- Scanned layers (blocks stacked on a leading layer axis) are unstacked before mapping and
  stacked after, by `unstack_layers` / `stack_layers`.
"""

from __future__ import annotations

import jax
import numpy as np

from mlmjax.hf.rules import Arch, ConversionError, rules
from mlmjax.models import param_names
from mlmjax.models.settings import ModelSettings

Params = dict  # nested {name: {...} | np.ndarray}, blocks under "blocks": {0: {...}, 1: ...}


ARCHES = ("bert", "roberta", "roformer")  # what import reads


# ------------------------------------------------------------------------- layer stacking

def unstack_layers(params: Params) -> Params:
  """Every `blocks` (ELECTRA has two) as {layer index: block params}: a scanned model's blocks
  (one dict whose leaves have a leading layer axis) are split into per-layer dicts; per-layer
  blocks stay as they are."""
  out = {}
  for key, sub in params.items():
    if key == "blocks" and not all(isinstance(k, int) for k in sub):
      num_layers = len(jax.tree.leaves(sub)[0])
      sub = {i: jax.tree.map(lambda x, i=i: np.asarray(x[i]), sub) for i in range(num_layers)}
    elif isinstance(sub, dict) and key != "blocks":
      sub = unstack_layers(sub)
    out[key] = sub
  return out


def stack_layers(params: Params) -> Params:
  """The inverse: per-layer `blocks` -> one dict of arrays with a leading layer axis."""
  layers = [params["blocks"][i] for i in sorted(params["blocks"])]
  return {**params, "blocks": jax.tree.map(lambda *xs: np.stack(xs), *layers)}


def _get(tree, path):
  for k in path:
    tree = tree[k]
  return tree


def _set(tree, path, value) -> None:
  for k in path[:-1]:
    tree = tree.setdefault(k, {})
  tree[path[-1]] = value


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
  params = {k: v for k, v in params.items() if k not in arch.dropped}
  out, used = {}, set()
  for rule in rules(arch, model_cfg, "pooler" in params):
    try:
      leaf = _get(params, rule.path)
    except KeyError:
      raise ConversionError(f"the model has no {param_names.param_name(rule.path)}, which"
                            f" transformers' {arch.model_type} needs") from None
    used.add(rule.path)
    for name, value in zip(rule.names, rule.to_hf(leaf)):
      out[name] = np.ascontiguousarray(value, np.float32)
  # A parameter no rule maps (another block design) must not be dropped silently.
  paths = [param_names.path_keys(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
  unused = [param_names.param_name(p) for p in paths if p not in used]
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
  for rule in rules(arch, model_cfg, nsp):
    if not rule.names:  # nothing of it in an HF checkpoint
      continue
    present = [n in state for n in rule.names]
    if not all(present):
      if rule.head and not any(present):
        missing_heads.append(param_names.param_name(rule.path))
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


def export_arch(m: ModelSettings, model_type: str | None = None) -> Arch:
  """The transformers architecture a run of model `m` exports to (`model_type`: the one its
  objective names, training/objectives/), or a one-line refusal naming what it cannot
  represent."""
  if model_type:
    arch = Arch(model_type)
  elif m.norm_position == "pre":
    arch = Arch("modernbert")
  else:
    arch = Arch("roformer" if m.position_embedding_type == "rope" else "bert")
  modern = arch.model_type == "modernbert"
  needs = {  # the settings each family computes exactly
      "model.norm_position": "pre" if modern else "post",
      "model.mlp": ("geglu", "swiglu") if modern else "gelu",
      "model.position_embedding_type": {"bert": "learned", "electra": "learned"}.get(
          arch.model_type, "rope"),
  }
  if not modern:
    needs.update({"model.use_bias": True, "model.local_attention_window": 0})
  if arch.model_type == "roformer":
    needs["model.rope_base"] = 10_000.0
  for key, want in needs.items():
    have = getattr(m, key.split(".")[1])
    if have not in (want if isinstance(want, tuple) else (want,)):
      raise ConversionError(f"transformers' {arch.model_type} cannot compute {key}={have!r}"
                            f" (it needs {want!r})")
  return arch


def hf_settings(arch: Arch, model_cfg, vocab_size: int, pad_id: int) -> dict:
  """transformers config keys of an mlmjax model; `pad_id` in the exported tokenizer's ids."""
  m = model_cfg
  common = {"vocab_size": vocab_size, "hidden_size": m.hidden_size,
            "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_heads,
            "intermediate_size": m.intermediate_size,
            "max_position_embeddings": m.max_position_embeddings,
            "initializer_range": m.initializer_range, "pad_token_id": int(pad_id)}
  if arch.model_type == "modernbert":
    window = m.local_attention_window
    return {**common, "model_type": "modernbert",
            "hidden_activation": "silu" if m.mlp == "swiglu" else "gelu",
            "classifier_activation": "gelu", "norm_eps": m.layer_norm_eps,
            "norm_bias": m.use_bias, "attention_bias": m.use_bias, "mlp_bias": m.use_bias,
            "classifier_bias": m.use_bias, "decoder_bias": True, "tie_word_embeddings": True,
            "global_rope_theta": m.rope_base, "local_rope_theta": m.local_rope_base,
            # No window: every layer global (a window as long as any row, every layer global).
            "local_attention": window or 2 * m.max_position_embeddings,
            "global_attn_every_n_layers": m.global_attention_every if window else 1,
            "embedding_dropout": m.dropout_rate, "mlp_dropout": m.dropout_rate,
            "attention_dropout": m.attention_dropout_rate, "sparse_prediction": False,
            "reference_compile": False}
  kind = {"model_type": arch.model_type, "position_embedding_type": "absolute"}
  if arch.model_type == "roformer":
    kind = {"model_type": "roformer", "rotary_value": False, "embedding_size": m.hidden_size}
  elif arch.model_type == "electra":
    kind["embedding_size"] = m.embedding_size or m.hidden_size
  return {
      **common, **kind,
      "hidden_act": "gelu",  # exact (erf) GELU, as mlmjax computes
      "hidden_dropout_prob": m.dropout_rate,
      "attention_probs_dropout_prob": m.attention_dropout_rate,
      "type_vocab_size": m.type_vocab_size,
      "layer_norm_eps": m.layer_norm_eps,
  }
