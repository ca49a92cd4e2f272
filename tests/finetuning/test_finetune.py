"""Fine-tuning, evaluation and plots of a real (briefly) pretrained run: on 8 fake devices in
this process, and through the commands as a user runs them (subprocesses, one device)."""

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from mlmjax.configs import tiny
import command_lines
from conftest import REPO, assert_resumed, saved_state, train_on_one_device, user_env
from mlmjax.data import run_input as input_lib
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax import errors
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import embeddings
from mlmjax.finetuning import finished
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning.settings import FinetuneSettings
from mlmjax.finetuning import tasks
from mlmjax.finetuning import trainer
from mlmjax.hf import exporter
from mlmjax.hf import heads
from mlmjax.inference import embeddings as embed
from mlmjax.models import param_names
from mlmjax.models import special_ids
from mlmjax.training.planning import phases
from mlmjax.training.run import loop
from mlmjax.training.run import metrics as metrics_lib
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training import train

pytestmark = pytest.mark.slow  # every test starts from a pretrained run; commands as subprocesses

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, tokenizer_path):
  """A small model pretrained briefly on the built-in corpus at tiny.py's 30% mask rate."""
  config = tiny.get_config()
  config.tokenizer.path = tokenizer_path
  config.model.update(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
  config.train.update(steps=100, batch_size=32, eval_every_steps=100, checkpoint_every_steps=100,
                      log_every_steps=50, eval_batches=2)
  config.optimizer.update(warmup_steps=20)
  return train_on_one_device(config, str(tmp_path_factory.mktemp("pretrained") / "run"))


def _finetune_config(**train):
  config = finetune_config.get_config()
  config.data.update(seq_len=64, max_train_examples=256)
  config.train.update(epochs=2.0, log_every_steps=4, **train)
  config.optimizer.update(learning_rate=1e-3)
  return config


def test_finetune_on_8_devices_from_the_checkpoint_and_from_random_init(pretrained, tmp_path):
  """The machinery on 8 devices. Whether pretraining pays is measured on a real pretraining
  run (README, "Fine-tuning"): a brief one in a test does not learn enough to show it."""
  data = tasks.load("kjv_testament")
  results = {init: trainer.finetune(_finetune_config(), pretrained, data, str(tmp_path / init),
                                    random_init=init == "random")
             for init in ("pretrained", "random")}
  r, baseline = results["pretrained"], results["random"]
  assert (r["pretrained_step"], r["init"]) == (100, "pretrained")
  assert (baseline["pretrained_step"], baseline["init"]) == (None, "random")
  assert r["dev"] != baseline["dev"]  # different encoders, same examples and head
  assert (r["train_examples"], r["dev_examples"], r["steps"]) == (256, 314, 16)
  assert set(r["dev"]) == {"loss", "accuracy", "f1", "matthews_corr"}
  assert [h["step"] for h in r["dev_history"]] == [8, 16]  # after each epoch
  assert r["dev_history"][-1] == {"step": 16, **r["dev"]}
  assert r["dev_majority_class_accuracy"] == 0.5
  out = workdir_lib.Workdir(str(tmp_path / "pretrained"))
  assert json.load(open(out.results)) == r
  logged = [row for row in metrics_lib.rows(out.metrics) if "loss" in row]
  assert [row["step"] for row in logged] == [4, 8, 12, 16]
  assert logged[-1]["loss"] < logged[0]["loss"]
  assert open(out.curves, "rb").read(8) == PNG_SIGNATURE
  # The same command on a finished run trains nothing and scores the same checkpoint.
  again = trainer.finetune(_finetune_config(), pretrained, data, out.path)
  assert again == r
  # As fine-tuned by an earlier mlmjax (no task kinds: no qa/embedding keys, no kind or labels
  # in the run record, which results.json holds): it loads with its labels and re-scores.
  saved = json.load(open(out.config))
  for section in ("qa", "embedding"):
    del saved[section]
  for key in ("kind", "label_names", "num_outputs"):
    del saved["run"][key]
  json.dump(saved, open(out.config, "w"))
  model = finished.load(out.path)
  assert (model.kind.name, model.kind.label_names) == ("classification", r["label_names"])
  assert trainer.finetune(_finetune_config(), pretrained, data, out.path)["dev"] == r["dev"]
  with pytest.raises(errors.UserError, match="holds a fine-tuning run of kjv_testament"
                     " \\(pretrained init from .*\\): give another --output_dir"):
    trainer.finetune(_finetune_config(), pretrained, data, out.path, random_init=True)


def _flat(tree) -> dict[str, np.ndarray]:
  """{'blocks/0/mlp_in/kernel': array}, however the tree spells its layer indices."""
  return {param_names.param_name(param_names.path_keys(path)): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.e2e  # also at the newest jax (.ci/newest_jax)
def test_finetuning_starts_from_the_pretrained_encoder(pretrained, tmp_path):
  """At learning rate 0 no step moves a parameter, so the fine-tuned run's encoder is exactly
  what it started from: it must be the pretrained checkpoint's parameters, every one of them (a
  loader that initialised at random, or loaded only part of the tree, fails here). The random
  baseline, built with the same seed as pretraining's init, starts elsewhere in every
  parameter pretraining trained."""
  encoders = {}
  for init in ("pretrained", "random"):
    config = _finetune_config()
    config.train.update(epochs=32 / 256)  # one step of batch 32
    config.optimizer.learning_rate = 0.0
    out = workdir_lib.Workdir(str(tmp_path / init))
    r = trainer.finetune(config, pretrained, tasks.load("kjv_testament"), out.path,
                         random_init=init == "random")
    assert r["steps"] == 1
    state = ocp.StandardCheckpointer().restore(os.path.join(out.checkpoints, "1", "state"))
    encoders[init] = _flat(state["params"]["encoder"])
  loaded = _flat(saved_state(pretrained)["params"])
  assert encoders["pretrained"].keys() == loaded.keys()
  for name, value in loaded.items():
    np.testing.assert_array_equal(encoders["pretrained"][name], value, err_msg=name)
  assert encoders["random"].keys() == loaded.keys()
  same = {k for k, v in loaded.items() if np.array_equal(encoders["random"][k], v)}
  assert same == {"type_embedding"}  # read by pair formats only: pretraining never moved it


@pytest.mark.parametrize("policy,message", [
    ("skip", "step 4: 4 non-finite steps in a row (more than train.max_consecutive_skips=3);"
             " stopping"),
    ("stop", "step 1: non-finite loss or gradients; the update was not applied and nothing"
             " after the last checkpoint was saved (lower optimizer.learning_rate, or set"
             " train.nonfinite_policy='skip')")])
def test_finetune_stops_on_nonfinite_steps_as_pretraining_does(pretrained, tmp_path,
                                                                monkeypatch, policy, message):
  """Every training batch is poisoned (NaN example weights): the shared non-finite policy
  stops the run after train.max_consecutive_skips skipped steps, or at once with 'stop'."""
  encode = kind_lib.encode_texts

  def poisoned(examples, tok, seq_len, split):
    rows = encode(examples, tok, seq_len, split)
    if split == "train":
      rows["weights"] = np.full_like(rows["weights"], np.nan)
    return rows
  monkeypatch.setattr(kind_lib, "encode_texts", poisoned)
  config = _finetune_config(nonfinite_policy=policy, max_consecutive_skips=3,
                            checkpoint_every_steps=2)
  with pytest.raises(loop.NonFiniteError) as e:
    trainer.finetune(config, pretrained, tasks.load("kjv_testament"), str(tmp_path / "out"))
  assert str(e.value) == message
  assert not os.path.exists(tmp_path / "out" / "checkpoints" / "4")  # the step that stopped


def test_held_out_metrics_are_at_the_eval_mask_rate(pretrained):
  """Training masked 30%; held-out batches mask eval.mask_rate (15%) of the maskable tokens."""
  run = workdir_lib.Workdir(pretrained)
  s = run.load_config()
  assert (s.masking.mask_rate, s.eval.mask_rate) == (0.3, 0.15)
  assert input_lib.held_out_max_predictions(s.data.seq_len, s.eval.mask_rate) == 9  # 0.15 x 62
  run_input = input_lib.held_out_input(
      s.data, s.masking, input_lib.HeldOut(s.eval.mask_rate, s.train.eval_batches),
      s.objective.span_boundary_weight > 0, run.tokenizer, run.vocab_stats)
  masked = maskable = 0
  for batch in run_input.eval_batches(phases.plan(s).whole_run):
    masked += batch["masked_weights"].sum()
    specials = (special_ids.CLS_ID, special_ids.SEP_ID)  # ([MASK] inputs were maskable)
    maskable += ((batch["segment_ids"] > 0) & ~np.isin(batch["input_ids"], specials)).sum()
  assert 0.14 < masked / maskable < 0.16, masked / maskable
  with pytest.raises(errors.ConfigError, match="eval.mask_rate=1.0 must be strictly between 0"
                     " and 1"):
    s.replace(eval={"mask_rate": 1.0})


def test_finetune_config_rules(pretrained):
  pre = workdir_lib.Workdir(pretrained).load_config()
  config = _finetune_config()
  config.data.seq_len = 200
  with pytest.raises(errors.ConfigError, match="data.seq_len=200 must be between 5 and the"
                     " pretrained model's max_position_embeddings=128"):
    FinetuneSettings.from_config(config).check_against(pre.model)
  config = _finetune_config(batch_size=12)
  with pytest.raises(errors.ConfigError, match="train.batch_size=12 must be divisible by"):
    FinetuneSettings.from_config(config).check_against(pre.model)  # 8 devices


def _run(*args, stdin=None):
  return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=user_env(),
                        capture_output=True, text=True, timeout=300, input=stdin)


def test_evaluate_finetune_plot_and_tokenizer_commands(pretrained, tmp_path):
  """The commands as a user runs them, in order (one process imports mlmjax once and runs each
  line as `python -m` would: tests/command_lines.py)."""
  # Your own sentence-pair task from files (string labels), through the command.
  for split, verses in (("train", range(0, 40)), ("dev", range(40, 56))):
    rows = ["first,second,relation"] + [
        f'"Verse {i}, said he",Verse {i + 1},{"next" if i % 2 else "other"}' for i in verses]
    (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n")
  output = workdir_lib.Workdir(pretrained).finetune("pairs")
  png = tmp_path / "both.png"
  evaluated, pairs, glue, plot, no_plot = command_lines.run([
      ["mlmjax.evaluate", f"--workdir={pretrained}"],
      ["mlmjax.finetune", f"--workdir={pretrained}", "--task=pairs",
       f"--train_file={tmp_path}/train.csv", f"--dev_file={tmp_path}/dev.csv",
       "--text_fields=first,second", "--label_field=relation", "--config.data.seq_len=32",
       "--config.train.epochs=1", "--config.train.batch_size=8"],
      ["mlmjax.finetune", f"--workdir={pretrained}", "--task=glue/sst"],
      # Two runs overlaid: a PNG a person can read (look at it: tests cannot).
      ["mlmjax.plot", f"--workdir={pretrained}", output.path, f"--out={png}"],
      ["mlmjax.plot", f"--workdir={tmp_path}"]], env=user_env(), line_timeout=300)

  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  out = json.loads(evaluated.stdout)
  assert (out["step"], out["mask_rate"], out["documents"], out["batches"]) == (100, 0.15, 24, 2)
  assert out["perplexity"] == pytest.approx(np.exp(out["loss"]))
  assert out["mlm_accuracy"] > out["constant_baseline_accuracy"] > 0

  assert pairs.returncode == 0, pairs.stderr[-3000:]
  results = json.loads(pairs.stdout)
  assert results["output_dir"] == output.path and results["label_names"] == ["next", "other"]
  assert json.load(open(output.results)) == results
  assert (results["steps"], results["dev_examples"]) == (5, 16)
  # The embedding command needs an embedding run: one line, before loading the checkpoint.
  with pytest.raises(errors.UserError, match=r"^pairs is a classification run; embedding needs"
                     r" a sentence-embedding run \(--task=kjv_retrieval, or --kind=embedding\)$"):
    embed.check_kind(finished.saved_record(output.path))

  assert glue.returncode == 2  # the command line asks for what mlmjax cannot do
  assert glue.stderr.strip().splitlines()[-1].startswith("error: unknown --task='glue/sst': use"
                                                         " one of kjv_testament, kjv_next_verse")

  assert plot.returncode == 0, plot.stderr[-3000:]
  # The curves' picture, then the pretraining run's goodput (a fine-tuning run keeps none).
  printed = plot.stdout.strip().splitlines()
  assert printed[0] == str(png) and printed[1].startswith(f"{pretrained}: goodput ")
  assert printed[-1] == os.path.join(pretrained, "goodput.png")
  assert png.read_bytes()[:8] == PNG_SIGNATURE and png.stat().st_size > 20_000
  assert open(os.path.join(pretrained, "curves.png"), "rb").read(8) == PNG_SIGNATURE  # training's
  assert no_plot.returncode == 1
  assert no_plot.stderr.strip() == (f"error: {tmp_path} holds no metrics"
                                    f" ({tmp_path}/metrics.jsonl does not exist)")


def test_tokenizer_command(tmp_path):
  model = tmp_path / "tok.model"
  proc = _run("mlmjax.tokenizer", "train", f"--output={model}", "--vocab_size=300",
              "--max_sentences=2000")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip() == f"{model}: 300 pieces"
  tok = tokenizer_lib.Tokenizer.load(str(model))
  text = "In the beginning God created the heaven and the earth."
  proc = _run("mlmjax.tokenizer", "encode", f"--tokenizer={model}", text, "Amen.")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines() == [" ".join(map(str, ids)) for ids in
                                      tok.encode([text, "Amen."])]
  proc = _run("mlmjax.tokenizer", "encode", f"--tokenizer={model}", "--pieces", stdin=text)
  assert proc.stdout.splitlines() == [" ".join(tok.id_to_piece(i) for i in tok.encode([text])[0])]
  assert tok.decode(tok.encode([text])[0]) == text
  proc = _run("mlmjax.tokenizer", "encode", text)
  assert (proc.returncode, proc.stderr.strip()) == (  # a command line it cannot run
      2, "error: encode needs --tokenizer=PATH.model or --workdir=RUN (one of them)")


@pytest.mark.torch  # heads.verify loads the export
@pytest.mark.parametrize("task,hf_class", [
    ("kjv_entities", "RoFormerForTokenClassification"),
    ("kjv_qa", "RoFormerForQuestionAnswering"),
    ("kjv_continuation", "RoFormerForMultipleChoice"),
    ("kjv_retrieval", "RoFormerModel"),
])
def test_each_task_kind_trains_resumes_exactly_and_exports(task, hf_class, pretrained, tmp_path,
                                                           caplog):
  """Each kind through the same machinery on 8 devices: a run resumed from its step-2
  checkpoint (as a preemption after step 2 leaves it) ends exactly where the uninterrupted run
  ends (same dev scores, same parameters), and its model leaves as transformers' class with
  the same outputs. (What each kind learns from a real pretraining run: docs/finetuning.md's table.)"""
  data = tasks.load(task)
  # A QA example is several rows (windows of its 4-verse context).
  data = dataclasses.replace(data, train=data.train.take(range(8 if task == "kjv_qa" else 32)),
                             dev=data.dev.take(range(8 if task == "kjv_qa" else 16)))
  config = _finetune_config(batch_size=8, checkpoint_every_steps=2, max_checkpoints_to_keep=9)
  config.train.epochs = 1.0
  config.qa.max_query_length = 24
  if task != "kjv_qa":
    config.data.seq_len = 32  # a verse, or two for the pair kinds, mostly fits
  cache, loaded = tmp_path / "compile_cache", []  # where the resume finds its compiled steps
  config.train.compilation_cache = str(cache)
  full = trainer.finetune(config, pretrained, data, str(tmp_path / "full"))
  # One row an example; a QA context longer than the row is several windows, each a row.
  assert full["train_rows"] == 32 or task == "kjv_qa" and full["train_rows"] > 8
  assert full["steps"] == -(-full["train_rows"] // 8) and full["kind"] == data.task.kind
  assert full["headline_metric"] in full["dev"]
  # The run as a preemption after step 2 leaves it: its folder with step 2's checkpoint only.
  shutil.copytree(tmp_path / "full", tmp_path / "resumed")
  for step in os.listdir(tmp_path / "resumed" / "checkpoints"):
    if step != "2":
      shutil.rmtree(tmp_path / "resumed" / "checkpoints" / step)
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _, **__: loaded.append(event)
      if event == "/jax/compilation_cache/cache_retrieval_time_sec" else None)
  with caplog.at_level(logging.INFO):
    resumed = trainer.finetune(config, pretrained, data, str(tmp_path / "resumed"))
  assert_resumed(tmp_path / "resumed", 2, caplog.text)
  assert resumed["dev"] == full["dev"]
  assert loaded and any(name.startswith("jit_train_step-") for name in os.listdir(cache))
  last = {run: _flat(ocp.StandardCheckpointer().restore(os.path.join(
      tmp_path, run, "checkpoints", str(full["steps"]), "state"))["params"])
          for run in ("full", "resumed")}
  for name, value in last["full"].items():
    np.testing.assert_array_equal(last["resumed"][name], value, err_msg=name)
  model = finished.load(str(tmp_path / "full"))
  if task == "kjv_retrieval":  # `python -m mlmjax.embed`'s vectors: the dev pairs' own
    vectors = embed.embed(model, data.dev.anchors + data.dev.positives, batch_size=16)
    scores = embeddings.retrieval_metrics(vectors[:16], vectors[16:], 20.0)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert scores == pytest.approx(full["dev"], abs=1e-5)
  assert model.step == full["steps"]
  assert heads.export(model, str(tmp_path / "hf")) == hf_class
  assert heads.verify(model, str(tmp_path / "hf")) <= exporter.TOLERANCE
