"""Prepared data: `python -m mlmjax.prepare` (worker processes), the same batches as the raw
text, only a process's own files opened, one-line refusals; a run resumed across raw/prepared
and onto grain worker processes ends exactly as one that never stopped."""

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mlmjax.configs import tiny
from conftest import (REPO, assert_resumed, assert_same_arrays, base_shape, build_input, prepare,
                      saved_state, train_iter, user_env)
from masking_cases import NLP
from mlmjax.data import pipeline
from mlmjax.data.prepared import reader
from mlmjax.data.rows import formats
from mlmjax.data.text import annotation
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax import errors
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training import train

NUM_FILES = 8


@pytest.fixture(scope="module")
def kjv(tmp_path_factory, tokenizer_path):
  """The built-in corpus prepared with the session tokenizer, as a user runs the command."""
  out = str(tmp_path_factory.mktemp("prepared") / "kjv")
  run = subprocess.run(
      [sys.executable, "-m", "mlmjax.prepare", "--source=builtin", f"--out={out}",
       "--config=configs/tiny.py", f"--config.tokenizer.path={tokenizer_path}", "--workers=2",
       f"--num_files={NUM_FILES}"],
      cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert "Tokenizing into 8 files per split with 2 worker processes" in run.stderr
  assert "1189/1189" in run.stderr  # the progress bar reached every document
  return out


def _config(micro_config, source):
  micro_config.data.source = source
  return micro_config


def _batches(config, tmp_path, name, train_batches=3):
  run = workdir_lib.Workdir(str(tmp_path / name))
  os.makedirs(run.path)
  inp = build_input(config, run.tokenizers, run.vocab_stats)
  it = inp.train_iter(base_shape(config))
  return [next(it) for _ in range(train_batches)] + list(inp.eval_batches(base_shape(config)))


def test_manifest_and_files(kjv, tokenizer_path):
  manifest = json.load(open(os.path.join(kjv, reader.MANIFEST)))
  assert manifest["splits"]["train"]["documents"] == 1165
  assert manifest["splits"]["eval"]["documents"] == 24
  assert manifest["tokenizer"] == {
      "fingerprint": reader.fingerprint(tok_lib.Tokenizer.load(tokenizer_path)),
      "vocab_size": 512}
  assert manifest["id_dtype"] == "uint16" and manifest["num_files"] == NUM_FILES
  names = sorted(os.listdir(kjv))
  assert names == sorted([reader.MANIFEST, reader.TOKENIZERS["sentencepiece"], reader.STATS] + [
      reader.file_name(s, f, NUM_FILES) for s in reader.SPLITS for f in range(NUM_FILES)])


@pytest.mark.parametrize("data_format", formats.FORMATS)
def test_prepared_data_gives_the_same_batches_as_raw_text(kjv, micro_config, tmp_path,
                                                          data_format):
  micro_config.data.format = data_format
  micro_config.masking.strategy = "static" if data_format == "sop" else "mixture"
  micro_config.masking.mixture = "random=0.3,whole_word=0.3,span=0.4"
  raw = _batches(_config(micro_config, "builtin"), tmp_path, "raw")
  ready = _batches(_config(micro_config, f"prepared:{kjv}"), tmp_path, "prepared")
  assert len(raw) == len(ready) == 3 + micro_config.train.eval_batches
  for a, b in zip(raw, ready):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("data_format", ["full_sentences", "segment_pair"])
def test_each_shard_opens_only_its_own_files(kjv, micro_config, make_masker, data_format):
  """Shard 1 of 4 (what process 1 of 4 reads) opens only files 1 and 5 of 8, NSP negatives
  included."""
  config = _config(micro_config, f"prepared:{kjv}")
  config.data.format, config.data.num_shards = data_format, 4
  split = reader.open_source(config.data.source).split("train")
  tok = tok_lib.Tokenizer.load(config.tokenizer.path)
  spec = train_iter(config, tok, split, make_masker(config)).spec
  spec = dataclasses.replace(spec, shards=(1,))  # process 1's view
  it = pipeline.ShardedIterator(spec, pipeline.Masking(spec, make_masker(config), 0))
  for _ in range(40):
    next(it)
  assert sorted(split._files) == [1, 5]  # pylint: disable=protected-access


def test_a_run_refuses_what_the_data_does_not_fit(kjv, micro_config, tmp_path, corpus):
  config = _config(micro_config, f"prepared:{kjv}")
  run = workdir_lib.Workdir(str(tmp_path))

  def error(config):
    with pytest.raises(errors.UserError) as e:
      build_input(config, run.tokenizers, run.vocab_stats)
    return str(e.value)

  other = tok_lib.train_tokenizer(corpus[0][:100], 300, "unigram", 10_000)
  other_path = str(tmp_path / "other.model")
  other.save(other_path)
  theirs, ours = reader.fingerprint(other), json.load(
      open(os.path.join(kjv, reader.MANIFEST)))["tokenizer"]["fingerprint"]
  config.tokenizer.path = other_path
  assert error(config) == (
      f"config.tokenizer.path={other_path!r} is not the tokenizer {kjv} was prepared with"
      f" (fingerprint {theirs}, the data's {ours}): drop the setting to use the data's, or"
      " prepare again with it")
  config.tokenizer.path = ""
  other.save(run.tokenizer)  # a workdir trained with another tokenizer
  assert error(config) == (
      f"{run.tokenizer} (this run's) is not the tokenizer {kjv} was prepared with (fingerprint"
      f" {theirs}, the data's {ours}): prepare the data with"
      f" --config.tokenizer.path={run.tokenizer}, or use a new --workdir")
  config.data.eval_every_nth_document = 20
  assert error(config).startswith("data.eval_every_nth_document=20, but")
  config.data.eval_every_nth_document = 50
  config.data.num_shards = 16
  config.train.batch_size = 16
  assert error(config).startswith(f"{kjv} has 8 files per split, which 16 data shards")
  config.data.source = f"prepared:{tmp_path}/nothing"
  assert error(config).startswith(f"config.data.source='prepared:{tmp_path}/nothing': no"
                                  " directory")


def test_prepare_refuses_bad_output_and_prepared_input(kjv, tmp_path):
  config = tiny.get_config()
  with pytest.raises(errors.UserError, match=f"--out={kjv} exists and is not an empty folder"):
    prepare(config, "builtin", kjv)
  with pytest.raises(errors.UserError, match="is prepared already"):
    prepare(config, f"prepared:{kjv}", str(tmp_path / "again"))
  assert not os.path.exists(tmp_path / "again")


@pytest.mark.slow
def test_resume_from_raw_text_onto_prepared_data_and_workers_is_exact(kjv, micro_config,
                                                                      tmp_path, caplog):
  """8 steps from the text in this process; the same run stopped after step 4's checkpoint
  and resumed from the prepared data with 2 grain worker processes and device prefetch ends
  with the same parameters."""
  straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
  micro_config.data.source = "builtin"
  train.train_and_evaluate(micro_config, straight)
  shutil.copytree(straight, split)
  shutil.rmtree(os.path.join(split, "checkpoints", "8"))  # as if it had stopped after step 4
  micro_config.data.source = f"prepared:{kjv}"
  micro_config.data.worker_count = 2
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, split)
  assert_resumed(split, 4, caplog.text)
  a, b = saved_state(straight), saved_state(split)
  assert int(a["step"]) == int(b["step"]) == 8
  assert_same_arrays(a, b)
  rows = [json.loads(line) for line in open(os.path.join(split, "metrics.jsonl"))]
  waits = [r["input_wait_fraction"] for r in rows if "input_wait_fraction" in r]
  assert len(waits) == 4 and all(0 <= w <= 1 for w in waits)


