"""A pretraining run's parts, made from its settings in one place: its input, its model on a
mesh, its train step, its batches' shapes and its FLOPs.

    RunSettings --plan once (phases.py)--> Assembly(settings, plan)
      .input(...)        data/run_input.py's RunInput: train and held-out batches, tokenizer
      .setup(...)        train_state.MeshSetup: the model and optimizer, sharded
      .train_step(...)   steps.make_train_step with the pretraining objective
      .batch_spec(...)   the abstract batch a step is compiled for
      .flops_per_token   models/flops.py's count for this model

The run (train.py), the compiles (aot.py, fit.py) and the benchmarks assemble their parts here;
below it every function takes the sections it reads.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from mlmjax.data import run_input
from mlmjax.data.rows import formats
from mlmjax.models import batch_schema
from mlmjax.models import bert
from mlmjax.models import electra
from mlmjax.models import flops
from mlmjax.parallel import sharding
from mlmjax.training import optimizer
from mlmjax.training import phases as phases_lib
from mlmjax.training import steps
from mlmjax.training import time_budget
from mlmjax.training import train_state
from mlmjax.training.run_settings import RunSettings


@dataclasses.dataclass(frozen=True)
class Assembly:
  """A run's settings and its plan (train.phases parsed once)."""

  settings: RunSettings
  plan: phases_lib.Plan

  @classmethod
  def of(cls, config) -> "Assembly":
    """The assembly of a config (configs/base.py's keys) or of RunSettings."""
    settings = RunSettings.from_config(config)
    return cls(settings, phases_lib.plan(settings))

  def with_settings(self, settings: RunSettings) -> "Assembly":
    """Another assembly of the same plan: settings the phases do not read changed (the fit's
    micro-batches and recomputation, a phase's rotary base)."""
    return dataclasses.replace(self, settings=settings)

  def input(self, tokenizer_paths: dict[str, str], stats_path: str) -> run_input.RunInput:
    """The run's input (data/run_input.py) from the sections it reads."""
    s = self.settings
    return run_input.build(s.data, s.tokenizer, s.masking,
                           run_input.HeldOut(s.eval.mask_rate, s.train.eval_batches),
                           s.objective.span_boundary_weight > 0, tokenizer_paths, stats_path)

  def model(self, vocab_size: int, mesh: jax.sharding.Mesh,
            rope_base: float | None = None) -> nnx.Module:
    """The pretraining model (BERT-style MLM, or ELECTRA) with the heads the objective and the
    data format ask for, for `mesh` (at another rotary base: a phase's)."""
    s = self.settings
    model = s.model if rope_base is None else dataclasses.replace(s.model, rope_base=rope_base)
    target = train_state.target(mesh)
    if s.objective.kind == "electra":
      return electra.ElectraForPretraining(model, s.objective.generator_fraction, vocab_size,
                                           nnx.Rngs(params=s.seed), target)
    return bert.BertForPretraining(model, vocab_size, nnx.Rngs(params=s.seed),
                                   nsp_head=formats.has_pair_labels(s.data.format),
                                   sbo_head=s.objective.span_boundary_weight > 0, target=target)

  def setup(self, vocab_size: int, mesh: jax.sharding.Mesh) -> train_state.MeshSetup:
    """The model with its optimizer (train.*, on the plan's token clock), sharded by
    mesh.rules."""
    s = self.settings
    return train_state.sharded_setup(
        lambda: self.model(vocab_size, mesh),
        optimizer.make_optimizer(s.train, self.plan.step_tokens), mesh, s.mesh.rules,
        s.model.scan_layers)

  def with_rope_base(self, setup: train_state.MeshSetup, vocab_size: int,
                     rope_base: float) -> train_state.MeshSetup:
    """`setup` running the model at another rotary base (a phase's): the base is part of the
    graph, not of the parameters, so the parameters, optimizer and shardings stay."""
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: self.model(vocab_size, setup.mesh, rope_base)))
    return dataclasses.replace(setup, graphdef=graphdef)

  def train_step(self, setup: train_state.MeshSetup, per_token_loss: bool = False,
                 objective_kind: str | None = None):
    """The pretraining train step (its objective, the optimizer's schedule, the run's seed);
    `objective_kind` 'clm', 'mlm' or 'diffusion' (a phase's) in place of objective.kind."""
    s = self.settings
    if (objective_kind or s.objective.kind) == "clm":
      objective = steps.causal_lm_objective(per_token_loss)
    else:
      objective = steps.pretraining_objective(s.objective, per_token_loss)
    return steps.make_train_step(setup, objective, s.train, s.seed, self.plan.step_tokens)

  def batch_spec(self, mesh: jax.sharding.Mesh, batch_size: int, seq_len: int,
                 max_predictions: int, objective_kind: str | None = None) -> dict:
    """The abstract global batch of that shape the steps take (models/batch_schema.py): its
    keys follow the data format and the objective (`objective_kind`: a phase's)."""
    s = self.settings
    spec = batch_schema.shapes(batch_size, seq_len, max_predictions,
                               pairs=formats.has_pair_labels(s.data.format),
                               span_boundaries=s.objective.span_boundary_weight > 0,
                               diffusion=(objective_kind or s.objective.kind) == "diffusion")
    if s.train.budget_hours:  # the share of the time budget spent (time_budget.py)
      spec[time_budget.KEY] = ((batch_size,), jnp.float32)
    sharded = sharding.batch_sharding(mesh)
    return {k: jax.ShapeDtypeStruct(shape, dt, sharding=sharded)
            for k, (shape, dt) in spec.items()}

  def flops_per_token(self, vocab_size: int, seq_len: int | None = None,
                      max_predictions: int | None = None) -> float:
    """models/flops.py's count for the model `model` makes, at a row length and slot count
    (default: data.seq_len, masking.max_predictions_per_seq)."""
    s = self.settings
    return flops.train_flops_per_token(
        s.model, vocab_size, seq_len or s.data.seq_len,
        max_predictions or s.masking.max_predictions_per_seq,
        s.objective.generator_fraction if s.objective.kind == "electra" else None)

  def attention_flops_per_token(self, seq_len: int) -> float:
    """models/flops.py's forward FLOPs per token of attention's scores and context alone."""
    s = self.settings
    return flops.attention_flops_per_token(
        s.model, seq_len, s.objective.generator_fraction if s.objective.kind == "electra"
        else None)
