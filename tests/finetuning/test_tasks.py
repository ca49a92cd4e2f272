"""Fine-tuning tasks without a model: GLUE's metrics, the offline tasks' split, examples read
from CSV/TSV/JSONL files and from a prepared tfds dataset, encoding, and clear errors."""

import json
import re

import numpy as np
import pytest
from scipy import stats
import tensorflow_datasets as tfds

from mlmjax.data.corpora import sources
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.errors import CommandLineError
from mlmjax.errors import DataError
from mlmjax.finetuning import examples as examples_lib
from mlmjax.finetuning import glue_metrics
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning import kjv_tasks
from mlmjax.finetuning import tasks
from mlmjax.models import special_ids


def test_glue_metrics_against_their_definitions():
  labels = np.array([1, 0, 0, 1, 1, 0, 1, 1])
  predicted = np.array([1, 0, 1, 1, 0, 0, 1, 0])
  tp, tn, fp, fn = 3, 2, 1, 2
  assert glue_metrics.accuracy(predicted, labels) == 5 / 8
  assert glue_metrics.f1(predicted, labels) == pytest.approx(2 * tp / (2 * tp + fp + fn))
  mcc = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  assert glue_metrics.matthews_corr(predicted, labels) == pytest.approx(mcc)
  # A constant predictor has MCC 0 (not NaN); no positives at all gives F1 0.
  assert glue_metrics.matthews_corr(np.ones(8, int), labels) == 0.0
  assert glue_metrics.f1(np.zeros(4, int), np.zeros(4, int)) == 0.0
  rng = np.random.default_rng(0)
  truth = rng.uniform(0, 5, 50)
  guess = truth + rng.normal(0, 1, 50)
  out = glue_metrics.compute(("pearson", "spearman"), guess[:, None], truth)
  assert out["pearson"] == pytest.approx(np.corrcoef(guess, truth)[0, 1])
  assert out["spearman"] == pytest.approx(
      np.corrcoef(stats.rankdata(guess), stats.rankdata(truth))[0, 1])
  logits = np.eye(3)[[0, 2, 1, 1]] * 5.0  # argmax: 0 2 1 1
  assert glue_metrics.compute(("accuracy",), logits, np.array([0, 2, 2, 1])) == {
      "accuracy": 0.75}


def test_kjv_tasks_dev_is_the_text_pretraining_holds_out():
  held_out_text = "\n".join(sources.load_splits("builtin", 50)[1])
  trained_text = "\n".join(sources.load_splits("builtin", 50)[0])
  train, dev, names = kjv_tasks.testament()
  assert names == ["Old Testament", "New Testament"]
  assert (len(train), len(dev)) == (15602, 314)
  assert train.labels.mean() == dev.labels.mean() == 0.5  # balanced
  assert all(t[0] in held_out_text for t in dev.texts)
  dev_verses = {t[0] for t in dev.texts}
  assert not dev_verses & {t[0] for t in train.texts}
  assert train.labels[[t[0].startswith("In the beginning was the Word") for t in
                       train.texts]].tolist() == [1]
  train, dev, names = kjv_tasks.next_verse()
  assert (len(train), len(dev)) == (29239, 555)
  assert 0.45 < dev.labels.mean() < 0.55 and 0.45 < train.labels.mean() < 0.55
  for (a, b), label in zip(dev.texts, dev.labels):
    assert a in held_out_text and b in held_out_text
    assert (f"{a}\n{b}" in held_out_text) == bool(label)
  assert all(a in trained_text for a, _ in train.texts[:200])
  # Fixed: the same examples every time.
  again = kjv_tasks.next_verse()[1]
  assert again.texts == dev.texts and (again.labels == dev.labels).all()


