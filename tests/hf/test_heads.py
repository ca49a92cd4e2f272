"""A fine-tuned model leaves as the matching transformers class, for each task kind, with
transformers computing mlmjax's outputs (hf/heads.py). BERT (learned positions, with and
without a pretrained NSP pooler) here, from freshly initialised fine-tuning models: every
parameter is random, so every tensor's place is checked; RoFormer's classes are checked on
trained runs in tests/finetuning/test_finetune.py."""

import json
import os

import jax
import numpy as np
import pytest

from mlmjax.configs import tiny
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import finished
from mlmjax.finetuning import tasks
from mlmjax.finetuning import trainer
from mlmjax.finetuning.settings import FinetuneMesh, FinetuneSettings
from mlmjax.hf import exporter
from mlmjax.hf import heads
from mlmjax.parallel import sharding
from mlmjax.training import assembly


LABELS = {"classification": ["no", "yes", "maybe"], "token_classification": ["O", "B-X", "I-X"]}


def _model(kind_name: str, tokenizer_path: str, format_: str, pooling: str = "auto"):
  """A FinetunedModel of `kind_name` on a small learned-position encoder, initialised."""
  config = tiny.get_config()
  config.tokenizer.path = tokenizer_path
  config.data.format = format_
  config.model.update(position_embedding_type="learned", hidden_size=32, num_layers=2,
                      num_heads=2, intermediate_size=64, max_position_embeddings=64)
  pre = assembly.Assembly.of(config)
  ft = finetune_config.get_config()
  ft.data.seq_len, ft.model.pooling, ft.qa.max_query_length = 32, pooling, 8
  settings = FinetuneSettings.from_config(ft)
  tok = tokenizer_lib.Tokenizer.load(tokenizer_path)
  kind = tasks.make_kind(kind_name, settings, LABELS.get(kind_name, []))
  mesh = sharding.make_mesh(FinetuneMesh((1, 1, 1)), devices=jax.devices()[:1])
  setup = trainer.model_setup(settings, pre, kind, tok.vocab_size, mesh, total_steps=1)
  record = {"task": "test", **kind.record()}
  return finished.FinetunedModel(settings, record, pre.settings, tok, kind, 0,
                                 setup.init_fn()["params"], setup)


@pytest.mark.torch  # heads.verify loads the export
@pytest.mark.parametrize("kind,format_,hf_class", [
    ("classification", "segment_pair", "BertForSequenceClassification"),  # NSP's pooler
    ("regression", "full_sentences", "BertForSequenceClassification"),  # a new pooler
    ("token_classification", "full_sentences", "BertForTokenClassification"),
    ("question_answering", "full_sentences", "BertForQuestionAnswering"),
    ("multiple_choice", "segment_pair", "BertForMultipleChoice"),
    ("embedding", "full_sentences", "BertModel"),
])
def test_each_kind_exports_with_transformers_outputs(kind, format_, hf_class, tokenizer_path,
                                                    tmp_path):
  model = _model(kind, tokenizer_path, format_)
  out = str(tmp_path / "hf")
  assert heads.export(model, out) == hf_class
  assert heads.verify(model, out) <= exporter.TOLERANCE
  config = json.load(open(os.path.join(out, "config.json")))
  assert config["architectures"] == [hf_class]
  if kind == "classification":
    assert config["id2label"] == {"0": "no", "1": "yes", "2": "maybe"}
  if kind == "regression":
    assert (len(config["id2label"]), config["problem_type"]) == (1, "regression")
  if kind == "embedding":  # sentence-transformers' layout: the encoder, then mean pooling
    modules = json.load(open(os.path.join(out, "modules.json")))
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling"]
    pooling = json.load(open(os.path.join(out, "1_Pooling", "config.json")))
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    assert pooling["word_embedding_dimension"] == 32


def test_what_transformers_cannot_hold_is_refused_in_one_line(tokenizer_path, tmp_path):
  model = _model("classification", tokenizer_path, "full_sentences", pooling="mean")
  with pytest.raises(exporter.ExportError, match="^BertForSequenceClassification reads the"
                     r" \[CLS\] state; this run was fine-tuned with model.pooling='mean'$"):
    heads.export(model, str(tmp_path / "a"))
  rotary = _model("classification", tokenizer_path, "full_sentences")
  rotary.pretrained = rotary.pretrained.replace(model={"position_embedding_type": "rope"})
  with pytest.raises(exporter.ExportError, match="^transformers has no roformer class with"
                     r" mlmjax's classification head; exported for: bert"
                     r" \(BertForSequenceClassification\)$"):
    heads.export(rotary, str(tmp_path / "b"))
  assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")
  np.testing.assert_equal(heads.CLASSES["embedding"]["roformer"], "RoFormerModel")
