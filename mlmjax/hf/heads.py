"""A fine-tuned model (finetuning/finished.py) as the matching `transformers` class, and the
check that transformers computes the same outputs.

  kind                   learned positions (BERT)         rotary positions (RoFormer)
  classification,        BertForSequenceClassification    - (RoFormer's head is dense + GELU,
  regression                                                 not BERT's tanh pooler)
  token_classification   BertForTokenClassification       RoFormerForTokenClassification
  question_answering     BertForQuestionAnswering         RoFormerForQuestionAnswering
  multiple_choice        BertForMultipleChoice            RoFormerForMultipleChoice (its
                                                           sequence summary set to BERT's pooler)
  embedding              sentence-transformers' folder: the plain encoder (BertModel /
                         RoFormerModel) + modules.json, sentence_bert_config.json and
                         1_Pooling/config.json with the run's pooling

The encoder's tensors come from the pretraining export's rules (convert.to_hf), less its
pretraining heads; the head's are the fine-tuned ones. Other encoders (ModernBERT, ELECTRA's
discriminator) are refused in one line: their transformers classes build some heads unlike
mlmjax's (ModernBERT's dense + norm head, ELECTRA's two-layer classifier) and the others are
not verified yet; so is 'mean' pooling where the transformers class reads [CLS].
"""

from __future__ import annotations

import json
import os
import tempfile

import jax
import numpy as np

from mlmjax import paths
from mlmjax.hf import convert as hf_convert
from mlmjax.hf import exporter
from mlmjax.models import special_ids

CLASSES = {  # kind -> {architecture: transformers class}
    "classification": {"bert": "BertForSequenceClassification"},
    "regression": {"bert": "BertForSequenceClassification"},
    "token_classification": {"bert": "BertForTokenClassification",
                             "roformer": "RoFormerForTokenClassification"},
    "question_answering": {"bert": "BertForQuestionAnswering",
                           "roformer": "RoFormerForQuestionAnswering"},
    "multiple_choice": {"bert": "BertForMultipleChoice", "roformer": "RoFormerForMultipleChoice"},
    "embedding": {"bert": "BertModel", "roformer": "RoFormerModel"},
}
_POOLED = ("classification", "regression", "multiple_choice")  # heads on the [CLS] state


def _arch_and_class(model) -> tuple[hf_convert.Arch, str]:
  pre, kind = model.pretrained, model.kind.name
  arch = hf_convert.export_arch(pre.model, model.hf_model_type)
  name = CLASSES[kind].get(arch.model_type)
  if name is None:
    have = ", ".join(f"{a} ({c})" for a, c in CLASSES[kind].items())
    raise exporter.ExportError(
        f"transformers has no {arch.model_type} class with mlmjax's {kind} head; exported for:"
        f" {have}")
  if kind in _POOLED and model.settings.model.pooling_for(kind) != "cls":
    raise exporter.ExportError(f"{name} reads the [CLS] state; this run was fine-tuned with"
                               " model.pooling='mean'")
  return arch, name


def _linear(prefix: str, dense: dict) -> dict[str, np.ndarray]:
  """An mlmjax Dense ([in, out] kernel) as torch's Linear ([out, in] weight)."""
  return {f"{prefix}.weight": np.ascontiguousarray(np.asarray(dense["kernel"], np.float32).T),
          f"{prefix}.bias": np.asarray(dense["bias"], np.float32)}


def state_dict(model) -> tuple[dict[str, np.ndarray], hf_convert.Arch, str]:
  """The transformers state dict of a fine-tuned model, its architecture and class."""
  arch, name = _arch_and_class(model)
  params = jax.tree.map(np.asarray, model.params)
  encoder = dict(params["encoder"])
  if arch.model_type != "bert":  # RoFormer has no pooler: an NSP pooler stays home
    encoder = {k: v for k, v in encoder.items() if k not in ("pooler", "nsp_classifier")}
  vocab_to_hf = getattr(model.tokenizer, "vocab_to_hf", None)
  full = hf_convert.to_hf(encoder, arch, model.pretrained.model, vocab_to_hf)
  state = {k: v for k, v in full.items() if k.startswith(arch.prefix)}  # no pretraining heads
  kind = model.kind.name
  pooler = params.get("pooler") or params["encoder"].get("pooler")
  if kind in _POOLED:
    if arch.model_type == "bert":
      state.update(_linear(arch.prefix + "pooler.dense", pooler))
    else:  # RoFormerForMultipleChoice's summary: dense + tanh on the first token, as configured
      state.update(_linear("sequence_summary.summary", pooler))
    state.update(_linear("classifier", params["classifier"]))
  elif kind == "token_classification":
    state.update(_linear("classifier", params["classifier"]))
  elif kind == "question_answering":
    state.update(_linear("qa_outputs", params["qa_outputs"]))
  else:  # the plain encoder: its own names, without the task model's prefix
    state = {k[len(arch.prefix):]: v for k, v in state.items()}
  return state, arch, name


