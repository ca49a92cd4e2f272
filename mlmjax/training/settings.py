"""The training sections of a run's config, typed: objective.*, train.*, eval.* and watchdog.*
(optimizer.* is core/optimizer.py's).

Each checks the rules of its own keys where it is made; run_settings.py gathers them with the
other packages' sections into a run's settings. This module imports no other section's module,
so that the jitted steps (steps.py) that read train.* load nothing of the input pipeline.
"""

from __future__ import annotations

import dataclasses

from mlmjax.errors import ConfigError
from mlmjax.training.run import profiling
from mlmjax import typed_settings

DROPOUT_RNGS = ("threefry2x32", "rbg", "unsafe_rbg")  # jax's PRNG implementations
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
  """config.train, typed (the optimizer's keys are config.optimizer: core/optimizer.py)."""

  KEY = "train"

  steps: int
  budget_hours: float
  batch_size: int
  grad_accum_steps: int
  fit: str
  fit_memory_gib: float
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
    typed_settings.one_of("train.dropout_rng", self.dropout_rng, DROPOUT_RNGS)
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
    if self.grad_accum_steps < 1:
      raise ConfigError(f"train.grad_accum_steps={self.grad_accum_steps} must be >= 1")
    typed_settings.one_of("train.fit", self.fit, ("off", "auto"))
    if self.fit_memory_gib < 0:
      raise ConfigError(f"train.fit_memory_gib={self.fit_memory_gib} must be >= 0 (0: the"
                        " device's memory)")
    self._check_phases()

  def _check_phases(self) -> None:
    """Each entry typed and checked (PhaseSpec); what a phase asks of the model and the masker
    is config_check.py's."""
    # frozen: the entries, read as given (tuples, lists, dicts), stored typed
    object.__setattr__(self, "phases", tuple(map(PhaseSpec.parse, self.phases)))
    if self.phases and abs(sum(p.fraction for p in self.phases) - 1.0) > 1e-6:
      raise ConfigError(f"train.phases={self.config_keys()['phases']}: the fractions must sum"
                        " to 1")

  def config_keys(self) -> dict:
    """As the Section's, with train.phases in its config form (PhaseSpec.entry)."""
    return {**super().config_keys(), "phases": tuple(p.entry() for p in self.phases)}


@dataclasses.dataclass(frozen=True)
class PhaseSpec:
  """One train.phases entry, typed (training/planning/phases.py plans the run from them). In a
  config, on the command line and in config.json an entry is written (fraction, seq_len,
  max_predictions) with an optional 4th item, a dict of the options below: BERT's phases are
  ((0.9, 128, 20), (0.1, 512, 80)). Each option left out (None) keeps the run's value."""

  fraction: float  # of train.steps (the entries' fractions sum to 1)
  seq_len: int  # tokens per row
  max_predictions: int  # prediction slots per row (at most; a phase's rate may need fewer)
  batch_size: int | None = None  # global rows per step: a batch-size warmup (mmBERT)
  rope_base: float | None = None  # rotary base of the global layers (ModernBERT's extension)
  mask_rate: float | None = None  # the phase's own mask rate at its first step ...
  # ... and at its last (default mask_rate), shaped by masking.mask_rate_schedule; phases
  # without a mask_rate follow the run-long masking.mask_rate -> mask_rate_end
  mask_rate_end: float | None = None
  # a registered objective training the run's own model ('clm', 'mlm', 'diffusion'; checked by
  # RunSettings): causal LM first, then MLM; MLM, then diffusion
  objective: str | None = None

  def __post_init__(self):
    where = f"train.phases entry {self.entry()}"
    if not self.fraction > 0 or self.seq_len < 1 or self.max_predictions < 0:
      raise ConfigError(f"{where}: the fraction must be > 0, seq_len >= 1 and max_predictions"
                        " >= 0")
    if self.mask_rate_end is not None and self.mask_rate is None:
      raise ConfigError(f"{where}: mask_rate_end needs mask_rate")
    for key in ("mask_rate", "mask_rate_end"):
      if getattr(self, key) is not None:
        typed_settings.check_rate(f"train.phases {key}", getattr(self, key))
    if (self.batch_size is not None and self.batch_size < 1) or (
        self.rope_base is not None and self.rope_base <= 0):
      raise ConfigError(f"{where}: batch_size must be >= 1 and rope_base > 0")

  @classmethod
  def options(cls) -> tuple[str, ...]:
    """The names an entry's 4th item may hold."""
    return tuple(f.name for f in dataclasses.fields(cls))[3:]

  @classmethod
  def parse(cls, entry) -> "PhaseSpec":
    """A PhaseSpec from its config form (a tuple or list of 3 items and the options' dict)."""
    if isinstance(entry, PhaseSpec):
      return entry
    if not isinstance(entry, (tuple, list)) or len(entry) not in (3, 4):
      raise ConfigError(f"train.phases entry {entry!r} must be (fraction, seq_len,"
                        " max_predictions[, options])")
    opts = entry[3] if len(entry) > 3 else {}
    if not isinstance(opts, dict) or set(opts) - set(cls.options()):
      raise ConfigError(f"train.phases entry {tuple(entry)}: its 4th item must be a dict of"
                        f" {', '.join(cls.options())}")
    try:
      fraction, seq_len, slots = float(entry[0]), _whole(entry[1]), _whole(entry[2])
      typed = {k: (_whole(v) if k == "batch_size" else v if k == "objective" else float(v))
               for k, v in opts.items()}
    except (TypeError, ValueError):
      raise ConfigError(f"train.phases entry {tuple(entry)}: fraction, seq_len, max_predictions"
                        " and the options must be numbers (objective a name)") from None
    return cls(fraction, seq_len, slots, **typed)

  def option_values(self) -> dict:
    """The options this entry sets."""
    return {k: getattr(self, k) for k in self.options() if getattr(self, k) is not None}

  def entry(self) -> tuple:
    """The config form: (fraction, seq_len, max_predictions[, options])."""
    opts = self.option_values()
    return (self.fraction, self.seq_len, self.max_predictions) + ((opts,) if opts else ())


def _whole(value) -> int:
  if isinstance(value, bool) or int(value) != value:
    raise ValueError(value)
  return int(value)


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
