"""What a pretraining objective says about itself, and the registry of objectives by name.

The run asks the objective of `objective.kind` for its model and heads, and the objective of
each phase (train.phases may switch between those with `in_phases`) for its batches (the
masker's tag, the prediction slots), its train step's loss and the summary of its sums. The
held-out evaluation is MLM's (at eval.mask_rate) whatever a phase trains, so runs compare:
`evaluation()` names the objective that measures it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, ClassVar

import jax
from flax import nnx

from mlmjax.errors import ConfigError
from mlmjax.models import batch_schema
from mlmjax.models import bert

if TYPE_CHECKING:
  from mlmjax.models.settings import ModelSettings
  from mlmjax.training.core import steps
  from mlmjax.training.settings import ObjectiveSettings

Sums = dict[str, jax.Array]

# What the host masker makes for an objective (models/batch_schema.py says each).
MLM_MASKER = batch_schema.MLM_MASKING
DIFFUSION_MASKER = batch_schema.DIFFUSION_MASKING

_REGISTRY: dict[str, Objective] = {}


class Objective:
  """One pretraining objective. A subclass sets `name` and is registered with @register."""

  name: ClassVar[str] = ""
  # What the host masker makes for its batches (MLM_MASKER or DIFFUSION_MASKER).
  masker: ClassVar[str] = MLM_MASKER
  # A train.phases entry may switch to it in a run of another objective: it trains the same
  # model (BERT's encoder and tied MLM head), so a switch keeps every weight.
  in_phases: ClassVar[bool] = True
  # The scalar sums its train step returns: they add up over the steps of a log interval.
  sum_keys: ClassVar[tuple[str, ...]] = ()
  # mlmjax.evaluate's default Monte Carlo samples of the diffusion bound for a run that ends in
  # this objective (inference/evaluation.py).
  bound_samples: ClassVar[int] = 0
  # It predicts each token from those before it, so its model scores text
  # (finished_run.causal_log_probs).
  scores_text: ClassVar[bool] = False
  # The transformers model type its model exports as where that is not the encoder's own
  # (hf/convert.py export_arch picks bert, roformer or modernbert by the model settings).
  hf_model_type: ClassVar[str | None] = None

  def check(self, settings, pairs: bool, phase_objectives: tuple[str, ...]) -> None:
    """A ConfigError naming the key if a run of these settings (RunSettings) cannot train with
    this objective: `pairs`, the data format carries NSP/SOP labels; `phase_objectives`, the
    objectives of its phases."""
    model = settings.model
    if model.embedding_size not in (0, model.hidden_size):
      raise ConfigError("model.embedding_size (a width shared by ELECTRA's two encoders) needs"
                        " objective.kind='electra'")

  def model(self, model: ModelSettings, objective: ObjectiveSettings, vocab_size: int,
            rngs: nnx.Rngs, target, pairs: bool) -> nnx.Module:
    """The pretraining model: BERT with its MLM head, an NSP/SOP head where the data format
    carries pair labels (`pairs`), a span-boundary head with objective.span_boundary_weight."""
    return bert.BertForPretraining(model, vocab_size, rngs, nsp_head=pairs,
                                   sbo_head=objective.span_boundary_weight > 0, target=target)

  def generator_fraction(self, objective: ObjectiveSettings) -> float | None:
    """The width of a second (generator) encoder as a fraction of the model's, for its FLOPs
    (models/flops.py); None: there is none."""
    return None

  def slots(self, seq_len: int, slots: int) -> int:
    """The prediction slots of its batches of `seq_len` tokens, `slots` asked for."""
    return slots

  def predicted_positions(self, seq_len: int, slots: int) -> int:
    """The positions whose tokens a step predicts per row (its FLOPs, its tokens/s)."""
    return slots

  def step(self, objective: ObjectiveSettings, per_token_loss: bool = False) -> steps.Objective:
    """What its train step minimises (training/core/steps.py's contract); `per_token_loss` adds the
    per-vocabulary sums of adaptive masking's feedback."""
    raise NotImplementedError

  def summarize(self, sums: dict[str, float]) -> dict[str, float]:
    """Host side: the sums of its steps, added up -> the metrics people read."""
    raise NotImplementedError

  def evaluation(self) -> Objective:
    """The objective whose held-out sums and summary evaluate a phase of this one."""
    return get("mlm")

  def heldout_sums(self, outputs: dict, batch: dict) -> Sums:
    """The held-out step's sums (evaluation() measures them)."""
    raise NotImplementedError


def register(cls: type[Objective]) -> type[Objective]:
  """A class decorator: `objective.kind=cls.name` trains with it. A name taken by another
  class is refused; the same class loaded again (a config file defining it is executed twice:
  mlmjax/presets.py) takes its place."""
  if not cls.name:
    raise ValueError(f"{cls.__name__} has no name: set its `name`")
  old = _REGISTRY.get(cls.name)
  if old is not None and _origin(type(old)) != _origin(cls):
    raise ValueError(f"objective {cls.name!r} is registered already"
                     f" ({type(old).__module__}.{type(old).__qualname__})")
  _REGISTRY[cls.name] = cls()
  return cls


def _origin(cls: type) -> tuple[str, str]:
  """A class by where it is defined: its name and its module's file."""
  module = sys.modules.get(cls.__module__)
  return cls.__qualname__, getattr(module, "__file__", None) or cls.__module__


def get(name: str, key: str = "objective.kind") -> Objective:
  """The registered objective `name`; a ConfigError naming `key` for an unknown one."""
  if name not in _REGISTRY:
    raise ConfigError(f"{key}={name!r} is not one of {', '.join(names())} (one of your own:"
                      " its module in user_dir, or --user_dir=FILE)")
  return _REGISTRY[name]


def for_phase(name: str) -> Objective:
  """The registered objective a train.phases entry names; a ConfigError unless it is one a
  phase may switch to (`in_phases`)."""
  switchable = [n for n in names() if _REGISTRY[n].in_phases]
  if name not in switchable:
    raise ConfigError(f"train.phases objective={name!r} is not one of {', '.join(switchable)}")
  return _REGISTRY[name]


def names() -> list[str]:
  return sorted(_REGISTRY)
