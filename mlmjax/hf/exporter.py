"""Writing a run's checkpoint as a Hugging Face `transformers` model, and checking it.

  learned positions  -> BERT (`BertForPreTraining` when the run has the NSP/SOP head, which
                        AutoModelForMaskedLM and the fine-tuning classes load too)
  rotary positions   -> RoFormer (`RoFormerForMaskedLM`; transformers has no RoFormer class
                        with an NSP head, so that head is left out, with a warning)
  the modern block   -> ModernBERT (`ModernBertForMaskedLM`: pre-LN, GLU, rotary bases and
                        sliding windows in its config)
  ELECTRA            -> `ElectraForPreTraining`: the discriminator (the generator stays home)
hf_convert.export_arch refuses what a family cannot compute, with the setting that differs.

The weights are written by safetensors from numpy (transformers v5 has no Flax classes; torch
is not needed to export). A sentencepiece tokenizer becomes a fast tokenizer with the same ids
(transformers' SpmConverter); a run started from a Hugging Face model exports that model's own
tokenizer files, with the weights back in its ids. `verify` loads an export with transformers
(torch) and compares its MLM logits with mlmjax's. The command is export.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile

from absl import logging
import jax
import numpy as np

from mlmjax import errors
from mlmjax import paths
from mlmjax.data.text import hf_tokenizer
from mlmjax.hf import convert as hf_convert
from mlmjax.models import special_ids

SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog, 1234 times!"
# float32 logits of the same function computed by two frameworks agree to ~1e-5 here.
TOLERANCE = 1e-4


class ExportError(errors.UserError):
  pass


def require_transformers():
  """transformers (and safetensors), or a one-line error naming the extra."""
  if not all(importlib.util.find_spec(m) for m in ("safetensors", "transformers")):
    raise ExportError("exporting needs the [hf] extra: pip install -e '.[hf]'")
  import transformers  # pylint: disable=g-import-not-at-top  # the optional [hf] extra
  _sentencepiece_proto_that_loads()
  return transformers


def _sentencepiece_proto_that_loads() -> None:
  """transformers reads a sentencepiece model through sentencepiece's proto module. That of
  sentencepiece 0.2.3 was generated for protobuf 7 and refuses an older runtime, such as the
  protobuf 6 that apache-beam (the [beam] extra) requires; transformers carries the same
  messages in a module made for any protobuf >= 4, which then takes its place."""
  try:
    import sentencepiece.sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return  # no sentencepiece: transformers uses its own module anyway
  except Exception as e:  # pylint: disable=broad-except  # protobuf's VersionError
    if type(e).__name__ != "VersionError":
      raise
    import sentencepiece  # pylint: disable=g-import-not-at-top
    from transformers.utils import sentencepiece_model_pb2_new  # pylint: disable=g-import-not-at-top
    sys.modules["sentencepiece.sentencepiece_model_pb2"] = sentencepiece_model_pb2_new
    sentencepiece.sentencepiece_model_pb2 = sentencepiece_model_pb2_new


def export(run, out: str) -> None:
  """Writes the export of `run` (a training/finished_run.FinishedRun) into `out`."""
  transformers = require_transformers()
  model_cfg, tok = run.settings.model, run.tokenizer
  params = jax.tree.map(np.asarray, run.state["params"])
  arch = hf_convert.export_arch(run.settings.model, run.hf_model_type)
  nsp = "pooler" in params
  if arch.model_type != "bert" and nsp:
    logging.warning("transformers' %s has no NSP head: exporting the MLM head only",
                    arch.model_type)
    params = {k: v for k, v in params.items() if k not in ("pooler", "nsp_classifier")}
    nsp = False
  vocab_to_hf = getattr(tok, "vocab_to_hf", None)  # a Hugging Face tokenizer's own ids
  state = hf_convert.to_hf(params, arch, model_cfg, vocab_to_hf)
  pad_id = 0 if vocab_to_hf is None else int(vocab_to_hf[special_ids.PAD_ID])
  settings = hf_convert.hf_settings(arch, model_cfg, len(tok), pad_id)
  if arch.model_type == "modernbert":
    settings.update(cls_token_id=_hf_id(vocab_to_hf, special_ids.CLS_ID),
                    sep_token_id=_hf_id(vocab_to_hf, special_ids.SEP_ID),
                    bos_token_id=_hf_id(vocab_to_hf, special_ids.CLS_ID),
                    eos_token_id=_hf_id(vocab_to_hf, special_ids.SEP_ID))
  model_class = {"roformer": "RoFormerForMaskedLM", "bert": "BertForMaskedLM",
                 "modernbert": "ModernBertForMaskedLM",
                 "electra": "ElectraForPreTraining"}[arch.model_type]
  if nsp:
    model_class = "BertForPreTraining"
  hf_config = transformers.AutoConfig.for_model(**settings, architectures=[model_class])
  write(out, tok, model_cfg, hf_config, state)


def write(out: str, tok, model_cfg, hf_config, state: dict[str, np.ndarray],
          extra: dict[str, str] | None = None) -> None:
  """The export folder: tokenizer files, config.json, model.safetensors and `extra` files
  ({relative path: text}, e.g. sentence-transformers' module files)."""
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  if paths.exists(out) and (not paths.isdir(out) or paths.listdir(out)):
    raise ExportError(f"--out={out} exists and is not an empty folder")
  if isinstance(tok, hf_tokenizer.HFTokenizer):
    files = tok.files
  else:
    files = hf_tokenizer.from_sentencepiece(tok, model_cfg.max_position_embeddings)
  # Written beside `out` and renamed into place: a failed export leaves no half a model. A
  # bucket has no renames: the folder is made locally and uploaded, the weights last.
  remote = paths.is_remote(out)
  tmp = (tempfile.mkdtemp(prefix="mlmjax-export-") if remote else
         os.path.abspath(out).rstrip("/") + f".tmp{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  hf_tokenizer.write_files(files, tmp)
  hf_config.save_pretrained(tmp)
  for name, text in (extra or {}).items():
    os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
    with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
      f.write(text)
  weights = os.path.join(tmp, "model.safetensors")
  safetensors_numpy.save_file(state, weights, metadata={"format": "pt"})  # transformers: "pt"
  os.chmod(weights, 0o644)  # safetensors creates it owner-only, unlike the other files
  if remote:
    try:
      local = [os.path.relpath(os.path.join(d, f), tmp) for d, _, fs in os.walk(tmp) for f in fs]
      for name in sorted(local, key=lambda n: n == "model.safetensors"):
        paths.upload(os.path.join(tmp, name), paths.join(out, name))
    finally:
      shutil.rmtree(tmp, ignore_errors=True)
    return
  if os.path.isdir(out):
    os.rmdir(out)  # empty, checked above
  os.rename(tmp, out)


def _hf_id(vocab_to_hf, mlmjax_id: int) -> int:
  return mlmjax_id if vocab_to_hf is None else int(vocab_to_hf[mlmjax_id])


def mlm_logits(run, rows: list[list[int]], key: str = "mlm_logits"
               ) -> list[np.ndarray]:
  """mlmjax's MLM logits [T, V] at every position of each row of mlmjax ids (one jitted call:
  the rows are padded to the longest, and padding is masked out). `key='rtd_logits'`: an
  ELECTRA discriminator's [T] logits of the rows as they are."""
  n = max(map(len, rows))
  ids = np.zeros((len(rows), n), np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
  positions = np.broadcast_to(np.arange(n, dtype=np.int32), ids.shape)
  batch = {"input_ids": ids, "segment_ids": (positions < np.array([[len(r)] for r in rows])
                                             ).astype(np.int32),
           "positions": positions, "token_type_ids": np.zeros_like(ids),
           "masked_positions": positions}
  logits = np.asarray(run.forward(batch)[key])
  return [logits[i, :len(row)] for i, row in enumerate(rows)]


def verify(run, out: str, text: str = SAMPLE_TEXT) -> float:
  """Max |logit difference| between transformers' load of `out` and mlmjax on `text`;
  raises ExportError above TOLERANCE."""
  if paths.is_remote(out):  # transformers loads local folders only
    with tempfile.TemporaryDirectory() as local:
      paths.download(out, local)
      return verify(run, local, text)
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tok = run.tokenizer
  ids = [special_ids.CLS_ID] + tok.encode([text])[0] + [special_ids.SEP_ID]
  to_hf = getattr(tok, "vocab_to_hf", np.arange(len(tok)))
  transformers.logging.set_verbosity_error()  # load-time notices about classes, not the model
  arch = hf_convert.export_arch(run.settings.model, run.hf_model_type)
  if arch.model_type == "electra":  # the discriminator's replaced-or-not logits
    model = transformers.ElectraForPreTraining.from_pretrained(out).eval()
    with torch.no_grad():
      hf_logits = model(input_ids=torch.from_numpy(to_hf[ids][None])).logits[0].numpy()
    diff = float(np.abs(hf_logits - mlm_logits(run, [ids], "rtd_logits")[0]).max())
  else:
    model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    with torch.no_grad():
      hf_logits = model(input_ids=torch.from_numpy(to_hf[ids][None])).logits[0].numpy()
    diff = float(np.abs(hf_logits[:, to_hf] - mlm_logits(run, [ids])[0]).max())
  if not diff <= TOLERANCE:  # also catches NaN
    raise ExportError(f"{out}: transformers' logits differ from mlmjax's by {diff:.3g}"
                      f" (> {TOLERANCE}); the export is wrong, please report it")
  return diff
