"""Optimizer: global-norm clipping + AdamW, LAMB or Muon, a warmup-then-decay schedule, no
weight decay on LN/bias, optional per-tensor update clipping (StableAdamW-style).

Schedules (`optimizer.schedule`), all after a linear warmup from 0 to the peak:
  linear  linear decay to `end_learning_rate` at the last step (BERT);
  cosine  cosine decay to `end_learning_rate`;
  wsd     warmup-stable-decay (trapezoidal): the peak until the last `decay_fraction` of the
          steps, then down to `end_learning_rate`, linearly or as 1 - sqrt (ModernBERT).

The learning rate is a function of the train state's step, passed to every update as `step=`:
a step whose update is skipped (non-finite gradients, see make_optimizer) still uses up its
place in the schedule, so the schedule ends exactly at train.steps and the rate a step logs is
the rate it applied. (optax's own schedules count applied updates instead, which a skipped step
freezes.)
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax import contrib as optax_contrib

from mlmjax import typed_settings
from mlmjax.errors import ConfigError
from mlmjax.models import param_names

OPTIMIZERS = ("adamw", "lamb", "muon")
SCHEDULES = ("linear", "cosine", "wsd")
SCHEDULE_UNITS = ("steps", "tokens")
DECAY_SHAPES = ("linear", "sqrt")


@dataclasses.dataclass(frozen=True)
class OptimizerSettings(typed_settings.Section):
  """config.optimizer, typed: pretraining's (configs/base.py) and fine-tuning's
  (finetuning/config.py, BERT's fine-tuning defaults), read by make_optimizer."""

  KEY = "optimizer"

  kind: str
  learning_rate: float
  warmup_steps: int
  warmup_fraction: float
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
  muon_momentum: float
  muon_rms: float

  def __post_init__(self):
    typed_settings.one_of("optimizer.kind", self.kind, OPTIMIZERS)
    typed_settings.one_of("optimizer.schedule", self.schedule, SCHEDULES)
    typed_settings.one_of("optimizer.decay_shape", self.decay_shape, DECAY_SHAPES)
    typed_settings.one_of("optimizer.schedule_unit", self.schedule_unit, SCHEDULE_UNITS)
    if self.learning_rate < 0 or self.warmup_steps < 0:
      raise ConfigError("optimizer.learning_rate and optimizer.warmup_steps must be >= 0")
    if not 0.0 <= self.warmup_fraction < 1.0:
      raise ConfigError(f"optimizer.warmup_fraction={self.warmup_fraction} must be in [0, 1)")
    if self.warmup_steps and self.warmup_fraction:
      raise ConfigError("optimizer.warmup_steps and optimizer.warmup_fraction both set: give"
                        " one (the other 0)")
    if not 0.0 <= self.muon_momentum < 1.0 or self.muon_rms <= 0:
      raise ConfigError("optimizer.muon_momentum must be in [0, 1) and optimizer.muon_rms > 0")
    if not 0.0 < self.decay_fraction <= 1.0 or self.update_clip_rms < 0:
      raise ConfigError("optimizer.decay_fraction must be in (0, 1] and"
                        " optimizer.update_clip_rms >= 0")

  def warmup(self, total_steps: int) -> int:
    """The warmup's length in steps of a run of `total_steps`."""
    return self.warmup_steps or round(self.warmup_fraction * total_steps)



def _decay(peak: float, end: float, steps: int, shape: str) -> optax.Schedule:
  if shape == "sqrt":  # 1 - sqrt(progress): most of the drop comes late
    return lambda count: end + (peak - end) * (1.0 - jnp.sqrt(jnp.minimum(count / steps, 1.0)))
  return optax.linear_schedule(peak, end, steps)


# (step, tokens seen after it) at every phase boundary (training/planning/phases.py's
# Plan.step_tokens).
StepTokens = tuple[np.ndarray, np.ndarray]


def learning_rate_schedule(config: OptimizerSettings, total_steps: int,
                           step_tokens: StepTokens | None = None) -> optax.Schedule:
  """The schedule of the module docstring over a run of `total_steps`, as a function of the
  step; with `optimizer.schedule_unit='tokens'`, of the tokens seen (see token_clock)."""
  by_step = _step_schedule(config, total_steps)
  if config.schedule_unit == "steps":
    return by_step
  if step_tokens is None:  # every step alike (no phases)
    step_tokens = (np.asarray([0.0, total_steps]), np.asarray([0.0, 1.0]))
  clock = token_clock(total_steps, step_tokens)
  return lambda step: by_step(clock(step))


def token_clock(total_steps: int, step_tokens: StepTokens):
  """step -> the step at which a run with every step alike would have seen as many tokens:
  train.steps x (tokens seen / the run's tokens), piecewise linear over the phases. Warmup
  and decay then follow the tokens when the batch or the row length grows by phase (a batch
  warmup's small first steps do not use up the warmup)."""
  steps, tokens = step_tokens
  fraction = jnp.asarray(tokens / tokens[-1], jnp.float32)
  steps = jnp.asarray(steps, jnp.float32)
  return lambda step: jnp.interp(jnp.asarray(step, jnp.float32), steps, fraction) * total_steps


def _step_schedule(config: OptimizerSettings, total_steps: int) -> optax.Schedule:
  t = config
  peak, end = float(t.learning_rate), float(t.end_learning_rate)
  warmup = max(t.warmup(total_steps), 1)
  rest = max(int(total_steps) - warmup, 1)
  if t.schedule == "cosine":
    after = optax.cosine_decay_schedule(peak, rest, alpha=end / peak if peak else 0.0)
  elif t.schedule == "wsd":
    decay_steps = max(int(round(t.decay_fraction * rest)), 1)
    after = optax.join_schedules([optax.constant_schedule(peak),
                                  _decay(peak, end, decay_steps, t.decay_shape)],
                                 [rest - decay_steps])
  else:
    after = _decay(peak, end, rest, "linear")
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])


