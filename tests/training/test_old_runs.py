"""Runs saved by an earlier mlmjax still load: config.json is read onto today's defaults
(mlmjax/training/saved_config.py)."""

import json
import logging
import os
import subprocess
import sys

import pytest

from mlmjax.configs import base
from mlmjax.configs import bert
from conftest import REPO, latest_step, user_env
from mlmjax import errors
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import tasks
from mlmjax.finetuning import trainer
from mlmjax.hf import exporter
from mlmjax.inference import fill_mask as predict
from mlmjax.training import finished_run
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training import run_settings
from mlmjax.training import saved_config
from mlmjax.training import train

# A config.json as mlmjax wrote it on 2026-11-24 (commit 9dcaede: `python -m mlmjax.main
# --config=configs/tiny.py --config.train.steps=2 --config.model.num_layers=1
# --config.train.eval_batches=1 --config.train.log_every_steps=1`), before config_version and
# the keys added since (mask rate schedules, linguistic masking, phases' options, ...).
EARLIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "config_9dcaede.json")
# A config.json of format 1 as mlmjax wrote it on 2026-12-08 (53d00ca: configs/tiny.py with
# train.learning_rate=3e-3, train.optimizer='lamb', train.warmup_steps=7), before format 2 moved
# the optimizer's keys to optimizer.*.
FORMAT_1 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                        "config_53d00ca.json")
# Keys added to configs/base.py after runs had been saved: a config.json of then lacks them.
ADDED_SINCE = ("masking.mask_rate_schedule", "masking.mask_rate_end", "optimizer.schedule_unit",
               "optimizer.muon_momentum", "optimizer.muon_rms", "data.sources", "eval")
TEXT = "And God said, Let there be [MASK]: and there was light."


def _pop(saved: dict, dotted: str):
  *parents, leaf = dotted.split(".")
  for p in parents:
    saved = saved[p]
  return saved.pop(leaf)


def _set(saved: dict, dotted: str, value) -> None:
  *parents, leaf = dotted.split(".")
  for p in parents:
    saved = saved.setdefault(p, {})
  saved[leaf] = value


def _write_as_earlier_mlmjax(run: workdir_lib.Workdir, extra: dict | None = None) -> dict:
  """Rewrites the run's config.json as an mlmjax of before ADDED_SINCE wrote it (no version,
  none of those keys; `extra`: dotted keys to add); returns today's reading of it."""
  saved = json.loads(open(run.config).read())
  assert saved.pop(saved_config.VERSION_KEY) == saved_config.VERSION
  expected = json.loads(json.dumps(saved))
  today = json.loads(saved_config.defaults().to_json_best_effort())
  for dotted in ADDED_SINCE:
    _pop(saved, dotted)
    _set(expected, dotted, _pop(today, dotted))
  for dotted, value in (extra or {}).items():
    _set(saved, dotted, value)
  with open(run.config, "w") as f:
    json.dump(saved, f, indent=2)
  return expected


def _command(module: str, *args: str) -> subprocess.CompletedProcess:
  """One of mlmjax's commands, run as a user runs it."""
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=user_env(),
                        capture_output=True, text=True, timeout=300)


def _saved_form(settings) -> dict:
  return json.loads(settings.to_config_dict().to_json_best_effort())


@pytest.mark.slow
@pytest.mark.torch  # exporter.verify loads the export
def test_a_run_saved_by_an_earlier_mlmjax_evaluates_predicts_exports_finetunes_resumes(
    tmp_path, caplog):
  """A run whose config.json is the real one an earlier mlmjax wrote (EARLIER), its checkpoint
  trained to that config, is evaluated, predicted with, exported, fine-tuned and resumed."""
  earlier = json.load(open(EARLIER))
  settings = saved_config.load(EARLIER).settings.replace(train={"steps": 4})
  # Its keys where today's format keeps them (the optimizer's moved from train.* in format 2).
  expected = saved_config.read(EARLIER)
  expected["train"]["steps"] = 4
  workdir = str(tmp_path / "run")
  train.train_and_evaluate(settings, workdir)
  run = workdir_lib.Workdir(workdir)
  fills = predict.Predictor(workdir).fill_mask(TEXT)
  earlier["train"]["steps"] = 4
  with open(run.config, "w") as f:
    json.dump(earlier, f)

  # Every saved value is kept; the keys it lacks take today's defaults, types included.
  config = run.load_config()
  saved = _saved_form(config)
  assert earlier["train"]["learning_rate"] == config.optimizer.learning_rate
  for section, values in expected.items():
    if isinstance(values, dict):
      for key, value in values.items():
        assert saved[section][key] == value, f"{section}.{key}"
    else:
      assert saved[section] == values, section
  assert "mask_rate_schedule" not in earlier["masking"] and "schedule_unit" not in earlier["train"]
  assert (config.masking.mask_rate_schedule, config.optimizer.schedule_unit,
          config.eval.mask_rate) == ("constant", "steps", 0.15)
  assert isinstance(config.mesh.shape, tuple) and isinstance(config.mesh.rules[0], tuple)

  predictor = predict.Predictor(workdir)
  assert predictor.step == 4 and predictor.fill_mask(TEXT) == fills
  scores = json.loads(_command("mlmjax.evaluate", f"--workdir={workdir}").stdout)
  assert (scores["step"], scores["mask_rate"], scores["batches"]) == (4, 0.15, 1)
  assert 0 < scores["loss"] < 10
  out = str(tmp_path / "hf")
  loaded = finished_run.load(workdir)
  exporter.export(loaded, out)
  assert json.load(open(os.path.join(out, "config.json")))["model_type"] == "roformer"
  assert exporter.verify(loaded, out, "And God said, Let there be light.") < exporter.TOLERANCE

  ft_config = finetune_config.get_config()
  ft_config.data.update(seq_len=32, max_train_examples=32)
  ft_config.train.update(epochs=1.0, batch_size=16)
  results = trainer.finetune(ft_config, workdir, tasks.load("kjv_testament"),
                             str(tmp_path / "finetune"))
  assert (results["pretrained_step"], results["steps"]) == (4, 2)

  # Training on resumes from the run's checkpoint and saves today's format.
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(config.replace(train={"steps": 8}), workdir)
  assert "Resumed from checkpoint at step 4" in caplog.text
  assert latest_step(workdir) == 8
  resaved = json.load(open(run.config))
  assert resaved[saved_config.VERSION_KEY] == saved_config.VERSION
  assert resaved["optimizer"]["schedule_unit"] == "steps" and "optimizer" not in resaved["train"]


