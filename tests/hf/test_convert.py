"""hf_convert: the name mapping, layer stacking, the type-0 fold and the vocabulary permutation,
checked against real `transformers` models (random, tiny) on CPU."""

import json

import jax
import ml_collections
import numpy as np
import pytest
import transformers
from flax import nnx
from safetensors import numpy as safetensors_numpy

from mlmjax.configs import base
from mlmjax.data.text import hf_tokenizer
from mlmjax.hf import convert as hf_convert
from mlmjax.hf import importer
from mlmjax.models import bert as model_lib
from mlmjax.models.settings import ModelSettings

V, T = 40, 12
# HF ids of [PAD] [UNK] [CLS] [SEP] [MASK] in the test vocabularies: none at its mlmjax id.
SPECIALS = [1, 7, 3, 9, 30]


def _model_cfg(settings: dict) -> ml_collections.ConfigDict:
  cfg = base.get_config().model
  cfg.update(settings)
  cfg.dropout_rate = cfg.attention_dropout_rate = 0.0
  return cfg


def _mlmjax_model(cfg, params, nsp: bool):
  module = model_lib.BertForPretraining(ModelSettings.from_config(cfg), V, nnx.Rngs(params=0),
                                        nsp_head=nsp)
  graphdef, state = nnx.split(module)
  nnx.replace_by_pure_dict(state, params)
  return nnx.merge(graphdef, state)


def _hf_model(model_type: str):
  """A tiny random transformers model whose every weight is perturbed (transformers starts
  LayerNorms at 1/0 and biases at 0, which would hide a mapping error), including token type
  row 0, which mlmjax has to fold away."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  torch.manual_seed(0)
  common = dict(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=32, hidden_act="gelu")
  if model_type == "bert":
    model = transformers.BertForPreTraining(transformers.BertConfig(
        **common, max_position_embeddings=T, type_vocab_size=2, pad_token_id=SPECIALS[0]))
  elif model_type == "roberta":
    model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        **common, max_position_embeddings=T + 2, type_vocab_size=1, pad_token_id=1,
        layer_norm_eps=1e-5))
  else:
    model = transformers.RoFormerForMaskedLM(transformers.RoFormerConfig(
        **common, max_position_embeddings=T, type_vocab_size=2, pad_token_id=SPECIALS[0]))
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "embed_positions" not in name:  # RoFormer's fixed sinusoids
        p.add_(0.2 * torch.randn_like(p))
  return model.eval()


@pytest.mark.torch
@pytest.mark.parametrize("model_type", ["bert", "roberta", "roformer"])
def test_imported_checkpoint_computes_what_transformers_computes(model_type):
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  hf = _hf_model(model_type)
  nsp = model_type == "bert"
  arch, settings = hf_convert.model_settings(hf.config.to_dict(), pair_format=nsp)
  cfg = _model_cfg(settings)
  to_hf = hf_tokenizer.special_first(SPECIALS, V)
  state = {k: v.numpy() for k, v in hf.state_dict().items()}
  params, missing = hf_convert.from_hf(state, arch, cfg, nsp, to_hf)
  assert missing == []
  assert not params["type_embedding"][0].any()  # folded away

  rng = np.random.default_rng(0)
  ids = rng.integers(5, V, (2, T)).astype(np.int32)  # mlmjax ids, no padding
  types = (np.arange(T) >= T // 2).astype(np.int32)[None].repeat(2, 0) * (
      settings["type_vocab_size"] > 1 and model_type != "roberta")
  batch = {"input_ids": ids, "token_type_ids": types, "segment_ids": np.ones_like(ids),
           "positions": np.arange(T, dtype=np.int32)[None].repeat(2, 0),
           "masked_positions": np.arange(T, dtype=np.int32)[None].repeat(2, 0)}
  out = _mlmjax_model(cfg, params, nsp)(batch)
  with torch.no_grad():
    hf_out = hf(input_ids=torch.from_numpy(to_hf[ids]), token_type_ids=torch.from_numpy(types))
  hf_logits = (hf_out.prediction_logits if nsp else hf_out.logits).numpy()[..., to_hf]
  if arch.rope:  # the type-0 fold shifts each position's logits by one constant (module doc)
    log_softmax = lambda x: np.asarray(jax.nn.log_softmax(x, -1))
    np.testing.assert_allclose(log_softmax(out["mlm_logits"]), log_softmax(hf_logits),
                               atol=1e-4)
  else:
    np.testing.assert_allclose(out["mlm_logits"], hf_logits, atol=1e-4)
  if nsp:
    np.testing.assert_allclose(out["nsp_logits"], hf_out.seq_relationship_logits.numpy(),
                               atol=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize("model_type", ["bert", "roformer"])
def test_export_then_import_gives_back_the_same_parameters(model_type):
  """to_hf and from_hf are inverses (type row 0 is zero in mlmjax), vocabulary permutation
  and rotary column layout included; and transformers loads every exported tensor."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  rope = model_type == "roformer"
  cfg = _model_cfg(dict(hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                        max_position_embeddings=T, type_vocab_size=2,
                        position_embedding_type="rope" if rope else "learned"))
  module = model_lib.BertForPretraining(ModelSettings.from_config(cfg), V, nnx.Rngs(params=1),
                                        nsp_head=not rope)
  rng = np.random.default_rng(1)
  params = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32),
                        nnx.to_pure_dict(nnx.state(module)))
  params["type_embedding"][0] = 0.0
  to_hf = hf_tokenizer.special_first(SPECIALS, V)
  arch = hf_convert.Arch(model_type)
  state = hf_convert.to_hf(params, arch, cfg, to_hf)
  back, missing = hf_convert.from_hf(state, arch, cfg, not rope, to_hf)
  assert missing == []
  jax.tree.map(np.testing.assert_array_equal, back, params)

  # Parameters of another block design are refused, never dropped silently.
  with pytest.raises(hf_convert.ConversionError,
                     match=f"transformers' {model_type} has no place for final_norm/scale"):
    hf_convert.to_hf({**params, "final_norm": {"scale": np.ones(16)}}, arch, cfg, to_hf)

  settings = hf_convert.hf_settings(arch, cfg, V, pad_id=to_hf[0])
  hf = transformers.AutoModelForMaskedLM.from_config(transformers.AutoConfig.for_model(
      **settings))
  result = hf.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
  assert result.unexpected_keys == [] or not rope  # BERT's NSP head: not in *ForMaskedLM
  assert [k for k in result.missing_keys if "decoder" not in k] == []  # decoder: tied


