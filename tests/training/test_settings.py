"""Typed settings (training/settings.py and the section classes it bundles): the config is read
once into frozen sections with their config keys as fields; each section refuses a bad value of
its own keys in one line naming the key; a run's config.json is written from the settings."""

import dataclasses
import json

import pytest

from mlmjax.configs import base
from mlmjax.configs import spanbert
from mlmjax.data.masking.settings import Settings as MaskingSettings
from mlmjax.data.settings import InputSettings
from mlmjax.data.text.settings import TokenizerSettings
from mlmjax.errors import ConfigError
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning.settings import FinetuneSettings
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel.settings import MeshSettings
from mlmjax.training import objectives
from mlmjax.training.core import optimizer
from mlmjax.training.run_settings import RunSettings
from mlmjax.training.settings import EvalSettings, ObjectiveSettings, TrainSettings

SECTIONS = {"data": InputSettings, "tokenizer": TokenizerSettings, "masking": MaskingSettings,
            "model": ModelSettings, "objective": ObjectiveSettings, "train": TrainSettings,
            "optimizer": optimizer.OptimizerSettings, "mesh": MeshSettings, "eval": EvalSettings}


def test_every_config_key_is_a_typed_frozen_field_of_its_section():
  config = base.get_config()
  settings = RunSettings.from_config(config)
  for name, kind in SECTIONS.items():
    section = getattr(settings, name)
    assert isinstance(section, kind)
    assert {f.name for f in dataclasses.fields(kind) if f.init} == set(config[name].keys())
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.train.steps = 3  # pylint: disable=attribute-defined-outside-init
  assert isinstance(settings.optimizer.learning_rate, float)
  assert isinstance(settings.mesh.rules[0], tuple)


def test_the_saved_config_is_the_config_the_settings_came_from():
  config = spanbert.get_config("base")
  config.train.phases = ((0.9, 128, 20), (0.1, 512, 80, {"mask_rate": 0.15}))
  settings = RunSettings.from_config(config)
  assert json.loads(settings.to_config_dict().to_json_best_effort()) == json.loads(
      config.to_json_best_effort())
  assert RunSettings.from_config(settings.to_config_dict()) == settings


@pytest.mark.parametrize("key,value,message", [
    ("data.format", "pairs", "data.format='pairs' is not one of full_sentences,"
     " doc_sentences, segment_pair, sentence_pair, sop"),
    ("data.eval_every_nth_document", 1, "data.eval_every_nth_document=1 must be >= 2"),
    ("data.text_field", "", "data.text_field must name the field (.jsonl) or column (parquet,"
     " datasets) that holds the text, e.g. 'text'"),
    ("tokenizer.model_type", "wordpiece", "tokenizer.model_type='wordpiece' is not one of"
     " unigram, bpe"),
    ("masking.mask_rate", 0.0, "masking.mask_rate=0.0 must be strictly between 0 and 1"),
    ("masking.mask_rate_schedule", "sine", "masking.mask_rate_schedule='sine' is not one of"
     " constant, linear, cosine"),
    ("model.num_layers", 0, "model.num_layers=0 must be >= 1"),
    ("objective.span_boundary_weight", -1.0, "objective.span_boundary_weight must be >= 0"),
    ("optimizer.kind", "sgd", "optimizer.kind='sgd' is not one of adamw, lamb, muon"),
    ("optimizer.warmup_fraction", 0.1, "optimizer.warmup_steps and optimizer.warmup_fraction"
     " both set: give one (the other 0)"),
    ("train.grad_accum_steps", 0, "train.grad_accum_steps=0 must be >= 1"),
    ("train.batch_size", 0, "train.batch_size=0 must be >= 1"),
    ("train.batch_size", -4, "train.batch_size=-4 must be >= 1"),
    ("train.phases", ((0.5, 128, 20),), "train.phases=((0.5, 128, 20),): the fractions must"
     " sum to 1"),
    ("train.phases", ((1.0, 128),), "train.phases entry (1.0, 128) must be (fraction, seq_len,"
     " max_predictions[, options])"),
    ("train.phases", ((1.0, 128, 20, {"rope": 1.0}),), "train.phases entry (1.0, 128, 20,"
     " {'rope': 1.0}): its 4th item must be a dict of batch_size, rope_base, mask_rate,"
     " mask_rate_end, objective"),
    ("train.phases", ((1.0, 128, 20.5),), "train.phases entry (1.0, 128, 20.5): fraction,"
     " seq_len, max_predictions and the options must be numbers (objective a name)"),
    ("mesh.shape", (1, 0, 1), "config.mesh.shape=(1, 0, 1) must have 3 positive entries"
     " ('data', 'fsdp', 'tensor'), at most one of them -1"),
    ("mesh.rules", (("embed", "pipeline"),), "config.mesh.rules maps 'embed' to 'pipeline',"
     " which is not a mesh axis (data, fsdp, tensor)"),
    ("eval.mask_rate", 1.0, "eval.mask_rate=1.0 must be strictly between 0 and 1"),
])
def test_each_section_refuses_a_bad_value_in_one_line_naming_the_key(key, value, message):
  config = base.get_config()
  section, name = key.split(".")
  config[section][name] = value
  with pytest.raises(ConfigError) as e:
    SECTIONS[section].from_config(config[section])
  assert str(e.value) == message
  with pytest.raises(ConfigError) as e:  # the same line from the whole config
    RunSettings.from_config(config)
  assert str(e.value) == message