@pytest.mark.slow
def test_words_annotated_once_by_prepare_give_the_batches_of_annotating_the_text(
    micro_config, tmp_path, corpus, monkeypatch):
  """With a strategy that reads spaCy's annotations, prepare stores them (parsed with
  nlp.pipe) and training from the folder, where spaCy need not be installed, gets the batches
  that annotating the text as it is read gives; a folder prepared without them is refused in
  one line."""
  source = str(tmp_path / "chapters.jsonl")
  with open(source, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": d}) + "\n" for d in corpus[0][:30])
  config = _config(micro_config, source)
  config.data.eval_every_nth_document = 10
  config.masking.strategy = "syntax"
  config.masking.nlp_pipeline = NLP
  manifest = prepare(config, source, str(tmp_path / "annotated"), num_files=2)
  assert manifest["annotations"] == {"pipeline": NLP, "features": list(annotation.FEATURES)}
  raw = _batches(config, tmp_path, "raw", train_batches=2)
  with monkeypatch.context() as without_spacy:  # as on an accelerator host fed prepared data
    without_spacy.setitem(sys.modules, "spacy", None)  # import spacy -> ImportError
    without_spacy.setattr(annotation, "_LOADED", {})
    from_prepared = _batches(_config(config, f"prepared:{tmp_path / 'annotated'}"), tmp_path,
                             "prepared", train_batches=2)
    run = workdir_lib.Workdir(str(tmp_path / "no_spacy"))  # the text itself needs spaCy
    os.makedirs(run.path)
    with pytest.raises(annotation.AnnotatorError) as e:
      build_input(_config(config, source), run.tokenizers, run.vocab_stats)
    assert str(e.value) == ("masking.nlp_pipeline: this masking strategy annotates words with"
                            f" spaCy, which is not installed: {annotation.INSTALL}")
  for a, b in zip(raw, from_prepared):
    assert_same_arrays(a, b)
  plain = config.copy_and_resolve_references()
  plain.masking.strategy = "random"
  prepare(plain, source, str(tmp_path / "plain"), num_files=2)
  run = workdir_lib.Workdir(str(tmp_path / "refused"))
  os.makedirs(run.path)
  with pytest.raises(errors.DataError) as e:
    build_input(_config(config, f"prepared:{tmp_path / 'plain'}"), run.tokenizers,
                run.vocab_stats).train_iter(base_shape(config))
  assert str(e.value) == (
      f"PreparedSplit({str(tmp_path / 'plain')!r}, 'train', 27 documents) was prepared without"
      " word annotations, which this masking needs (syntax, or entity with entity_ner):"
      " prepare it again with this run's config")
