"""Optimizer: global-norm clipping + AdamW or LAMB, a warmup-then-decay schedule, no weight decay
on LN/bias, optional per-tensor update clipping (StableAdamW-style).

Schedules (`train.schedule`), all after a linear warmup from 0 to the peak:
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

import jax
import jax.numpy as jnp
import optax

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine", "wsd")
DECAY_SHAPES = ("linear", "sqrt")


def _decay(peak: float, end: float, steps: int, shape: str) -> optax.Schedule:
  if shape == "sqrt":  # 1 - sqrt(progress): most of the drop comes late
    return lambda count: end + (peak - end) * (1.0 - jnp.sqrt(jnp.minimum(count / steps, 1.0)))
  return optax.linear_schedule(peak, end, steps)


def learning_rate_schedule(train_config) -> optax.Schedule:
  """The schedule of the module docstring, as a function of the step."""
  t = train_config
  peak, end = float(t.learning_rate), float(t.end_learning_rate)
  warmup = max(int(t.warmup_steps), 1)
  rest = max(int(t.steps) - warmup, 1)
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


def scale_by_step_schedule(schedule: optax.Schedule) -> optax.GradientTransformationExtraArgs:
  """-schedule(step) x the updates, `step` being the caller's (the train state's) step."""
  def update(updates, state, params=None, *, step, **extra_args):
    del params, extra_args
    lr = schedule(step)
    return jax.tree.map(lambda u: -lr * u, updates), state
  return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update)


def make_optimizer(train_config) -> optax.GradientTransformationExtraArgs:
  """Clip + AdamW or LAMB, behind optax.apply_if_finite: a step whose gradients hold a NaN or
  Inf changes neither the parameters nor the optimizer state (the trainer's policy then
  decides whether to go on, see train.nonfinite_policy). Updates take `step=`.

  LAMB (You et al., 2019; NVIDIA's large-batch BERT recipe) is Adam's update with weight decay,
  rescaled per parameter tensor by the trust ratio ||w|| / ||update||, so every layer moves by
  about learning_rate x its own norm whatever the scale of its gradients: what lets batches of
  32K-64K sequences train at high learning rates. As in ALBERT's and NVIDIA's LAMB, LayerNorm
  parameters and biases are excluded from the trust ratio exactly as from weight decay. Both
  share the adam_* keys, the decay mask and the schedule; NVIDIA also clips the global gradient
  norm before LAMB, as done here.
  """
  t = train_config
  adam = [optax.scale_by_adam(b1=t.adam_b1, b2=t.adam_b2, eps=t.adam_eps)]
  if t.update_clip_rms > 0:
    # StableAdamW (Wortsman et al., 2023) / Adafactor's update clipping: each tensor's Adam
    # update is scaled down to RMS <= update_clip_rms, so a spike in one tensor's second-moment
    # estimate cannot blow it up.
    adam.append(optax.clip_by_block_rms(t.update_clip_rms))
  adam.append(optax.add_decayed_weights(t.weight_decay, mask=decay_mask))
  if t.optimizer == "lamb":
    adam.append(optax.masked(optax.scale_by_trust_ratio(), decay_mask))
  inner = optax.chain(optax.clip_by_global_norm(t.grad_clip_norm), *adam,
                      scale_by_step_schedule(learning_rate_schedule(t)))
  # Never "give up and apply" (optax's fallback): the host stops the run instead.
  return optax.apply_if_finite(inner, max_consecutive_errors=2**31 - 1)