def test_a_key_that_moved_or_never_was_is_refused_in_one_line():
  """A config made in Python (a preset of yours) that still sets an optimizer key under train
  is told where it went; a key no section reads is refused, not dropped."""
  config = base.get_config()
  config.train.learning_rate = 1e-3
  with pytest.raises(ConfigError, match=r"^train.learning_rate is now optimizer.learning_rate"
                     r" \(the optimizer's keys have a section of their own\): set that instead$"):
    RunSettings.from_config(config)
  config = base.get_config()
  config.masking.mask_rat = 0.2
  with pytest.raises(ConfigError, match=r"^masking.mask_rat: no such config key$"):
    RunSettings.from_config(config)


def test_an_unregistered_objective_is_refused_by_the_run_settings():
  """objective.kind names a registered objective (objectives/), which the registry checks."""
  config = base.get_config()
  config.objective.kind = "gpt"
  with pytest.raises(ConfigError) as e:
    RunSettings.from_config(config)
  # those registered (in this process: a test's own too, tests/training/test_objective_plugin.py)
  assert str(e.value) == (f"objective.kind='gpt' is not one of {', '.join(objectives.names())}"
                          " (one of your own: its module in user_dir, or --user_dir=FILE)")
  assert {"clm", "diffusion", "electra", "mlm"} <= set(objectives.names())


def test_a_whole_number_key_refuses_a_fraction():
  config = base.get_config()
  with pytest.raises(ConfigError) as e:
    TrainSettings.from_config({**config.train, "steps": 2.5})
  assert str(e.value) == "train.steps=2.5 must be a whole number"


def test_replace_makes_the_changed_sections_again_by_their_rules():
  settings = RunSettings.from_config(base.get_config())
  shorter = settings.replace(seed=3, train={"steps": 10}, model={"rope_base": 160_000})
  assert (shorter.seed, shorter.train.steps, shorter.model.rope_base) == (3, 10, 160_000.0)
  assert isinstance(shorter.model.rope_base, float) and shorter.data is settings.data
  assert settings.train.steps == base.get_config().train.steps  # the original is unchanged
  with pytest.raises(ConfigError, match=r"^eval.mask_rate=0.0 must be strictly between"):
    settings.replace(eval={"mask_rate": 0.0})
  # A misspelled key is refused, not dropped: the copy would silently keep the old value.
  with pytest.raises(ConfigError, match=r"^train.stepz: no such config key$"):
    settings.replace(train={"stepz": 10})
  with pytest.raises(ConfigError, match=r"^trian: no such config section or key$"):
    settings.replace(trian={"steps": 10})


@pytest.mark.parametrize("key,value,message", [
    ("data.max_train_examples", -1, "data.max_train_examples=-1 must be >= 0 (0: all)"),
    ("model.dropout_rate", 1.0, "model.dropout_rate=1.0 must be in [0, 1)"),
    ("model.pooling", "max", "model.pooling='max' is not one of auto, cls, mean"),
    ("optimizer.kind", "muon", "optimizer.kind='muon' is not one of adamw, lamb"),
    ("train.epochs", 0.0, "train.epochs=0.0 must be > 0"),
    ("optimizer.warmup_fraction", 1.0, "optimizer.warmup_fraction=1.0 must be in [0, 1)"),
    ("train.nonfinite_policy", "retry", "train.nonfinite_policy='retry' is not one of skip,"
     " stop"),
    ("qa.doc_stride", 0, "qa.doc_stride=0 must be >= 1"),
    ("train.batch_size", 0, "train.batch_size=0 must be >= 1"),
    ("embedding.temperature", 0.0, "embedding.temperature=0.0 must be > 0"),
])
def test_the_finetuning_sections_refuse_bad_values_in_one_line(key, value, message):
  config = finetune_config.get_config()
  section, name = key.split(".")
  config[section][name] = value
  with pytest.raises(ConfigError) as e:
    FinetuneSettings.from_config(config)
  assert str(e.value) == message


def test_finetuning_optimizer_is_linear_warmup_then_decay_over_the_run():
  """Fine-tuning's optimizer is pretraining's section with BERT's fine-tuning defaults: a
  warmup over 10% of the run's steps, then linear decay to 0."""
  config = FinetuneSettings.from_config(finetune_config.get_config()).optimizer
  assert (config.kind, config.warmup(200), config.schedule) == ("adamw", 20, "linear")
  schedule = optimizer.learning_rate_schedule(config, total_steps=200)
  peak = config.learning_rate
  assert [float(schedule(s)) for s in (10, 20, 110, 200)] == pytest.approx(
      [peak / 2, peak, peak / 2, 0.0])


def test_phases_are_typed_and_saved_in_their_config_form():
  """train.phases entries, given as the command line and config.json write them (tuples, JSON
  lists, the options' dict), are PhaseSpecs in the settings and the same entries again in the
  saved config: config.json's format stays."""
  config = base.get_config()
  config.train.phases = ((0.9, 128, 20), [0.1, 512, 80, {"rope_base": 1e5, "batch_size": 64}])
  settings = RunSettings.from_config(config)
  first, second = settings.train.phases
  assert (first.fraction, first.seq_len, first.max_predictions, first.rope_base) == (
      0.9, 128, 20, None)
  assert (second.seq_len, second.rope_base, second.batch_size) == (512, 1e5, 64)
  assert isinstance(second.rope_base, float) and isinstance(second.batch_size, int)
  assert settings.to_config_dict().train.phases == (
      (0.9, 128, 20), (0.1, 512, 80, {"batch_size": 64, "rope_base": 1e5}))
  assert settings.replace(train={"steps": 5}).train.phases == settings.train.phases