def decay_mask(params):
  """Weight decay (and LAMB's layer adaptation) applies to matrices and embeddings (`kernel`,
  `*_embedding`), never to LayerNorm scales or biases, as in BERT."""
  def decays(path, _):
    name = str(getattr(path[-1], "key", path[-1]))
    return name.endswith("kernel") or name.endswith("embedding")
  return jax.tree_util.tree_map_with_path(decays, params)


def muon_dimensions(params):
  """Muon's view of each hidden matrix of the encoder blocks (a kernel under `blocks`): its
  input (reduction) and output axes; every other axis (the layer axis of stacked layers, q/k/v,
  the two halves of a gated MLP) holds separate matrices. None for the other parameters, which
  AdamW trains (embeddings, norms, biases, heads), as the Muon papers do."""
  def dims(path, p):
    keys = param_names.path_keys(path)
    if "blocks" not in keys[:-1] or not str(keys[-1]).endswith("kernel"):
      return None
    after = keys[keys.index("blocks") + 1]
    o = 0 if str(after).isdigit() else 1  # stacked layers (scan_layers): a leading layer axis
    if keys[-1] == "qkv_kernel":  # [3, D, N, H]
      return optax_contrib.MuonDimensionNumbers((o + 1,), (o + 2, o + 3))
    if keys[-1] == "out_kernel":  # [N, H, D]
      return optax_contrib.MuonDimensionNumbers((o, o + 1), (o + 2,))
    return optax_contrib.MuonDimensionNumbers((o,), (p.ndim - 1,))  # [D, (2,) F] or [F, D]
  return jax.tree_util.tree_map_with_path(dims, params)


def _is_dims(d) -> bool:
  return isinstance(d, optax_contrib.MuonDimensionNumbers)


def _muon_labels(params):
  return jax.tree.map(lambda d: "adamw" if d is None else "muon", muon_dimensions(params),
                      is_leaf=lambda d: d is None or _is_dims(d))