def _saved_today(tmp_path, config=None) -> workdir_lib.Workdir:
  run = workdir_lib.Workdir(str(tmp_path))
  run.save_config(config or base.get_config())
  return run


def test_a_config_json_without_the_keys_added_since_reads_onto_todays_defaults(tmp_path):
  run = _saved_today(tmp_path)
  expected = _write_as_earlier_mlmjax(run, {"train.learning_rate": 1})  # JSON's int, moved
  config = run.load_config()
  assert config.optimizer.learning_rate == 1.0 and isinstance(config.optimizer.learning_rate, float)
  expected["optimizer"]["learning_rate"] = 1.0
  assert _saved_form(config) == expected


def test_keys_mlmjax_no_longer_knows_are_named_in_one_warning_line(tmp_path, caplog):
  run = _saved_today(tmp_path)
  _write_as_earlier_mlmjax(run, {"masking.dynamic": True, "legacy": {"knob": 1}})
  with caplog.at_level(logging.WARNING):
    config = run.load_config()
  named = [r.getMessage() for r in caplog.records if "no longer knows" in r.getMessage()]
  assert named == [f"{run.config}: ignoring keys this mlmjax no longer knows: legacy,"
                   " masking.dynamic"]
  assert not hasattr(config.masking, "dynamic") and not hasattr(config, "legacy")


def test_a_fresh_config_json_has_the_format_version_and_round_trips_exactly(tmp_path):
  config = bert.get_config("base")
  config.train.phases = ((0.9, 128, 20), (0.1, 512, 80, {"mask_rate": 0.15, "mask_rate_end": 0.1}))
  run = _saved_today(tmp_path, config)
  text = open(run.config).read()
  assert json.loads(text)[saved_config.VERSION_KEY] == saved_config.VERSION
  loaded = run.load_config()
  # tuples stay tuples, the option dict a dict
  assert loaded.to_config_dict().to_dict() == config.to_dict()
  run.save_config(loaded.to_config_dict())
  assert open(run.config).read() == text


@pytest.mark.parametrize("key,value,message", [
    ("train.steps", "many", "train.steps='many' cannot be read: today train.steps is of type"
                            " int"),
    ("model", 3, "model=3 cannot be read: today model is a group of keys"),
    ("model.mlp", "relu", "model.mlp='relu' is not one of gelu, geglu, swiglu"),
])
def test_a_saved_value_todays_mlmjax_refuses_is_a_one_line_error(tmp_path, key, value, message):
  run = _saved_today(tmp_path)
  _write_as_earlier_mlmjax(run, {key: value})
  with pytest.raises(errors.DataError) as e:
    run.load_config()
  assert str(e.value) == f"{run.config}: {message}"


def test_a_fine_tuning_runs_config_is_not_read_as_a_pretraining_run(tmp_path):
  config = finetune_config.get_config()
  config.run = {"task": "kjv_testament", "init": "pretrained"}
  run = _saved_today(tmp_path, config)
  with pytest.raises(errors.UserError, match="config.json is a fine-tuning run's config: give"
                     " the workdir of a pretraining run"):
    run.load_config()


def test_a_config_json_of_a_newer_format_is_refused_in_one_line_by_the_command(tmp_path):
  run = _saved_today(tmp_path)
  saved = json.load(open(run.config))
  saved[saved_config.VERSION_KEY] = saved_config.VERSION + 1
  with open(run.config, "w") as f:
    json.dump(saved, f)
  proc = _command("mlmjax.predict", f"--workdir={run.path}", TEXT)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      f"error: {run.config} has config_version={saved_config.VERSION + 1}: this mlmjax reads"
      f" formats up to {saved_config.VERSION}; load the run with a newer mlmjax")


def test_a_config_json_of_format_1_has_its_optimizer_keys_read_into_their_section():
  saved = json.load(open(FORMAT_1))
  assert saved[saved_config.VERSION_KEY] == 1
  settings = saved_config.load(FORMAT_1).settings
  moved = [(s, k, n) for (s, k), n in run_settings.MOVED_IN_2.items() if k in saved[s]]
  assert len(moved) == 16  # all but warmup_fraction (a key of fine-tuning's train.* then)
  for section, key, (new_section, new_key) in moved:
    assert getattr(getattr(settings, new_section), new_key) == saved[section][key], key
  assert (settings.optimizer.kind, settings.optimizer.learning_rate,
          settings.optimizer.warmup_steps) == ("lamb", 3e-3, 7)
  resaved = json.loads(saved_config.dumps(settings.to_config_dict()))
  assert resaved[saved_config.VERSION_KEY] == saved_config.VERSION == 2
  assert not set(resaved["train"]) & {key for _, key in run_settings.MOVED_IN_2}
