"""The train state and the pure, jitted train/eval steps.

The state is a plain pytree `{"step", "params", "opt_state"}`: params are the model's
`nnx.to_pure_dict` (a nested dict of arrays), so orbax, optax and jit see ordinary pytrees and
the NNX module is rebuilt inside jit with `nnx.merge` (trace-time only, no per-step cost).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mlmjax import checkpoint
from mlmjax import losses
from mlmjax import model as model_lib
from mlmjax import optim
from mlmjax import sharding
from mlmjax.data import formats

State = dict[str, Any]


@dataclasses.dataclass
class Setup:
  """Everything the loop needs to run steps on a mesh."""

  graphdef: nnx.GraphDef
  tx: optax.GradientTransformation
  mesh: jax.sharding.Mesh
  state_shardings: State
  abstract_state: State  # ShapeDtypeStructs carrying the target shardings (for restore)
  init_fn: Callable[[], State]  # jitted: builds the state directly sharded on the mesh


def _build_model(config, vocab_size: int, seed: int) -> model_lib.BertForPretraining:
  return model_lib.BertForPretraining(config.model, vocab_size, nnx.Rngs(params=seed),
                                     nsp_head=formats.has_pair_labels(config.data.format))


def make_setup(config, vocab_size: int, mesh: jax.sharding.Mesh) -> Setup:
  """Shapes and shardings first (eval_shape), then a jitted init whose outputs land sharded:
  full parameters are never materialised on one device."""
  abstract_model = nnx.eval_shape(lambda: _build_model(config, vocab_size, config.seed))
  graphdef, abstract_params_state = nnx.split(abstract_model)
  param_shardings = sharding.param_shardings(abstract_params_state, mesh, config.mesh.rules)
  tx = optim.make_optimizer(config.train)

  def init() -> State:
    params = nnx.to_pure_dict(nnx.state(_build_model(config, vocab_size, config.seed)))
    return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}

  abstract = jax.eval_shape(init)
  replicated = sharding.replicated(mesh)
  opt_shardings = optax.tree_map_params(
      tx, lambda _, s: s, abstract["opt_state"], param_shardings,
      transform_non_params=lambda _: replicated)
  state_shardings = {"step": replicated, "params": param_shardings, "opt_state": opt_shardings}
  return Setup(
      graphdef=graphdef, tx=tx, mesh=mesh, state_shardings=state_shardings,
      abstract_state=checkpoint.abstract_with_shardings(abstract, state_shardings),
      init_fn=jax.jit(init, out_shardings=state_shardings))


def make_train_step(setup: Setup, config, per_token_loss: bool = False
                    ) -> Callable[[State, dict], tuple[State, dict]]:
  """(state, batch) -> (state, metrics); donates the old state's buffers.

  `per_token_loss` adds `token_loss_sum`/`token_count` [V] to the metrics (adaptive masking).
  """
  schedule = optim.learning_rate_schedule(config.train)
  dropout_base = jax.random.PRNGKey(config.seed)

  def train_step(state: State, batch: dict) -> tuple[State, dict]:
    # The device's only randomness: dropout, a pure function of (seed, step).
    key = jax.random.fold_in(dropout_base, state["step"])

    def loss_fn(params):
      outputs = nnx.merge(setup.graphdef, params)(batch, dropout_key=key)
      sums = losses.model_sums(outputs, batch)
      return losses.total_loss(sums), (sums, outputs["mlm_logits"])

    grads, (sums, mlm_logits_bpv) = jax.grad(loss_fn, has_aux=True)(state["params"])
    updates, opt_state = setup.tx.update(grads, state["opt_state"], state["params"])
    new_state = {"step": state["step"] + 1,
                 "params": optax.apply_updates(state["params"], updates),
                 "opt_state": opt_state}
    grad_norm = optax.global_norm(grads)
    metrics = {**sums, "grad_norm": grad_norm, "learning_rate": schedule(state["step"]),
               # 1 when the optimizer skipped this update (NaN/Inf in loss or gradients).
               "nonfinite": 1.0 - jnp.isfinite(grad_norm).astype(jnp.float32)}
    if per_token_loss:
      metrics.update(losses.per_token_sums(mlm_logits_bpv, batch["masked_ids"],
                                           batch["masked_weights"]))
    return new_state, metrics

  batch_sharding = sharding.batch_sharding(setup.mesh)
  return jax.jit(train_step, in_shardings=(setup.state_shardings, batch_sharding),
                 out_shardings=(setup.state_shardings, sharding.replicated(setup.mesh)),
                 donate_argnums=0)


def make_eval_step(setup: Setup) -> Callable[[dict, dict], dict]:
  """(params, batch) -> metric sums and a target histogram, without dropout."""

  def eval_step(params, batch):
    outputs = nnx.merge(setup.graphdef, params)(batch)
    sums = losses.model_sums(outputs, batch, with_shown_ids=True)
    # Histogram of the targets, for the best constant predictor's accuracy (the baseline).
    sums["target_histogram"] = jnp.zeros(outputs["mlm_logits"].shape[-1], jnp.float32).at[
        batch["masked_ids"]].add(batch["masked_weights"])
    return sums

  return jax.jit(eval_step,
                 in_shardings=(setup.state_shardings["params"],
                               sharding.batch_sharding(setup.mesh)),
                 out_shardings=sharding.replicated(setup.mesh))


def to_device(batch: dict, mesh: jax.sharding.Mesh) -> dict:
  """This process's rows -> global arrays sharded over the batch axes of the mesh."""
  s = sharding.batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(s, v) for k, v in batch.items()}