def _config(model, arch: hf_convert.Arch, name: str):
  transformers = exporter.require_transformers()
  tok, m = model.tokenizer, model.pretrained.model
  vocab_to_hf = getattr(tok, "vocab_to_hf", None)
  pad_id = 0 if vocab_to_hf is None else int(vocab_to_hf[special_ids.PAD_ID])
  settings = hf_convert.hf_settings(arch, m, len(tok), pad_id)
  settings.update(hidden_dropout_prob=model.settings.model.dropout_rate,
                  attention_probs_dropout_prob=model.settings.model.attention_dropout_rate)
  labels = model.record.get("label_names") or []
  if model.kind.name == "regression":
    settings.update(num_labels=1, problem_type="regression")
  elif labels:
    settings.update(id2label=dict(enumerate(labels)),
                    label2id={n: i for i, n in enumerate(labels)})
  if name == "RoFormerForMultipleChoice":  # its SequenceSummary as BERT's pooler + dropout
    settings.update(summary_type="first", summary_use_proj=True, summary_activation="tanh",
                    summary_proj_to_labels=False, summary_first_dropout=0.0,
                    summary_last_dropout=model.settings.model.dropout_rate)
  return transformers.AutoConfig.for_model(**settings, architectures=[name])


def _sentence_transformers_files(model) -> dict[str, str]:
  """sentence-transformers' module files: the encoder at the root, then its pooling."""
  pooling = model.settings.model.pooling_for("embedding")
  dim = model.pretrained.model.hidden_size
  modules = [{"idx": 0, "name": "0", "path": "",
              "type": "sentence_transformers.models.Transformer"},
             {"idx": 1, "name": "1", "path": "1_Pooling",
              "type": "sentence_transformers.models.Pooling"}]
  pool = {"word_embedding_dimension": dim, "pooling_mode_cls_token": pooling == "cls",
          "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
          "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
          "pooling_mode_lasttoken": False, "include_prompt": True}
  as_json = lambda v: json.dumps(v, indent=2) + "\n"
  return {"modules.json": as_json(modules),
          "sentence_bert_config.json": as_json({"max_seq_length": model.settings.data.seq_len,
                                                "do_lower_case": False}),
          "config_sentence_transformers.json": as_json({"similarity_fn_name": "cosine"}),
          "1_Pooling/config.json": as_json(pool)}


def export(model, out: str) -> str:
  """Writes `model` (finetuning/finished.FinetunedModel) into `out`; returns the class name."""
  exporter.require_transformers()
  state, arch, name = state_dict(model)
  extra = _sentence_transformers_files(model) if model.kind.name == "embedding" else None
  exporter.write(out, model.tokenizer, model.pretrained.model, _config(model, arch, name),
                 state, extra)
  return name


def _hf_outputs(name: str, out: str, rows: dict[str, np.ndarray], to_hf: np.ndarray,
                pooling: str) -> np.ndarray:
  """transformers' outputs on `rows`, shaped as mlmjax's kind gives them."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  transformers.logging.set_verbosity_error()
  model = getattr(transformers, name).from_pretrained(out).eval()
  ids = to_hf[rows["input_ids"]]
  flat = ids.ndim == 3 and name.endswith("Model")  # an embedding pair: [1, 2, T] -> [2, T]
  inputs = {"input_ids": ids, "attention_mask": (rows["segment_ids"] > 0).astype(np.int64),
            "token_type_ids": rows["token_type_ids"]}
  if flat:
    inputs = {k: v.reshape(-1, v.shape[-1]) for k, v in inputs.items()}
  with torch.no_grad():
    got = model(**{k: torch.from_numpy(np.asarray(v, np.int64)) for k, v in inputs.items()})
  if name.endswith("QuestionAnswering"):
    return np.stack([got.start_logits.numpy(), got.end_logits.numpy()], -1)
  if not name.endswith("Model"):
    return got.logits.numpy()
  hidden = got.last_hidden_state.numpy()  # sentence-transformers' pooling of the states
  if pooling == "cls":
    pooled = hidden[:, 0]
  else:
    mask = inputs["attention_mask"][..., None]
    pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1)
  return pooled.reshape(ids.shape[0], -1, pooled.shape[-1])


def verify(model, out: str) -> float:
  """Max |output difference| between transformers' load of `out` and mlmjax on a sample of
  the model's kind (real tokens only); raises ExportError above exporter.TOLERANCE."""
  if paths.is_remote(out):  # transformers loads local folders only
    with tempfile.TemporaryDirectory() as local:
      paths.download(out, local)
      return verify(model, local)
  _, name = _arch_and_class(model)
  rows = model.encode(model.sample()).rows
  to_hf = getattr(model.tokenizer, "vocab_to_hf", np.arange(len(model.tokenizer)))
  mine = model.outputs({k: v for k, v in rows.items()})
  theirs = _hf_outputs(name, os.fspath(out), rows, np.asarray(to_hf),
                       model.settings.model.pooling_for("embedding"))
  if model.kind.name in ("token_classification", "question_answering"):
    real = rows["segment_ids"] > 0  # padding positions' outputs mean nothing
    mine, theirs = mine[real], theirs[real]
  diff = float(np.abs(mine - theirs).max())
  if not diff <= exporter.TOLERANCE:  # also catches NaN
    raise exporter.ExportError(f"{out}: transformers' outputs differ from mlmjax's by"
                               f" {diff:.3g} (> {exporter.TOLERANCE}); the export is wrong,"
                               " please report it")
  return diff
