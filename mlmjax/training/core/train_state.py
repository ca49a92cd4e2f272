"""The train state on a mesh: `{"step", "params", "opt_state"}`, sharded, and how to build it.

params are the model's `nnx.to_pure_dict` (a nested dict of arrays), so orbax, optax and jit see
ordinary pytrees and the NNX module is rebuilt inside jit with `nnx.merge` (trace-time only, no
per-step cost). `MeshSetup` holds what the steps need: the graph, the optimizer, the shardings.
Pretraining and fine-tuning alike build theirs with `sharded_setup` (pretraining's model is
assembly.py's); nothing here reads a run's settings.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mlmjax.models import compile_target
from mlmjax.models import param_names
from mlmjax.parallel import sharding

State = dict[str, Any]


@dataclasses.dataclass
class MeshSetup:
  """A model and its optimizer set up on a mesh: everything the loop needs to run steps."""

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

  def forward(self, params, batch, dropout_key=None, outputs: str = "__call__"
              ) -> dict[str, jax.Array]:
    """The model's outputs on a batch: `outputs` names the model's method that gives them
    (bert.py's next_token_features: the causal LM's; masked_features: the MLM head's slots
    before the decoder). FSDP: embeddings and heads are gathered over fsdp up front, each
    block's weights only when that block runs; every gradient is asked for in its stored
    (fsdp) sharding (sharding.gather_for_compute), not summed whole on every device. For the
    token embedding's lookup that lets GSPMD move the hidden states' gradient to the devices
    holding each slice of the table (one all-to-all of [tokens, width], 12.6 MB a step for
    BERT-base over fsdp 8) instead of all-reducing the table's gradient (94 MB); XLA still
    all-reduces the tied decoder's part (docs/performance.md has the figures). No-ops without
    an fsdp axis."""
    stored = self.state_shardings["params"]
    def gather_outside_blocks(path, p, c, s):
      if "blocks" in param_names.path_keys(path):
        return p
      return sharding.gather_for_compute(p, c, s)
    params = jax.tree_util.tree_map_with_path(gather_outside_blocks, params,
                                              self.compute_shardings, stored)
    model = nnx.merge(self.graphdef, params)
    return getattr(model, outputs)(batch, dropout_key=dropout_key, constrain_layer=lambda name, p: (
        sharding.gather_for_compute(p, self.layer_shardings[name],
                                    self.stored_layer_shardings[name])))


def target(mesh: jax.sharding.Mesh) -> compile_target.Target:
  """What a model built for `mesh` is told of it (models/compile_target.py): its platform and
  how the batch and the heads are split, whatever devices this machine has."""
  return compile_target.Target(mesh, sharding.BATCH_AXES, ("tensor",))


def _layer_shardings(compute: dict, scan_layers: bool) -> dict[str, dict]:
  """{"blocks": one layer's shardings} (ELECTRA: "generator/blocks", "discriminator/blocks"):
  a slice of the stacked shardings, or the first layer's (all layers shard alike)."""
  out = {}

  def visit(tree, path):
    for key, sub in tree.items():
      if key == "blocks":
        out["/".join(path + [key])] = (sharding.drop_leading_axis(sub)
                                       if scan_layers else sub[0])
      elif isinstance(sub, dict):
        visit(sub, path + [key])
  visit(compute, [])
  return out


def sharded_setup(build: Callable[[], nnx.Module], tx: optax.GradientTransformation,
                  mesh: jax.sharding.Mesh, rules, scan_layers: bool) -> MeshSetup:
  """The MeshSetup of any module `build` makes (the pretraining model, a fine-tuning classifier):
  shapes and shardings first (eval_shape), then a jitted init whose outputs land sharded, so
  full parameters are never materialised on one device. `rules`: the logical axis rules;
  `scan_layers`: whether the layer stacks are stacked arrays (their per-layer shardings)."""
  abstract_model = nnx.eval_shape(build)
  graphdef, abstract_params_state = nnx.split(abstract_model)
  param_shardings = sharding.param_shardings(abstract_params_state, mesh, rules)

  def init() -> State:
    params = nnx.to_pure_dict(nnx.state(build()))
    return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}

  abstract = jax.eval_shape(init)
  replicated = sharding.replicated(mesh)
  # Optimizer moments (Adam/LAMB mu, nu, Muon's momentum) are sharded exactly like their
  # parameters (so FSDP shards them too); counters and other non-parameter leaves are
  # replicated scalars. A parameter group's state (Muon) holds MaskedNodes for the others.
  masked = lambda v: isinstance(v, optax.MaskedNode)
  opt_shardings = optax.tree_map_params(
      tx, lambda v, s: v if masked(v) else s, abstract["opt_state"], param_shardings,
      transform_non_params=lambda _: replicated, is_leaf=masked)
  state_shardings = {"step": replicated, "params": param_shardings, "opt_state": opt_shardings}
  compute = sharding.compute_shardings(param_shardings)
  return MeshSetup(
      graphdef=graphdef, tx=tx, mesh=mesh, state_shardings=state_shardings,
      compute_shardings=compute, layer_shardings=_layer_shardings(compute, scan_layers),
      stored_layer_shardings=_layer_shardings(param_shardings, scan_layers),
      abstract_state=sharding.with_shardings(abstract, state_shardings),
      init_fn=jax.jit(init, out_shardings=state_shardings))
