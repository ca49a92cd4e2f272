"""A pretraining run's settings: the config turned, once, into frozen typed sections.

    config (configs/*.py + --config.* flags, a ConfigDict) --RunSettings.from_config-->
      RunSettings(seed, init_from, data, tokenizer, masking, model, objective, train, mesh, eval)

Each section checks the rules of its own keys where it is made (its class); the rules across
sections and those of the devices are config_check.py's (`checked` runs both). Below the
commands every function takes the sections it reads: models/ the model's, data/ the input's and
masking's. config.json is written from `to_config_dict()`, the same keys as the config.
"""

from __future__ import annotations

import dataclasses

import ml_collections

from mlmjax import typed_settings
from mlmjax.data.masking.settings import Settings as MaskingSettings
from mlmjax.data.settings import InputSettings, TokenizerSettings
from mlmjax.errors import ConfigError
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel.settings import MeshSettings
from mlmjax.training import profiling

# The values of train.optimizer, train.schedule, ... (optimizer.py says what each does).
OPTIMIZERS = ("adamw", "lamb", "muon")
SCHEDULES = ("linear", "cosine", "wsd")
SCHEDULE_UNITS = ("steps", "tokens")
DECAY_SHAPES = ("linear", "sqrt")
# What the optional 4th item of a train.phases entry may set (training/phases.py).
PHASE_OPTIONS = ("batch_size", "rope_base", "mask_rate", "mask_rate_end", "objective")
# The objectives a phase may switch between (training/causal_lm.py).
PHASE_OBJECTIVES = ("mlm", "clm")


@dataclasses.dataclass(frozen=True)
class ObjectiveSettings(typed_settings.Section):
  """config.objective, typed."""

  KEY = "objective"

  kind: str
  generator_fraction: float
  discriminator_weight: float
  span_boundary_weight: float

  def __post_init__(self):
    typed_settings.one_of("objective.kind", self.kind, ("mlm", "electra", "clm"))
    if self.span_boundary_weight < 0:
      raise ConfigError("objective.span_boundary_weight must be >= 0")
    if self.kind == "electra" and self.discriminator_weight <= 0:
      raise ConfigError("objective.discriminator_weight must be > 0")


@dataclasses.dataclass(frozen=True)
class EvalSettings(typed_settings.Section):
  """config.eval, typed."""

  KEY = "eval"

  mask_rate: float

  def __post_init__(self):
    typed_settings.check_rate("eval.mask_rate", self.mask_rate)


@dataclasses.dataclass(frozen=True)
class TrainSettings(typed_settings.Section):
  """config.train, typed (the optimizer's keys included: optimizer.py reads them)."""

  KEY = "train"

  steps: int
  budget_hours: float
  batch_size: int
  grad_accum_steps: int
  fit: str
  fit_memory_gib: float
  optimizer: str
  muon_momentum: float
  muon_rms: float
  learning_rate: float
  warmup_steps: int
  end_learning_rate: float
  schedule: str
  decay_fraction: float
  decay_shape: str
  schedule_unit: str
  weight_decay: float
  adam_b1: float
  adam_b2: float
  adam_eps: float
  grad_clip_norm: float
  update_clip_rms: float
  nonfinite_policy: str
  max_consecutive_skips: int
  phases: tuple
  log_every_steps: int
  profile_steps: str
  eval_every_steps: int
  eval_batches: int
  checkpoint_every_steps: int
  max_checkpoints_to_keep: int
  compilation_cache: str

  def __post_init__(self):
    typed_settings.one_of("train.optimizer", self.optimizer, OPTIMIZERS)
    typed_settings.one_of("train.schedule", self.schedule, SCHEDULES)
    typed_settings.one_of("train.decay_shape", self.decay_shape, DECAY_SHAPES)
    typed_settings.one_of("train.schedule_unit", self.schedule_unit, SCHEDULE_UNITS)
    if not 0.0 <= self.muon_momentum < 1.0 or self.muon_rms <= 0:
      raise ConfigError("train.muon_momentum must be in [0, 1) and train.muon_rms > 0")
    if not 0.0 < self.decay_fraction <= 1.0 or self.update_clip_rms < 0:
      raise ConfigError("train.decay_fraction must be in (0, 1] and train.update_clip_rms >= 0")
    check_nonfinite_policy(self.nonfinite_policy, self.max_consecutive_skips)
    typed_settings.check_positive("train.batch_size", self.batch_size)
    profiling.parse(self.profile_steps)
    if self.steps < 1 or self.log_every_steps < 1 or self.eval_every_steps < 1 or (
        self.checkpoint_every_steps < 1) or self.eval_batches < 1 or (
        self.max_checkpoints_to_keep < 1):
      raise ConfigError("train.steps, train.eval_batches, train.max_checkpoints_to_keep and"
                        " the train.*_every_steps intervals must be >= 1")
    if self.budget_hours < 0:
      raise ConfigError(f"train.budget_hours={self.budget_hours} must be >= 0 (0: no time"
                        " budget)")
    if self.budget_hours and self.phases:
      raise ConfigError("train.budget_hours ends a run by its time, but train.phases switch at"
                        " fractions of train.steps: use one or the other")
    if self.learning_rate < 0 or self.warmup_steps < 0:
      raise ConfigError("train.learning_rate and train.warmup_steps must be >= 0")
    if self.grad_accum_steps < 1:
      raise ConfigError(f"train.grad_accum_steps={self.grad_accum_steps} must be >= 1")
    typed_settings.one_of("train.fit", self.fit, ("off", "auto"))
    if self.fit_memory_gib < 0:
      raise ConfigError(f"train.fit_memory_gib={self.fit_memory_gib} must be >= 0 (0: the"
                        " device's memory)")
    self._check_phases()

  def _check_phases(self) -> None:
    """The syntax of train.phases; what a phase asks of the model and the masker is
    config_check.py's."""
    spec = self.phases
    if spec and (any(len(p) not in (3, 4) for p in spec) or min(p[0] for p in spec) <= 0
                 or abs(sum(p[0] for p in spec) - 1.0) > 1e-6):
      raise ConfigError(f"train.phases={spec} must be (fraction, seq_len, max_predictions"
                        "[, options]) entries with positive fractions summing to 1")
    for entry in spec:
      opts = entry[3] if len(entry) > 3 else {}
      if not isinstance(opts, dict) or set(opts) - set(PHASE_OPTIONS):
        raise ConfigError(f"train.phases entry {tuple(entry)}: its 4th item must be a dict of"
                          f" {', '.join(PHASE_OPTIONS)}")
      if "mask_rate_end" in opts and "mask_rate" not in opts:
        raise ConfigError(f"train.phases entry {tuple(entry)}: mask_rate_end needs mask_rate")
      for key in ("mask_rate", "mask_rate_end"):
        if key in opts:
          typed_settings.check_rate(f"train.phases {key}", opts[key])
      if "objective" in opts:
        typed_settings.one_of("train.phases objective", opts["objective"], PHASE_OBJECTIVES)
      if opts.get("batch_size", 1) < 1 or opts.get("rope_base", 1) <= 0:
        raise ConfigError(f"train.phases entry {tuple(entry)}: batch_size must be >= 1 and"
                          " rope_base > 0")