def scale_by_muon(config: OptimizerSettings) -> optax.GradientTransformation:
  """Muon (Jordan et al., 2024): Nesterov momentum orthogonalised by Newton-Schulz, then scaled
  to the RMS of an AdamW update (Liu et al. 2025, "Muon is Scalable"), so that one learning
  rate and weight decay serve both parameter groups."""
  def match_rms(updates, state, params=None):
    # An orthogonal [m, n] matrix has RMS 1/sqrt(max(m, n)): scale it to muon_rms.
    def scale(u, d):
      fans = [math.prod(u.shape[a] for a in axes) for axes in d]
      return u * (config.muon_rms * math.sqrt(max(fans)))
    del params
    return jax.tree.map(scale, updates, muon_dimensions(updates), is_leaf=_is_dims), state

  # Given the updates of the Muon leaves only (the others are masked out of the tree).
  return optax.chain(
      optax_contrib.scale_by_muon(beta=config.muon_momentum, nesterov=True,
                                  weight_dimension_numbers=muon_dimensions),
      optax.GradientTransformation(lambda params: optax.EmptyState(), match_rms))


def scale_by_step_schedule(schedule: optax.Schedule) -> optax.GradientTransformationExtraArgs:
  """-schedule(step) x the updates, `step` being the caller's (the train state's) step."""
  def update(updates, state, params=None, *, step, **extra_args):
    del params, extra_args
    lr = schedule(step)
    return jax.tree.map(lambda u: -lr * u, updates), state
  return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update)


def make_optimizer(config: OptimizerSettings, total_steps: int,
                   step_tokens: StepTokens | None = None) -> optax.GradientTransformationExtraArgs:
  """Clip + AdamW or LAMB, behind optax.apply_if_finite: a step whose gradients hold a NaN or
  Inf changes neither the parameters nor the optimizer state (the trainer's policy then
  decides whether to go on, see train.nonfinite_policy). Updates take `step=`.

  LAMB (You et al., 2019; NVIDIA's large-batch BERT recipe) is Adam's update with weight decay,
  rescaled per parameter tensor by the trust ratio ||w|| / ||update||, so every layer moves by
  about learning_rate x its own norm whatever the scale of its gradients: what lets batches of
  32K-64K sequences train at high learning rates. As in ALBERT's and NVIDIA's LAMB, LayerNorm
  parameters and biases are excluded from the trust ratio exactly as from weight decay. Both
  share the adam_* keys, the decay mask and the schedule; NVIDIA also clips the global gradient
  norm before LAMB, as done here. Muon: see scale_by_muon; the other parameters get AdamW.
  """
  t = config
  adam = [optax.scale_by_adam(b1=t.adam_b1, b2=t.adam_b2, eps=t.adam_eps)]
  if t.update_clip_rms > 0:
    # StableAdamW (Wortsman et al., 2023) / Adafactor's update clipping: each tensor's Adam
    # update is scaled down to RMS <= update_clip_rms, so a spike in one tensor's second-moment
    # estimate cannot blow it up.
    adam.append(optax.clip_by_block_rms(t.update_clip_rms))
  if t.kind == "muon":  # Muon for the blocks' matrices, AdamW for the rest
    adam = [optax.partition({"muon": scale_by_muon(t), "adamw": optax.chain(*adam)},
                            _muon_labels)]
  adam.append(optax.add_decayed_weights(t.weight_decay, mask=decay_mask))
  if t.kind == "lamb":
    adam.append(optax.masked(optax.scale_by_trust_ratio(), decay_mask))
  inner = optax.chain(optax.clip_by_global_norm(t.grad_clip_norm), *adam,
                      scale_by_step_schedule(learning_rate_schedule(t, total_steps, step_tokens)))
  # Never "give up and apply" (optax's fallback): the host stops the run instead.
  return optax.apply_if_finite(inner, max_consecutive_errors=2**31 - 1)
