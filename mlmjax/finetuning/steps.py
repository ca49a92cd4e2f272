"""The pure, jitted train and eval steps of fine-tuning, on steps.make_setup's sharded state.

The loss is the cross-entropy of the class logits (classification) or the squared error of the
predicted score (regression), averaged over the examples of the global batch whose weight is 1
(dev batches are padded to full size with weight-0 rows, so every example counts once).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from mlmjax.training import losses
from mlmjax.training import optimizer
from mlmjax.parallel import sharding
from mlmjax.training import steps


def example_losses(outputs_bk: jax.Array, labels_b: jax.Array, regression: bool) -> jax.Array:
  if regression:
    return jnp.square(outputs_bk[:, 0] - labels_b)
  return losses.cross_entropy(outputs_bk, labels_b)


def make_train_step(setup: steps.Setup, config, regression: bool
                    ) -> Callable[[steps.State, dict], tuple[steps.State, dict]]:
  """(state, batch) -> (state, metric sums); donates the old state. `config.train` holds the
  resolved schedule (steps, warmup_steps)."""
  schedule = optimizer.learning_rate_schedule(config.train)
  dropout_base = jax.random.PRNGKey(config.seed)

  def train_step(state, batch):
    key = jax.random.fold_in(dropout_base, state["step"])  # dropout: a function of the step
    weights_b = batch["weights"]

    def loss_fn(params):
      outputs_bk = setup.forward(params, batch, dropout_key=key)
      loss_sum = jnp.sum(example_losses(outputs_bk, batch["labels"], regression) * weights_b)
      return loss_sum / jnp.maximum(jnp.sum(weights_b), 1.0), (loss_sum, outputs_bk)

    grads, (loss_sum, outputs_bk) = jax.grad(loss_fn, has_aux=True)(state["params"])
    updates, opt_state = setup.tx.update(grads, state["opt_state"], state["params"],
                                         step=state["step"])
    grad_norm = optax.global_norm(grads)
    metrics = {"loss_sum": loss_sum, "count": jnp.sum(weights_b),
               "learning_rate": schedule(state["step"]), "grad_norm": grad_norm,
               "nonfinite": 1.0 - jnp.isfinite(grad_norm).astype(jnp.float32)}
    if not regression:
      correct_b = jnp.argmax(outputs_bk, axis=-1) == batch["labels"]
      metrics["correct"] = jnp.sum(correct_b * weights_b)
    return {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state}, metrics

  return jax.jit(train_step,
                 in_shardings=(setup.state_shardings, sharding.batch_sharding(setup.mesh)),
                 out_shardings=(setup.state_shardings, sharding.replicated(setup.mesh)),
                 donate_argnums=0)


def make_eval_step(setup: steps.Setup) -> Callable[[dict, dict], jax.Array]:
  """(params, batch) -> the model's [B, K] outputs, without dropout, on every process."""

  def eval_step(params, batch):
    return setup.forward(params, batch)

  return jax.jit(eval_step,
                 in_shardings=(setup.state_shardings["params"],
                               sharding.batch_sharding(setup.mesh)),
                 out_shardings=sharding.replicated(setup.mesh))
