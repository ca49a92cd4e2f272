"""Starting a run from a Hugging Face checkpoint: `--config.init_from=hf:FOLDER`.

    configure(settings)      the model's architecture keys from FOLDER/config.json, and
                             FOLDER's tokenizer as the run's tokenizer (copied into the workdir
                             by data/tokenizer.get_tokenizer, like any user tokenizer)
    initial_state(...)       the train state of step 0: the checkpoint's parameters, sharded
                             like the run's state, and a fresh optimizer state

A BERT, RoBERTa or RoFormer checkpoint (safetensors, or pytorch_model.bin with torch) becomes
the same function in mlmjax: the name mapping and the corrections that keep it exact are in
convert.py. Pretraining heads the checkpoint lacks (RoBERTa has no NSP head; a bare encoder
has no MLM head) start from mlmjax's own initialisation, and the log says which. Only a fresh
run reads the weights: a resumed run continues from its own checkpoints.
"""

from __future__ import annotations

import json
import os

from absl import logging
import jax
import numpy as np

from mlmjax import errors
from mlmjax.data.rows import formats
from mlmjax.hf import convert as hf_convert
from mlmjax.models.settings import ModelSettings
from mlmjax.models import param_names

# Names of old TF-converted BERT checkpoints, which transformers renames on load as well.
_LEGACY_NAMES = ((".gamma", ".weight"), (".beta", ".bias"))


class CheckpointReadError(hf_convert.ConversionError):
  """A checkpoint folder without weights mlmjax can read."""


def init_from_folder(init_from: str) -> str | None:
  """The Hugging Face model folder of `init_from='hf:FOLDER'` (None when empty)."""
  if not init_from:
    return None
  if not init_from.startswith("hf:"):
    raise errors.ConfigError(f"init_from={init_from!r} must be 'hf:FOLDER', a Hugging Face"
                             " model folder (config.json, model.safetensors, tokenizer files)")
  folder = init_from[len("hf:"):]
  if not os.path.isfile(os.path.join(folder, "config.json")):
    raise errors.ConfigError(f"init_from={init_from!r}: no config.json there (not a Hugging"
                             " Face model folder)")
  return folder


def _read_json(path: str) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def read_config(folder: str) -> dict:
  return _read_json(os.path.join(folder, "config.json"))


def _arch_and_settings(init_from: str, data_format: str) -> tuple[hf_convert.Arch, dict]:
  folder = init_from_folder(init_from)
  try:
    return hf_convert.model_settings(read_config(folder), formats.has_pair_labels(data_format))
  except hf_convert.ConversionError as e:
    raise hf_convert.ConversionError(f"init_from={init_from!r}: {e}") from None


def configure(model: ModelSettings, init_from: str, data_format: str) -> ModelSettings:
  """`model` with the architecture of the checkpoint named by `init_from` (data_format: whether
  the run has an NSP head)."""
  _, keys = _arch_and_settings(init_from, data_format)
  changed = {k: v for k, v in keys.items() if getattr(model, k) != v}
  if changed:
    logging.info("From %s/config.json: %s", init_from_folder(init_from),
                 ", ".join(f"model.{k}={v!r}" for k, v in changed.items()))
  return model.replace(**keys)


def tokenizer_folder(init_from: str, tokenizer_path: str) -> str:
  """The tokenizer a run from `init_from` trains with: the checkpoint's own (its embedding rows
  are its ids), which tokenizer.path may only repeat."""
  folder = init_from_folder(init_from)
  if tokenizer_path and os.path.abspath(tokenizer_path) != os.path.abspath(folder):
    raise errors.ConfigError(
        f"init_from={init_from!r} trains with {folder}'s own tokenizer (the embedding rows are"
        f" its ids): leave tokenizer.path empty, not {tokenizer_path!r}")
  return folder


