"""A pretraining run's parts, made from its settings in one place: its input, its model on a
mesh, its train step, its batches' shapes and its FLOPs.

    RunSettings --plan once (phases.py)--> Assembly(settings, plan)
      .input(...)        data/run_input.py's RunInput: train and held-out batches, tokenizer
      .setup(...)        train_state.MeshSetup: the model and optimizer, sharded
      .objective(...)    the run's objective, or a phase's (objectives/)
      .train_step(...)   steps.make_train_step with that objective's loss
      .eval_step(...)    steps.make_eval_step with its held-out sums
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

from mlmjax.data.rows import formats
from mlmjax.data import run_input
from mlmjax.models import batch_schema
from mlmjax.models import flops
from mlmjax.parallel import sharding
from mlmjax.training.core import optimizer
from mlmjax.training.core import steps
from mlmjax.training.core import train_state
from mlmjax.training import objectives
from mlmjax.training.planning import phases as phases_lib
from mlmjax.training.planning import time_budget
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
    return run_input.build(s.data, s.tokenizer, s.masking, self._held_out(),
                           s.objective.span_boundary_weight > 0, tokenizer_paths, stats_path)

  def held_out_input(self, tokenizer_path: str, stats_path: str,
                     source: str = "") -> run_input.RunInput:
    """A finished run's held-out input (its saved tokenizer and stats), or every document of
    `source` when given: what `evaluate` scores (inference/evaluation.py)."""
    s = self.settings
    return run_input.held_out_input(s.data, s.masking, self._held_out(),
                                    s.objective.span_boundary_weight > 0, tokenizer_path,
                                    stats_path, source)

  def _held_out(self) -> run_input.HeldOut:
    s = self.settings
    return run_input.HeldOut(s.eval.mask_rate, s.train.eval_batches)

  def objective(self, name: str | None = None) -> objectives.Objective:
    """The objective `name` (a phase's), by default the run's (objective.kind)."""
    return objectives.get(name or self.settings.objective.kind)

  def model(self, vocab_size: int, mesh: jax.sharding.Mesh,
            rope_base: float | None = None) -> nnx.Module:
    """The run's objective's pretraining model, with the heads it and the data format ask for,
    for `mesh` (at another rotary base: a phase's)."""
    s = self.settings
    model = s.model if rope_base is None else dataclasses.replace(s.model, rope_base=rope_base)
    return self.objective().model(model, s.objective, vocab_size, nnx.Rngs(params=s.seed),
                                  train_state.target(mesh),
                                  pairs=formats.has_pair_labels(s.data.format))

  def setup(self, vocab_size: int, mesh: jax.sharding.Mesh) -> train_state.MeshSetup:
    """The model with its optimizer (optimizer.*, over train.steps on the plan's token clock),
    sharded by mesh.rules."""
    s = self.settings
    return train_state.sharded_setup(
        lambda: self.model(vocab_size, mesh),
        optimizer.make_optimizer(s.optimizer, s.train.steps, self.plan.step_tokens), mesh,
        s.mesh.rules, s.model.scan_layers)

  def with_rope_base(self, setup: train_state.MeshSetup, vocab_size: int,
                     rope_base: float) -> train_state.MeshSetup:
    """`setup` running the model at another rotary base (a phase's): the base is part of the
    graph, not of the parameters, so the parameters, optimizer and shardings stay."""
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: self.model(vocab_size, setup.mesh, rope_base)))
    return dataclasses.replace(setup, graphdef=graphdef)

  def train_step(self, setup: train_state.MeshSetup, per_token_loss: bool = False,
                 objective: str | None = None):
    """The pretraining train step (its objective's loss, the optimizer's schedule, the run's
    seed); `objective`: a phase's in place of objective.kind."""
    s = self.settings
    loss = self.objective(objective).step(s.objective, per_token_loss)
    schedule = optimizer.learning_rate_schedule(s.optimizer, s.train.steps,
                                                self.plan.step_tokens)
    return steps.make_train_step(setup, loss, schedule, s.train.steps, s.seed,
                                 s.train.grad_accum_steps, s.train.dropout_rng)

  def eval_step(self, setup: train_state.MeshSetup, objective: str | None = None):
    """The held-out step of a phase of `objective` (default: the run's): its evaluation's
    sums, without dropout."""
    return steps.make_eval_step(setup, self.objective(objective).evaluation().heldout_sums)

  def batch_spec(self, mesh: jax.sharding.Mesh, batch_size: int, seq_len: int,
                 max_predictions: int, objective: str | None = None) -> dict:
    """The abstract global batch of that shape the steps take (models/batch_schema.py): its
    keys follow the data format and what the objective's masker makes (`objective`: a
    phase's)."""
    s = self.settings
    masker = self.objective(objective).masker
    spec = batch_schema.shapes(batch_size, seq_len, max_predictions,
                               pairs=formats.has_pair_labels(s.data.format),
                               span_boundaries=s.objective.span_boundary_weight > 0,
                               diffusion=masker == objectives.DIFFUSION_MASKER)
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
        self.objective().generator_fraction(s.objective))

  def attention_flops_per_token(self, seq_len: int) -> float:
    """models/flops.py's forward FLOPs per token of attention's scores and context alone."""
    s = self.settings
    return flops.attention_flops_per_token(s.model, seq_len,
                                           self.objective().generator_fraction(s.objective))
