"""The sharded train state and the pure, jitted train/eval steps.

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

from mlmjax.models import compile_target
from mlmjax.models import electra
from mlmjax.training import losses
from mlmjax.models import bert as model_lib
from mlmjax.training import optimizer
from mlmjax.parallel import sharding
from mlmjax.data import formats

State = dict[str, Any]


@dataclasses.dataclass
class Setup:
  """Everything the loop needs to run steps on a mesh."""

  graphdef: nnx.GraphDef
  tx: optax.GradientTransformation
  mesh: jax.sharding.Mesh
  state_shardings: State
  # The parameters' shardings during forward/backward: gathered over fsdp (sharding.py); each
  # layer stack's (by the path of its `blocks`) as one layer's, applied as each layer runs.
  compute_shardings: dict
  layer_shardings: dict[str, dict]
  stored_layer_shardings: dict[str, dict]  # the same layers' at rest (their gradients')
  abstract_state: State  # ShapeDtypeStructs carrying the target shardings (for restore)
  init_fn: Callable[[], State]  # jitted: builds the state directly sharded on the mesh

  def forward(self, params, batch, dropout_key=None) -> dict[str, jax.Array]:
    """The model's outputs on a batch. FSDP: embeddings and heads are gathered over fsdp up
    front, each block's weights only when that block runs. A block's gradient comes back in
    its stored (fsdp) sharding, so it is reduce-scattered (sharding.gather_for_compute); the
    embeddings' and heads' keep the plain constraint, whose gradient is all-reduced (asking
    the same of them made GSPMD move the hidden states' gradient between devices instead,
    an all-to-all). No-ops without an fsdp axis."""
    def gather_outside_blocks(path, p, s):
      return p if "blocks" in sharding.path_keys(path) else jax.lax.with_sharding_constraint(p, s)
    params = jax.tree_util.tree_map_with_path(gather_outside_blocks, params,
                                              self.compute_shardings)
    model = nnx.merge(self.graphdef, params)
    with _for_mesh(self.mesh):  # the kernels' shard_map and `auto` choices follow the mesh
      return model(batch, dropout_key=dropout_key, constrain_layer=lambda name, p: (
          sharding.gather_for_compute(p, self.layer_shardings[name],
                                      self.stored_layer_shardings[name])))


def _for_mesh(mesh):
  """Build and trace the model for `mesh` (models/compile_target.py), not this machine."""
  return compile_target.on(mesh, sharding.BATCH_AXES, ("tensor",))


def _layer_shardings(compute: dict, model_config) -> dict[str, dict]:
  """{"blocks": one layer's shardings} (ELECTRA: "generator/blocks", "discriminator/blocks"):
  a slice of the stacked shardings, or the first layer's (all layers shard alike)."""
  out = {}

  def visit(tree, path):
    for key, sub in tree.items():
      if key == "blocks":
        out["/".join(path + [key])] = (sharding.drop_leading_axis(sub)
                                       if model_config.scan_layers else sub[0])
      elif isinstance(sub, dict):
        visit(sub, path + [key])
  visit(compute, [])
  return out


def build_model(config, vocab_size: int, seed: int) -> nnx.Module:
  """The pretraining model the config asks for (BERT-style MLM, or ELECTRA)."""
  if config.objective.kind == "electra":
    return electra.ElectraForPretraining(config.model, config.objective, vocab_size,
                                         nnx.Rngs(params=seed))
  return model_lib.BertForPretraining(config.model, vocab_size, nnx.Rngs(params=seed),
                                     nsp_head=formats.has_pair_labels(config.data.format),
                                     sbo_head=config.objective.span_boundary_weight > 0)


def make_setup(config, vocab_size: int, mesh: jax.sharding.Mesh,
               build: Callable[[], nnx.Module] | None = None) -> Setup:
  """Shapes and shardings first (eval_shape), then a jitted init whose outputs land sharded:
  full parameters are never materialised on one device. `build` makes the module (default:
  the pretraining model of `config`); `config.train` gives the optimizer, `config.mesh.rules`
  the shardings."""
  if build is None:
    build = lambda: build_model(config, vocab_size, config.seed)
  with _for_mesh(mesh):  # model.dtype='auto' is the mesh's platform's
    abstract_model = nnx.eval_shape(build)
  graphdef, abstract_params_state = nnx.split(abstract_model)
  param_shardings = sharding.param_shardings(abstract_params_state, mesh, config.mesh.rules)
  tx = optimizer.make_optimizer(config.train)

  def init() -> State:
    params = nnx.to_pure_dict(nnx.state(build()))
    return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}

  abstract = jax.eval_shape(init)
  replicated = sharding.replicated(mesh)
  # Optimizer moments (Adam/LAMB mu, nu) are sharded exactly like their parameters (so FSDP
  # shards them too); counters and other non-parameter leaves are replicated scalars.
  opt_shardings = optax.tree_map_params(
      tx, lambda _, s: s, abstract["opt_state"], param_shardings,
      transform_non_params=lambda _: replicated)
  state_shardings = {"step": replicated, "params": param_shardings, "opt_state": opt_shardings}
  compute = sharding.compute_shardings(param_shardings)
  return Setup(
      graphdef=graphdef, tx=tx, mesh=mesh, state_shardings=state_shardings,
      compute_shardings=compute, layer_shardings=_layer_shardings(compute, config.model),
      stored_layer_shardings=_layer_shardings(param_shardings, config.model),
      abstract_state=sharding.with_shardings(abstract, state_shardings),
      init_fn=jax.jit(init, out_shardings=state_shardings))