def test_scanned_layers_are_unstacked_and_stacked_back():
  per_layer = {"token_embedding": np.ones((3, 2)), "blocks": {
      i: {"mlp_in": {"kernel": np.full((2, 4), float(i)), "bias": np.full(4, 10.0 + i)},
          "attention": {"qkv_kernel": np.full((3, 2, 1, 2), -float(i))}} for i in range(3)}}
  stacked = {"token_embedding": np.ones((3, 2)), "blocks": {
      "mlp_in": {"kernel": np.stack([np.full((2, 4), float(i)) for i in range(3)]),
                 "bias": np.stack([np.full(4, 10.0 + i) for i in range(3)])},
      "attention": {"qkv_kernel": np.stack([np.full((3, 2, 1, 2), -float(i))
                                            for i in range(3)])}}}
  jax.tree.map(np.testing.assert_array_equal, hf_convert.unstack_layers(stacked), per_layer)
  jax.tree.map(np.testing.assert_array_equal, hf_convert.stack_layers(per_layer), stacked)
  # Per-layer blocks stay as they are; ELECTRA's two towers are each unstacked.
  jax.tree.map(np.testing.assert_array_equal, hf_convert.unstack_layers(per_layer), per_layer)
  towers = {"generator": stacked, "discriminator": stacked}
  jax.tree.map(np.testing.assert_array_equal, hf_convert.unstack_layers(towers),
               {"generator": per_layer, "discriminator": per_layer})


def test_special_tokens_are_swapped_into_mlmjax_ids():
  bert = hf_tokenizer.special_first([0, 100, 101, 102, 103], 30522)
  assert list(bert[:5]) == [0, 100, 101, 102, 103] and list(bert[100:104]) == [1, 2, 3, 4]
  assert (bert[5:100] == np.arange(5, 100)).all() and (bert[104:] == np.arange(104, 30522)).all()
  roberta = hf_tokenizer.special_first([1, 3, 0, 2, 50264], 50265)  # pad unk <s> </s> <mask>
  assert list(roberta[:5]) == [1, 3, 0, 2, 50264] and roberta[50264] == 4
  assert sorted(roberta) == list(range(50265))


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gpt2"}, "model_type 'gpt2': mlmjax imports bert, roberta, roformer"),
    ({"hidden_act": "gelu_new"}, "hidden_act='gelu_new' is not supported (mlmjax computes 'gelu')"),
    ({"position_embedding_type": "relative_key"},
     "position_embedding_type='relative_key' is not supported (mlmjax computes 'absolute')"),
])
def test_models_mlmjax_cannot_compute_exactly_are_refused(change, message):
  config = {**transformers.BertConfig(hidden_size=16).to_dict(), **change}
  with pytest.raises(hf_convert.ConversionError, match=message.replace("(", r"\(").replace(
      ")", r"\)")):
    hf_convert.model_settings(config, pair_format=False)


@pytest.mark.torch
def test_weights_are_read_from_every_layout_transformers_writes(tmp_path):
  """model.safetensors, sharded safetensors with an index, pytorch_model.bin; old TF names
  (gamma/beta) and a bare encoder's unprefixed names read as transformers reads them."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  state = {"embeddings.LayerNorm.gamma": np.ones(4, np.float32),
           "embeddings.LayerNorm.beta": np.zeros(4, np.float32),
           "cls.predictions.bias": np.arange(3, dtype=np.float32)}
  wanted = {"bert.embeddings.LayerNorm.weight": state["embeddings.LayerNorm.gamma"],
            "bert.embeddings.LayerNorm.bias": state["embeddings.LayerNorm.beta"],
            "cls.predictions.bias": state["cls.predictions.bias"]}
  single, sharded, pickled = (tmp_path / n for n in ("single", "sharded", "pickled"))
  for folder in (single, sharded, pickled):
    folder.mkdir()
  safetensors_numpy.save_file(state, str(single / "model.safetensors"))
  names = sorted(state)
  for i, part in enumerate((names[:1], names[1:])):
    safetensors_numpy.save_file({k: state[k] for k in part}, str(sharded / f"model-{i}.st"))
  (sharded / "model.safetensors.index.json").write_text(json.dumps(
      {"weight_map": {k: f"model-{int(k != names[0])}.st" for k in names}}))
  torch.save({k: torch.from_numpy(v) for k, v in state.items()}, str(pickled / "pytorch_model.bin"))
  for folder in (single, sharded, pickled):
    read = importer._with_prefix(importer.read_weights(str(folder)), hf_convert.Arch("bert"))
    assert sorted(read) == sorted(wanted)
    for k, v in wanted.items():
      np.testing.assert_array_equal(read[k], v)
  with pytest.raises(importer.CheckpointReadError, match="has no model.safetensors or"):
    importer.read_weights(str(tmp_path))
