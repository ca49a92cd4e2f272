"""The training sections of a run's config, typed: objective.*, train.* and eval.*.

Each checks the rules of its own keys where it is made; run_settings.py gathers them with the
other packages' sections into a run's settings. This module imports no other section's module,
so that the jitted steps (steps.py) that read train.* load nothing of the input pipeline.
"""

from __future__ import annotations

import dataclasses

from mlmjax.errors import ConfigError
from mlmjax.training.run import profiling
from mlmjax import typed_settings

# The values of train.optimizer, train.schedule, ... (optimizer.py says what each does).
OPTIMIZERS = ("adamw", "lamb", "muon")
SCHEDULES = ("linear", "cosine", "wsd")
DROPOUT_RNGS = ("threefry2x32", "rbg", "unsafe_rbg")  # jax's PRNG implementations
SCHEDULE_UNITS = ("steps", "tokens")
DECAY_SHAPES = ("linear", "sqrt")
# What the optional 4th item of a train.phases entry may set (training/planning/phases.py).
PHASE_OPTIONS = ("batch_size", "rope_base", "mask_rate", "mask_rate_end", "objective")
# objective.diffusion_loss: the variational bound's weighting, or none (objectives/diffusion.py).
DIFFUSION_LOSSES = ("inverse_rate", "plain")


@dataclasses.dataclass(frozen=True)
class ObjectiveSettings(typed_settings.Section):
  """config.objective, typed."""

  KEY = "objective"

  kind: str
  generator_fraction: float
  discriminator_weight: float
  span_boundary_weight: float
  diffusion_loss: str
  logits_chunk: int

  def __post_init__(self):
    # kind: a registered objective (objectives/), checked by RunSettings: the registry makes
    # train steps, which read this module
    typed_settings.one_of("objective.diffusion_loss", self.diffusion_loss, DIFFUSION_LOSSES)
    if self.logits_chunk < 0:
      raise ConfigError(f"objective.logits_chunk={self.logits_chunk} must be >= 0 (0: all the"
                        " slots at once)")
    if self.logits_chunk and self.span_boundary_weight:
      raise ConfigError("objective.logits_chunk decodes the MLM head's slots in chunks; the"
                        " span-boundary objective reads whole logits: set it to 0")
    if self.span_boundary_weight < 0:
      raise ConfigError("objective.span_boundary_weight must be >= 0")


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
  dropout_rng: str
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
    typed_settings.one_of("train.dropout_rng", self.dropout_rng, DROPOUT_RNGS)
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
      # objective: one a phase may switch to, checked by RunSettings (as objective.kind)
      if opts.get("batch_size", 1) < 1 or opts.get("rope_base", 1) <= 0:
        raise ConfigError(f"train.phases entry {tuple(entry)}: batch_size must be >= 1 and"
                          " rope_base > 0")


@dataclasses.dataclass(frozen=True)
class WatchdogSettings(typed_settings.Section):
  """config.watchdog, typed (training/run/watchdog.py reads it)."""

  KEY = "watchdog"

  enabled: bool
  step_multiple: float
  min_step_seconds: float
  first_step_minutes: float
  eval_minutes: float
  save_minutes: float
  startup_minutes: float
  straggler_share: float

  def __post_init__(self):
    if self.step_multiple < 1 or min(self.min_step_seconds, self.first_step_minutes,
                                     self.eval_minutes, self.save_minutes,
                                     self.startup_minutes) <= 0:
      raise ConfigError("watchdog.step_multiple must be >= 1 and the watchdog's other limits"
                        " > 0 (watchdog.enabled=False turns it off)")
    if not 0 <= self.straggler_share < 1:
      raise ConfigError(f"watchdog.straggler_share={self.straggler_share} must be in [0, 1)"
                        " (0: not checked)")


def check_nonfinite_policy(policy: str, max_consecutive_skips: int) -> None:
  """Pretraining's and fine-tuning's (training/run/loop.py)."""
  typed_settings.one_of("train.nonfinite_policy", policy, ("skip", "stop"))
  if max_consecutive_skips < 0:
    raise ConfigError("train.max_consecutive_skips must be >= 0")
