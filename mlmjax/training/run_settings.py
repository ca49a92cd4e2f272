"""A pretraining run's settings: the config turned, once, into frozen typed sections.

    config (configs/*.py + --config.* flags, a ConfigDict) --RunSettings.from_config-->
      RunSettings(seed, init_from, user_dir, data, tokenizer, masking, model, objective, train,
                  optimizer, mesh, eval, watchdog)

Each section checks the rules of its own keys where it is made (its class); the rules across
sections and those of the devices are config_check.py's (`checked` runs both). Only the
commands and the run's assembly (assembly.py) hold the whole; below them every function takes
the sections it reads. config.json is written from `to_config_dict()`, the same keys as the
config.
"""

from __future__ import annotations

import dataclasses
import os

import ml_collections

from mlmjax.data.masking.settings import Settings as MaskingSettings
from mlmjax.data.settings import InputSettings
from mlmjax.data.text.settings import TokenizerSettings
from mlmjax import user_code
from mlmjax.errors import ConfigError
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel.settings import MeshSettings
from mlmjax.training import objectives
from mlmjax.training.core.optimizer import OptimizerSettings
from mlmjax.training.settings import (EvalSettings, ObjectiveSettings, TrainSettings,
                                     WatchdogSettings)


# Keys that moved, (section, key) -> (section, key): config format 2 gave the optimizer a section
# of its own (saved_config.py converts the files of before; a config made in Python that still
# sets the old key is told where it went).
MOVED_IN_2 = {("train", "optimizer"): ("optimizer", "kind"), **{
    ("train", key): ("optimizer", key) for key in (
        "learning_rate", "warmup_steps", "warmup_fraction", "end_learning_rate", "schedule",
        "decay_fraction", "decay_shape", "schedule_unit", "weight_decay", "adam_b1", "adam_b2",
        "adam_eps", "grad_clip_norm", "update_clip_rms", "muon_momentum", "muon_rms")}}


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """Every section of a pretraining run's config, typed; the same names as the config's."""

  seed: int
  init_from: str
  user_dir: str  # your own code (mlmjax/user_code.py), imported before the sections are checked
  data: InputSettings
  tokenizer: TokenizerSettings
  masking: MaskingSettings
  model: ModelSettings
  objective: ObjectiveSettings
  train: TrainSettings
  optimizer: OptimizerSettings
  mesh: MeshSettings
  eval: EvalSettings
  watchdog: WatchdogSettings

  def __post_init__(self):
    # The objectives the sections name: registered ones (objectives/), which their own
    # sections cannot check (the registry makes train steps, which read them).
    objectives.get(self.objective.kind)
    for entry in self.train.phases:
      if entry.objective is not None:
        objectives.for_phase(entry.objective)

  @classmethod
  def from_config(cls, config) -> "RunSettings":
    """A pretraining config (configs/base.py's keys) -> settings, each section checked by its
    own rules (the first broken one is a ConfigError naming its key)."""
    if isinstance(config, RunSettings):
      return config
    for (section, key), (new_section, new_key) in MOVED_IN_2.items():
      if key in config[section]:
        raise ConfigError(f"{section}.{key} is now {new_section}.{new_key} (the optimizer's keys"
                          " have a section of their own): set that instead")
    values = {}
    if config["user_dir"]:  # first: the sections may name what it registers
      user_code.load(config["user_dir"], f"user_dir={config['user_dir']!r}")
    for field in dataclasses.fields(cls):
      kind = _SECTIONS.get(field.name)
      values[field.name] = kind.from_config(config[field.name]) if kind else config[field.name]
    if values["user_dir"]:  # from any folder a later command runs in
      values["user_dir"] = os.path.abspath(values["user_dir"])
    if not isinstance(values["seed"], int) or isinstance(values["seed"], bool):
      raise ConfigError(f"seed={values['seed']!r} must be a whole number")
    return cls(**values)

  def to_config_dict(self) -> ml_collections.ConfigDict:
    """The config these settings were made from (config.json's keys and values)."""
    out = {}
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      out[field.name] = value.config_keys() if dataclasses.is_dataclass(value) else value
    return ml_collections.ConfigDict(out)

  def replace(self, **changes) -> "RunSettings":
    """A copy with some keys changed, e.g. replace(seed=1, train={"steps": 10}): each changed
    section is made again from its keys (so values take its types and meet its rules); a key
    the settings lack is a ConfigError."""
    values = {}
    for name, change in changes.items():
      if name not in _SECTIONS and name not in ("seed", "init_from", "user_dir"):
        raise ConfigError(f"{name}: no such config section or key")
      section = getattr(self, name)
      values[name] = section.replace(**change) if isinstance(change, dict) else change
    return dataclasses.replace(self, **values)



_SECTIONS = {"data": InputSettings, "tokenizer": TokenizerSettings, "masking": MaskingSettings,
             "model": ModelSettings, "objective": ObjectiveSettings, "train": TrainSettings,
             "optimizer": OptimizerSettings, "mesh": MeshSettings, "eval": EvalSettings,
             "watchdog": WatchdogSettings}
