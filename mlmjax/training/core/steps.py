"""The pure, jitted train and eval steps, for pretraining and fine-tuning alike.

A step is `(state, batch) -> (state, metrics)` on a `train_state.MeshSetup`; what it minimises is an
`Objective`: the denominators of the loss over the whole global batch, the metric sums of a
(micro-)batch, and the loss made from those sums. Pretraining's objectives are registered parts
(objectives/); fine-tuning's is its task kind's (finetuning/kind.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from mlmjax.parallel import sharding
from mlmjax.training.core.train_state import MeshSetup, State

Sums = dict[str, jax.Array]

# A batch entry, [B]: the share of train.budget_hours spent (planning/time_budget.py fills it);
# the schedule then follows the larger of the step and that share of train.steps.
BUDGET_SPENT = "budget_fraction"


@dataclasses.dataclass(frozen=True)
class Objective:
  # batch -> the loss's denominators over the WHOLE global batch (e.g. masked tokens). A
  # micro-batch's loss divided by these, summed over the micro-batches, is exactly the big
  # batch's loss, and so are its gradients.
  global_counts: Callable[[dict], Sums]
  # (model outputs, batch) -> metric sums of a (micro-)batch.
  sums: Callable[[dict | jax.Array, dict], Sums]
  # sums, with the global counts in place of their own -> the scalar loss.
  loss: Callable[[Sums], jax.Array]
  # The batch as the model sees it (the causal-LM objective unmasks the rows).
  prepare: Callable[[dict], dict] = lambda batch: batch
  # The model's method whose outputs `sums` reads (train_state.MeshSetup.forward).
  outputs: str = "__call__"


def split_micro_batches(batch: dict, k: int, mesh: jax.sharding.Mesh) -> dict:
  """[B, ...] -> [k, B/k, ...] with micro-batch j = rows j, j+k, j+2k, ...: each device's
  contiguous block of rows splits into k equal parts of its own, so every micro-batch stays
  sharded over the batch axes and the split moves no data between devices."""
  spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, sharding.BATCH_AXES))

  def split(x):
    x = x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1)
    return jax.lax.with_sharding_constraint(x, spec)
  return jax.tree.map(split, batch)


def make_train_step(setup: MeshSetup, objective: Objective, schedule: optax.Schedule,
                    total_steps: int, seed: int, grad_accum_steps: int = 1,
                    dropout_rng: str = "threefry2x32"
                    ) -> Callable[[State, dict], tuple[State, dict]]:
  """(state, batch) -> (state, metrics); donates the old state's buffers. `schedule`: the
  learning rate the optimizer applies (optimizer.learning_rate_schedule), logged with each
  step; `total_steps`: the run's, of which a time budget's share spent is a position.

  With `grad_accum_steps` k > 1 the global batch is split into k micro-batches inside the
  step (lax.scan): gradients and metric sums add up over them and one update is applied,
  equal to that of the whole batch. The metrics are the objective's sums plus `grad_norm`,
  `learning_rate` and `nonfinite` (1: the optimizer skipped a NaN/Inf update). `dropout_rng`:
  the PRNG implementation of dropout's bits (train.dropout_rng).
  """
  dropout_base = jax.random.key(seed, impl=dropout_rng)
  k = int(grad_accum_steps)

  def grads_and_sums(params, batch, key, counts):
    """Gradients of this (micro-)batch's share of the global loss, and its metric sums."""
    def loss_fn(params):
      outputs = setup.forward(params, batch, dropout_key=key, outputs=objective.outputs)
      sums = objective.sums(outputs, batch)
      return objective.loss({**sums, **{c: counts[c] for c in counts if c in sums}}), sums
    return jax.grad(loss_fn, has_aux=True)(params)

  def accumulate(params, batch, key, counts):
    """Sums of gradients and metrics over k micro-batches, one at a time (the memory of one)."""
    micro = split_micro_batches(batch, k, setup.mesh)

    def add_one(acc, xs):
      i, micro_batch = xs
      grads, sums = grads_and_sums(params, micro_batch, jax.random.fold_in(key, i), counts)
      # The accumulator is sharded like the parameters: under FSDP each micro-batch's
      # gradients are reduce-scattered into it, never held whole.
      grads = jax.lax.with_sharding_constraint(grads, setup.state_shardings["params"])
      return jax.tree.map(jnp.add, acc, (grads, sums)), None

    first = jax.tree.map(lambda x: x[0], micro)
    shapes = jax.eval_shape(grads_and_sums, params, first, key, counts)
    zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
    zeros = (jax.lax.with_sharding_constraint(zeros[0], setup.state_shardings["params"]),
             zeros[1])
    (grads, sums), _ = jax.lax.scan(add_one, zeros, (jnp.arange(k), micro))
    return grads, sums

  def train_step(state: State, batch: dict) -> tuple[State, dict]:
    # The device's only randomness: dropout, a pure function of (seed, step [, micro-batch]).
    key = jax.random.fold_in(dropout_base, state["step"])
    batch = objective.prepare(batch)
    counts = objective.global_counts(batch)
    if k == 1:
      grads, sums = grads_and_sums(state["params"], batch, key, counts)
    else:
      grads, sums = accumulate(state["params"], batch, key, counts)
    # The global counts are already reduced over devices (the loss needed them first): report
    # those rather than reducing the same sums a second time.
    sums.update({c: counts[c] for c in counts if c in sums})
    # The schedule follows the step, or the time budget (planning/time_budget.py): the rate logged
    # is the rate applied.
    position, spent = state["step"], None
    if BUDGET_SPENT in batch:  # one value on every process (planning/time_budget.py)
      spent = jnp.min(batch[BUDGET_SPENT])
      position = jnp.maximum(position, spent * total_steps)
    updates, opt_state = setup.tx.update(grads, state["opt_state"], state["params"],
                                         step=position)
    new_state = {"step": state["step"] + 1,
                 "params": optax.apply_updates(state["params"], updates),
                 "opt_state": opt_state}
    grad_norm = optax.global_norm(grads)
    if spent is not None:
      sums[BUDGET_SPENT] = spent
    metrics = {**sums, "grad_norm": grad_norm, "learning_rate": schedule(position),
               # 1 when the optimizer skipped this update (NaN/Inf in loss or gradients).
               "nonfinite": 1.0 - jnp.isfinite(grad_norm).astype(jnp.float32)}
    return new_state, metrics

  batch_sharding = sharding.batch_sharding(setup.mesh)
  return jax.jit(train_step, in_shardings=(setup.state_shardings, batch_sharding),
                 out_shardings=(setup.state_shardings, sharding.replicated(setup.mesh)),
                 donate_argnums=0)


def make_eval_step(setup: MeshSetup, measure: Callable[[dict | jax.Array, dict], dict]
                   ) -> Callable[[dict, dict], dict]:
  """(params, batch) -> measure(outputs, batch), without dropout, on every process."""

  def eval_step(params, batch):
    return measure(setup.forward(params, batch), batch)

  return jax.jit(eval_step,
                 in_shardings=(setup.state_shardings["params"],
                               sharding.batch_sharding(setup.mesh)),
                 out_shardings=sharding.replicated(setup.mesh))