def check_nonfinite_policy(policy: str, max_consecutive_skips: int) -> None:
  """Pretraining's and fine-tuning's (training/loop.py)."""
  typed_settings.one_of("train.nonfinite_policy", policy, ("skip", "stop"))
  if max_consecutive_skips < 0:
    raise ConfigError("train.max_consecutive_skips must be >= 0")


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """Every section of a pretraining run's config, typed; the same names as the config's."""

  seed: int
  init_from: str
  data: InputSettings
  tokenizer: TokenizerSettings
  masking: MaskingSettings
  model: ModelSettings
  objective: ObjectiveSettings
  train: TrainSettings
  mesh: MeshSettings
  eval: EvalSettings

  @classmethod
  def from_config(cls, config) -> "RunSettings":
    """A pretraining config (configs/base.py's keys) -> settings, each section checked by its
    own rules (the first broken one is a ConfigError naming its key)."""
    if isinstance(config, RunSettings):
      return config
    values = {}
    for field in dataclasses.fields(cls):
      kind = _SECTIONS.get(field.name)
      values[field.name] = kind.from_config(config[field.name]) if kind else config[field.name]
    if not isinstance(values["seed"], int) or isinstance(values["seed"], bool):
      raise ConfigError(f"seed={values['seed']!r} must be a whole number")
    return cls(**values)

  def to_config_dict(self) -> ml_collections.ConfigDict:
    """The config these settings were made from (config.json's keys and values)."""
    out = {}
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      out[field.name] = _keys(value) if dataclasses.is_dataclass(value) else value
    return ml_collections.ConfigDict(out)

  def replace(self, **changes) -> "RunSettings":
    """A copy with some keys changed, e.g. replace(seed=1, train={"steps": 10}): each changed
    section is made again from its keys (so values take its types and meet its rules); a key
    the settings lack is a ConfigError."""
    values = {}
    for name, change in changes.items():
      if name not in _SECTIONS and name not in ("seed", "init_from"):
        raise ConfigError(f"{name}: no such config section or key")
      section = getattr(self, name)
      if isinstance(change, dict) and dataclasses.is_dataclass(section):
        unknown = sorted(set(change) - set(_keys(section)))
        if unknown:  # a misspelled key would otherwise be dropped without a word
          raise ConfigError(f"{name}.{unknown[0]}: no such config key")
        change = type(section).from_config({**_keys(section), **change})
      values[name] = change
    return dataclasses.replace(self, **values)


def _keys(section) -> dict:
  """A section's config keys and values (its init fields)."""
  return {f.name: getattr(section, f.name) for f in dataclasses.fields(section) if f.init}


_SECTIONS = {"data": InputSettings, "tokenizer": TokenizerSettings, "masking": MaskingSettings,
             "model": ModelSettings, "objective": ObjectiveSettings, "train": TrainSettings,
             "mesh": MeshSettings, "eval": EvalSettings}