def read_weights(folder: str) -> dict[str, np.ndarray]:
  """The checkpoint's tensors by name: model.safetensors (sharded or not), else
  pytorch_model.bin (needs torch)."""
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  single = os.path.join(folder, "model.safetensors")
  index = single + ".index.json"
  if os.path.isfile(single):
    state = safetensors_numpy.load_file(single)
  elif os.path.isfile(index):
    state = {}
    for shard in sorted(set(_read_json(index)["weight_map"].values())):
      state.update(safetensors_numpy.load_file(os.path.join(folder, shard)))
  elif os.path.isfile(os.path.join(folder, "pytorch_model.bin")):
    try:
      import torch  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise CheckpointReadError(f"{folder} holds pytorch_model.bin: install torch to read"
                                " it") from None
    loaded = torch.load(os.path.join(folder, "pytorch_model.bin"), map_location="cpu",
                        weights_only=True)
    state = {k: v.float().numpy() for k, v in loaded.items()}
  else:
    raise CheckpointReadError(f"{folder} has no model.safetensors or pytorch_model.bin")
  for old, new in _LEGACY_NAMES:
    state = {k[:-len(old)] + new if k.endswith(old) else k: v for k, v in state.items()}
  return state


def _with_prefix(state: dict, arch: hf_convert.Arch) -> dict:
  """A bare encoder's checkpoint (BertModel.save_pretrained) names its tensors without the
  model prefix of the *ForMaskedLM classes."""
  if any(k.startswith(arch.prefix) for k in state):
    return state
  heads = ("cls.", "lm_head.")
  return {k if k.startswith(heads) else arch.prefix + k: v for k, v in state.items()}


def _by_path(tree) -> dict[str, np.ndarray]:
  """{'blocks/0/mlp_in/kernel': leaf} (list indices and dict keys alike)."""
  return {param_names.param_name(param_names.path_keys(path)): x
          for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def imported_params(init_from: str, model: ModelSettings, data_format: str, tok, abstract_params
                    ) -> tuple[dict[str, np.ndarray], list[str]]:
  """The checkpoint's parameters in mlmjax's layout, by path (numpy), checked against the
  model's shapes, and the names of the head parameters it lacks."""
  arch, _ = _arch_and_settings(init_from, data_format)
  state = _with_prefix(read_weights(init_from_folder(init_from)), arch)
  nsp = formats.has_pair_labels(data_format)
  try:
    params, missing = hf_convert.from_hf(state, arch, model, nsp,
                                         getattr(tok, "vocab_to_hf", None))
  except hf_convert.ConversionError as e:
    raise hf_convert.ConversionError(f"init_from={init_from!r}: {e}") from None
  if not all(isinstance(k, int) for k in abstract_params["blocks"]):
    params = hf_convert.stack_layers(params)  # a scanned model: one stacked block
  params, wanted = _by_path(params), _by_path(abstract_params)
  for name, value in params.items():
    shape = wanted[name].shape if name in wanted else "absent"
    if np.shape(value) != shape:
      raise hf_convert.ConversionError(
          f"init_from={init_from!r}: {name} is {np.shape(value)} in the checkpoint and"
          f" {shape} in the model")
  return params, missing


def initial_state(init_from: str, model: ModelSettings, data_format: str, setup, tok):
  """Step 0 of a run from the checkpoint: its parameters (each placed straight onto its
  sharding, on every process alike), the rest from `setup.init_fn()`: the heads it lacks and
  the optimizer state (Adam/LAMB moments start at zero whatever the parameters)."""
  state = setup.init_fn()
  params, missing = imported_params(init_from, model, data_format, tok,
                                    setup.abstract_state["params"])

  def place(path, fresh, target):
    value = params.get(param_names.param_name(param_names.path_keys(path)))
    if value is None:
      return fresh  # a head the checkpoint lacks
    value = np.asarray(value, np.float32)
    return jax.make_array_from_callback(value.shape, target, lambda index: value[index])

  state["params"] = jax.tree_util.tree_map_with_path(place, state["params"],
                                                     setup.state_shardings["params"])
  logging.info("Initialised %s parameters from %s%s",
               f"{sum(int(np.size(x)) for x in params.values()):,}", init_from,
               f"; not in the checkpoint, freshly initialised: {', '.join(missing)}"
               if missing else "")
  return state
