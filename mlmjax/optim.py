"""Optimizer: global-norm clipping + AdamW or LAMB, warmup and linear decay, no decay on LN/bias."""

from __future__ import annotations

import jax
import optax

from mlmjax import errors

OPTIMIZERS = ("adamw", "lamb")


class OptimizerError(errors.UserError):
  """An unknown or inconsistent optimizer setting."""


def learning_rate_schedule(train_config) -> optax.Schedule:
  """Linear warmup from 0 to the peak, then linear decay to `end_learning_rate` at the end."""
  warmup = max(int(train_config.warmup_steps), 1)
  decay = max(int(train_config.steps) - warmup, 1)
  return optax.join_schedules([
      optax.linear_schedule(0.0, train_config.learning_rate, warmup),
      optax.linear_schedule(train_config.learning_rate, train_config.end_learning_rate, decay),
  ], [warmup])


def decay_mask(params):
  """Weight decay applies to matrices and embeddings (`kernel`, `*_embedding`), never to
  LayerNorm scales or biases, as in BERT."""
  def decays(path, _):
    name = str(getattr(path[-1], "key", path[-1]))
    return name.endswith("kernel") or name.endswith("embedding")
  return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(train_config) -> optax.GradientTransformation:
  """Clip + AdamW or LAMB, behind optax.apply_if_finite: a step whose gradients hold a NaN or
  Inf changes neither the parameters nor the optimizer state (the trainer's policy then
  decides whether to go on, see train.nonfinite_policy).

  LAMB (You et al., 2019; NVIDIA's large-batch BERT recipe) is Adam's update with weight decay,
  rescaled per parameter tensor by the trust ratio ||w|| / ||update||, so every layer moves by
  about learning_rate x its own norm whatever the scale of its gradients: what lets batches of
  32K-64K sequences train at high learning rates. Both share the adam_* keys, the decay mask and
  the schedule; NVIDIA also clips the global gradient norm before LAMB, as done here.
  """
  name = train_config.optimizer
  if name not in OPTIMIZERS:
    raise OptimizerError(f"train.optimizer={name!r} is not one of {', '.join(OPTIMIZERS)}")
  factory = optax.adamw if name == "adamw" else optax.lamb
  inner = optax.chain(
      optax.clip_by_global_norm(train_config.grad_clip_norm),
      factory(learning_rate_schedule(train_config), b1=train_config.adam_b1,
              b2=train_config.adam_b2, eps=train_config.adam_eps,
              weight_decay=train_config.weight_decay, mask=decay_mask),
  )
  # Never "give up and apply" (optax's fallback): the host stops the run instead.
  return optax.apply_if_finite(inner, max_consecutive_errors=2**31 - 1)