def _global_counts(batch: dict) -> dict[str, jax.Array]:
  """The denominators of losses.total_loss for the WHOLE global batch: masked tokens, and rows
  (NSP/SOP: one label per row). A micro-batch's loss divided by these, summed over the
  micro-batches, is exactly the big batch's loss, and so are its gradients."""
  return {"mlm_count": jnp.sum(batch["masked_weights"]),
          "nsp_count": jnp.asarray(batch["input_ids"].shape[0], jnp.float32),
          "rtd_count": jnp.sum((batch["segment_ids"] > 0).astype(jnp.float32))}


def split_micro_batches(batch: dict, k: int, mesh: jax.sharding.Mesh) -> dict:
  """[B, ...] -> [k, B/k, ...] with micro-batch j = rows j, j+k, j+2k, ...: each device's
  contiguous block of rows splits into k equal parts of its own, so every micro-batch stays
  sharded over the batch axes and the split moves no data between devices."""
  spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, sharding.BATCH_AXES))

  def split(x):
    x = x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1)
    return jax.lax.with_sharding_constraint(x, spec)
  return jax.tree.map(split, batch)


def make_train_step(setup: Setup, config, per_token_loss: bool = False
                    ) -> Callable[[State, dict], tuple[State, dict]]:
  """(state, batch) -> (state, metrics); donates the old state's buffers.

  With `train.grad_accum_steps` k > 1 the global batch is split into k micro-batches inside
  the step (lax.scan): gradients and metric sums add up over them and one update is applied,
  equal to that of the whole batch. `per_token_loss` adds `token_loss_sum`/`token_count` [V]
  to the metrics (adaptive masking).
  """
  schedule = optimizer.learning_rate_schedule(config.train)
  dropout_base = jax.random.PRNGKey(config.seed)
  k = int(config.train.grad_accum_steps)

  def grads_and_sums(params, batch, key, counts):
    """Gradients of this (micro-)batch's share of the global loss, and its metric sums."""
    def loss_fn(params):
      outputs = setup.forward(params, batch, dropout_key=key)
      sums = losses.model_sums(outputs, batch)
      loss = losses.total_loss({**sums, **{c: counts[c] for c in counts if c in sums}},
                               config.objective)
      return loss, (sums, outputs["mlm_logits"])

    grads, (sums, mlm_logits_bpv) = jax.grad(loss_fn, has_aux=True)(params)
    if per_token_loss:
      sums.update(losses.per_token_sums(mlm_logits_bpv, batch["masked_ids"],
                                        batch["masked_weights"]))
    return grads, sums

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
    counts = _global_counts(batch)
    if k == 1:
      grads, sums = grads_and_sums(state["params"], batch, key, counts)
    else:
      grads, sums = accumulate(state["params"], batch, key, counts)
    # The global counts are already reduced over devices (the loss needed them first): report
    # those rather than reducing the same sums a second time.
    sums.update({c: counts[c] for c in counts if c in sums})
    # The schedule follows the step (optimizer.py): the rate logged is the rate applied.
    updates, opt_state = setup.tx.update(grads, state["opt_state"], state["params"],
                                         step=state["step"])
    new_state = {"step": state["step"] + 1,
                 "params": optax.apply_updates(state["params"], updates),
                 "opt_state": opt_state}
    grad_norm = optax.global_norm(grads)
    metrics = {**sums, "grad_norm": grad_norm, "learning_rate": schedule(state["step"]),
               # 1 when the optimizer skipped this update (NaN/Inf in loss or gradients).
               "nonfinite": 1.0 - jnp.isfinite(grad_norm).astype(jnp.float32)}
    return new_state, metrics

  batch_sharding = sharding.batch_sharding(setup.mesh)
  return jax.jit(train_step, in_shardings=(setup.state_shardings, batch_sharding),
                 out_shardings=(setup.state_shardings, sharding.replicated(setup.mesh)),
                 donate_argnums=0)


def make_eval_step(setup: Setup) -> Callable[[dict, dict], dict]:
  """(params, batch) -> metric sums and a target histogram, without dropout."""

  def eval_step(params, batch):
    outputs = setup.forward(params, batch)
    sums = losses.model_sums(outputs, batch, with_shown_ids=True)
    # Histogram of the targets, for the best constant predictor's accuracy (the baseline).
    sums["target_histogram"] = jnp.zeros(outputs["mlm_logits"].shape[-1], jnp.float32).at[
        batch["masked_ids"]].add(batch["masked_weights"])
    return sums

  return jax.jit(eval_step,
                 in_shardings=(setup.state_shardings["params"],
                               sharding.batch_sharding(setup.mesh)),
                 out_shardings=sharding.replicated(setup.mesh))