def test_examples_from_csv_tsv_and_jsonl(tmp_path):
  (tmp_path / "train.csv").write_text(
      'premise,hypothesis,gold\n"He came, and saw",He saw,yes\nA b,C d,no\nE f,G h,maybe\n')
  (tmp_path / "dev.tsv").write_text('premise\thypothesis\tgold\n"Quoted" x\ty\tno\n')
  data = tasks.load("nli", str(tmp_path / "train.csv"), str(tmp_path / "dev.tsv"),
                    "premise,hypothesis", "gold")
  assert data.train.texts[0] == ("He came, and saw", "He saw")
  assert data.dev.texts == [('"Quoted" x', "y")]  # a .tsv keeps its quotes
  assert data.label_names == ["maybe", "no", "yes"] and data.kind(None).num_outputs == 3
  assert data.train.labels.tolist() == [2, 1, 0] and data.dev.labels.tolist() == [1]
  assert data.task.metrics == ("accuracy", "matthews_corr")  # binary F1 dropped for 3 classes
  lines = [json.dumps({"text": f"verse {i}", "score": i / 2}) for i in range(5)]
  (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
  data = tasks.load("similarity", str(tmp_path / "s.jsonl"), str(tmp_path / "s.jsonl"),
                    label_field="score", regression=True)
  assert data.train.labels.dtype == np.float32 and data.train.labels[3] == 1.5
  assert data.kind(None).num_outputs == 1 and data.task.metrics == ("pearson", "spearman")
  assert data.kind(None).baseline(data.train, data.dev) == {}


def test_encode_truncates_the_longer_text_first(tokenizer_path):
  tok = tokenizer_lib.Tokenizer.load(tokenizer_path)
  a, b = "And God said, Let there be light: and there was light.", "Amen."
  rows = kind_lib.encode_texts(examples_lib.Examples([(a, b), (b,) * 2], np.array([1, 0])),
                               tok, 12, "test")
  ids_a, ids_b = tok.encode([a, b])
  cls, sep = special_ids.CLS_ID, special_ids.SEP_ID
  assert rows["input_ids"][0].tolist() == [cls, *ids_a[:12 - 3 - len(ids_b)], sep, *ids_b, sep]
  assert rows["token_type_ids"][0].tolist() == [0] * (12 - 1 - len(ids_b)) + [1] * (
      len(ids_b) + 1)
  n = 3 + 2 * len(ids_b)
  assert rows["segment_ids"][1].tolist() == [1] * n + [0] * (12 - n)
  assert rows["input_ids"][1, n:].tolist() == [special_ids.PAD_ID] * (12 - n)


def _raises(message):
  return pytest.raises(DataError, match=re.escape(message))


def test_task_errors(tmp_path):
  (tmp_path / "t.csv").write_text("sentence,label\nabc,1\nxyz,0\n")
  (tmp_path / "d.csv").write_text("sentence,label\nabc,2x\n")
  with pytest.raises(CommandLineError, match=re.escape("unknown --task='sst'")):
    tasks.load("sst")
  with pytest.raises(CommandLineError, match=re.escape("give both --train_file and --dev_file"
                                                      " (or neither)")):
    tasks.load("mine", train_file=str(tmp_path / "t.csv"))
  with _raises(f"{tmp_path}/t.csv: record 1 has no field 'text' (it has sentence, label);"
               " name the fields with --text_fields and --label_field"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"))
  with _raises(f"{tmp_path}/t.csv: dev label '2x' never occurs in the training set"
               " (its labels: 0, 1)"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"), "sentence")
  with _raises(f"{tmp_path}/d.csv: label '2x' is not a number (a regression task)"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"), "sentence",
               regression=True)
  with _raises(f"{tmp_path}/nope.csv: no such file"):
    tasks.load("mine", str(tmp_path / "nope.csv"), str(tmp_path / "d.csv"))
  with _raises("--text_fields='a,b,c': name one field, or two for pairs"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"), "a,b,c")
  with _raises("unknown --kind='ner': use one of classification, regression,"
               " token_classification, question_answering, multiple_choice, embedding"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"), kind="ner")
  with _raises("--task=kjv_qa is a question_answering task, not multiple_choice"):
    tasks.load("kjv_qa", kind="multiple_choice")
  with _raises("--regression: --task=mine is a token_classification task"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"), regression=True,
               kind="token_classification")
  with _raises("--text_fields and --label_field name the fields of classification and"
               " embedding files; a question_answering file's fields are fixed"):
    tasks.load("mine", str(tmp_path / "t.csv"), str(tmp_path / "d.csv"), "q",
               kind="question_answering")


class MlmjaxTinyPairs(tfds.core.GeneratorBasedBuilder):
  """A GLUE-shaped pair task (MRPC's fields), to read through tfds' array_record source."""

  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "sentence1": tfds.features.Text(), "sentence2": tfds.features.Text(),
        "label": tfds.features.ClassLabel(names=["not_equivalent", "equivalent"]),
        "idx": np.int32}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(12), "validation": self._generate_examples(4)}

  def _generate_examples(self, n):
    for i in range(n):
      yield i, {"sentence1": f"sentence {i}", "sentence2": f"other {i}", "label": i % 2,
                "idx": i}


def test_glue_task_from_tfds(tmp_path, monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
  # A GLUE task as the table defines them, on a dataset this test can prepare offline.
  monkeypatch.setitem(tasks.TASKS, "mlmjax_tiny_pairs", tasks.Task(
      "mlmjax_tiny_pairs", text_fields=("sentence1", "sentence2"), metrics=("f1", "accuracy")))
  with _raises(f"--task=mlmjax_tiny_pairs: dataset 'mlmjax_tiny_pairs' is not prepared in"
               f" {tmp_path}; prepare it with `tfds build mlmjax_tiny_pairs"
               f" --file_format=array_record --data_dir={tmp_path}`, or set TFDS_DATA_DIR to"
               " where it is"):
    tasks.load("mlmjax_tiny_pairs")
  MlmjaxTinyPairs(data_dir=str(tmp_path), file_format="array_record").download_and_prepare()
  data = tasks.load("mlmjax_tiny_pairs")
  assert (len(data.train), len(data.dev)) == (12, 4)
  assert sorted(data.dev.texts) == [(f"sentence {i}", f"other {i}") for i in range(4)]
  assert data.label_names == ["not_equivalent", "equivalent"]
  assert sorted(data.train.labels.tolist()) == [0] * 6 + [1] * 6
  # The real GLUE, absent here (no download): one line that says how to get it.
  with _raises(f"--task=glue/mrpc: no dataset 'glue/mrpc' in {tmp_path} or in the tfds catalog;"
               " prepare it with `tfds build glue/mrpc --file_format=array_record"):
    tasks.load("glue/mrpc")
