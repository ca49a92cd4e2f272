"""train_and_evaluate(config, workdir): the whole training run, top to bottom.

    settings from the config, checked -> lock the workdir -> input (data, tokenizer, masker)
    -> mesh + sharded state -> restore? -> loop: train step, host bookkeeping, [eval],
    [checkpoint] -> the end

The step loop itself (the order of things, preemption, the non-finite policy) is loop.py's,
shared with fine-tuning. The host side of the loop has participants that it treats alike: its
own bookkeeping (`LoopState`: metric sums of the logging interval, skip counters) and the
masking feedback (masking_feedback.py; a do-nothing one unless adaptive masking is on). Each
hands the checkpoint its state and gets it back on resume, which is what makes a resumed run
bit-identical.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

from absl import logging
import jax
import numpy as np

from mlmjax.data import pipeline
from mlmjax.data import run_input as input_lib
from mlmjax.hf import importer
from mlmjax.models import bert
from mlmjax.models import flops
from mlmjax.parallel import distributed
from mlmjax.parallel import sharding
from mlmjax.training import assembly as assembly_lib
from mlmjax.training import config_check
from mlmjax.training import objectives
from mlmjax.training.planning import fit
from mlmjax.training.planning import phases as phases_lib
from mlmjax.training.planning import time_budget
from mlmjax.training.run import checkpoint as checkpoint_lib
from mlmjax.training.run import compile_cache
from mlmjax.training.run import goodput
from mlmjax.training.run import learning_curves
from mlmjax.training.run import loop
from mlmjax.training.run import masking_feedback
from mlmjax.training.run import metrics as metrics_lib
from mlmjax.training.run import profiling
from mlmjax.training.run import stragglers
from mlmjax.training.run import watchdog as watchdog_lib
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training.run import workdir_lock
from mlmjax.training.run_settings import RunSettings
from mlmjax.training.settings import TrainSettings


class LoopState:
  """Metric sums of the current logging interval, and the non-finite policy's counters."""

  def __init__(self, train: TrainSettings):
    self.interval: dict[str, float] = {}
    self.nonfinite = loop.NonFinitePolicy(train.nonfinite_policy, train.max_consecutive_skips)

  def record(self, step: int, m: dict, objective: objectives.Objective) -> bool:
    """Adds a finished step's metrics (its `objective`'s sums); False if its update was
    skipped (non-finite)."""
    if not self.nonfinite.applied(step, m["nonfinite"]):
      return False
    for k in objective.sum_keys:
      if k in m:
        self.interval[k] = self.interval.get(k, 0.0) + float(m[k])
    return True

  def end_interval(self, m: dict, objective: objectives.Objective) -> dict[str, float]:
    """The interval's summary by `objective` (then a new interval starts); empty if nothing
    was applied."""
    if not self.interval:
      return {}
    row = {**objective.summarize(self.interval), "learning_rate": float(m["learning_rate"]),
           "grad_norm": float(m["grad_norm"]), "skipped_steps": self.nonfinite.skipped}
    self.interval = {}
    return row

  def state(self) -> dict:
    return {"interval": dict(self.interval), **self.nonfinite.state()}

  def load(self, state: dict) -> None:
    self.interval = {k: float(v) for k, v in state["interval"].items()}
    self.nonfinite.load(state)


def heldout_metrics(eval_step, objective: objectives.Objective, params,
                    run_input: input_lib.RunInput, shape: input_lib.Shape,
                    mesh, batch_size: int | None = None,
                    interrupted: Callable[[], bool] = lambda: False,
                    diffusion_sample: int | None = None) -> dict[str, float] | None:
  """Held-out metrics over `train.eval_batches` fixed batches of `shape` (a phase; with
  `batch_size` rows, default the phase's): the same masks every time (`diffusion_sample`:
  masked as the diffusion objective masks, run_input.py). None if `interrupted()`, asked
  before each batch, said to stop."""
  totals: dict[str, np.ndarray] = {}
  for batch in run_input.eval_batches(shape, batch_size, diffusion_sample):
    if interrupted():
      return None
    sums = jax.device_get(eval_step(params, sharding.to_device(batch, mesh)))
    for k, v in sums.items():
      totals[k] = totals.get(k, 0) + np.asarray(v, np.float64)
  histogram = totals.pop("target_histogram")
  out = objective.evaluation().summarize(totals)
  # Accuracy of always predicting the single most frequent held-out target: the bar to beat.
  out["constant_baseline_accuracy"] = float(histogram.max() / max(histogram.sum(), 1.0))
  return {f"eval/{k}": v for k, v in out.items()}


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict[str, float]:
  """Trains with `config` (a ConfigDict of configs/base.py's keys, or RunSettings), resuming
  from `workdir` if it holds a checkpoint; returns the last eval metrics.

  `stop_after` ends this call early at that step, with a checkpoint, as an interruption would:
  the run continues exactly where it stopped on the next call (e.g. Colab sessions in chunks).
  """
  settings = RunSettings.from_config(config)
  if settings.init_from:  # the checkpoint's architecture and tokenizer, before the checks
    settings = with_init_from(settings)
  parts = assembly_lib.Assembly.of(settings)  # train.phases parsed: the plan of the run
  config_check.check(settings, parts.plan)  # before anything is written
  run = workdir_lib.Workdir(workdir)
  run.make_writable()
  clock = goodput.Clock(run.goodput, jax.process_index())  # from the process's start
  clock.enter("preparation")
  with workdir_lock.WorkdirLock(run.lock, workdir), compile_cache.enabled(
      settings.train.compilation_cache, run.compile_cache):
    return _Trainer(parts, run, clock).run(stop_after)


def with_init_from(settings: RunSettings) -> RunSettings:
  """`settings` with the architecture and the tokenizer of the checkpoint `init_from` names
  (hf/importer.py)."""
  return settings.replace(
      model=importer.configure(settings.model, settings.init_from, settings.data.format),
      tokenizer={"path": importer.tokenizer_folder(settings.init_from, settings.tokenizer.path)})


class _Trainer(loop.StepLoop):
  """One training run; `run()` is the story, the other methods its parts and the loop's hooks."""

  def __init__(self, parts: assembly_lib.Assembly, run: workdir_lib.Workdir,
               clock: goodput.Clock):
    self.workdir, self.clock = run, clock
    # This process's records of earlier attempts: the goodput of the whole run so far.
    self.earlier = [r for r in goodput.records(run.goodput) if r["process"] == clock.process]
    self.input = parts.input(run.tokenizers, run.vocab_stats)
    vocab_size = self.input.tokenizer.vocab_size
    self.mesh = sharding.make_mesh(parts.settings.mesh)
    if parts.settings.train.fit == "auto":  # micro-batches and remat for these devices (fit.py)
      parts = fit.resolve(parts, vocab_size, self.mesh, run.fit)
    self.parts, self.settings, self.plan = parts, parts.settings, parts.plan
    settings = self.settings
    self.feedback = masking_feedback.for_settings(settings.masking, vocab_size)
    self.loop = LoopState(settings.train)
    self.setup = parts.setup(vocab_size, self.mesh)
    self._steps_by_graph: dict[tuple[float, str], tuple] = {}
    self.ckpt = checkpoint_lib.Checkpointer(run.checkpoints, run.corrupt_checkpoints,
                                            settings.train.max_checkpoints_to_keep)
    self.checkpoint_every = settings.train.checkpoint_every_steps
    num_params = sum(int(np.prod(x.shape))
                     for x in jax.tree.leaves(self.setup.abstract_state["params"]))
    logging.info("Model: %s parameters; mesh %s on %d devices; compilation cache: %s",
                 f"{num_params:,}", dict(self.mesh.shape), self.mesh.size,
                 compile_cache.describe())
    self.phase = self.data = None
    self.eval_metrics: dict[str, float] = {}
    self.budget = (time_budget.TimeBudget(settings.train.budget_hours)
                   if settings.train.budget_hours else None)
    self.budget_spent_at: int | None = None  # the step whose metrics said it was spent
    self.watchdog = watchdog_lib.Watchdog(settings.watchdog, run.path, clock.process, clock)
    self.stragglers = stragglers.StragglerCheck(clock, settings.watchdog.straggler_share,
                                                jax.process_count())

  def _open_phase(self, phase: phases_lib.Phase):
    """The input of `phase` (its first batch trains step phase.start + 1), prefetched onto
    the mesh while the device computes."""
    if self.data is not None:
      self.data.close()
    self.phase = phase
    self.compiling = True  # new shapes, or a new graph: the next step's dispatch compiles
    self.train_step, self.eval_step = self._steps_for(phase.rope_base, phase.objective)
    self.data = pipeline.on_mesh(
        self.input.train_iter(phase, phase.start, self.feedback.weights_at,
                              self.plan.mask_rates),
        self.mesh, self.settings.data.device_prefetch)
    return self.data

  def _steps_for(self, rope_base: float, objective: str):
    """The train and eval steps of a phase: one pair per rotary base and objective (both are
    part of the step's graph, not of the parameters; new shapes only retrace the same jitted
    steps). The eval step is MLM's whatever the phase trains."""
    if (rope_base, objective) not in self._steps_by_graph:
      setup = self.parts.with_rope_base(self.setup, self.input.tokenizer.vocab_size, rope_base)
      # Dropout keys are seeded by the run's seed (a phase's seed is its data's).
      self._steps_by_graph[rope_base, objective] = (
          self.parts.train_step(setup, self.feedback.per_token_loss, objective),
          self.parts.eval_step(setup, objective))
    return self._steps_by_graph[rope_base, objective]

  def _restore(self):
    # The iterator in a checkpoint is that of the phase which trained its last step.
    self.clock.enter("restore")
    restored = self.ckpt.restore_latest(
        self.setup.abstract_state,
        lambda step: self._open_phase(self.plan.at(max(step - 1, 0))))
    self.clock.enter("preparation")
    if restored is None:
      self._open_phase(self.plan.phases[0])
      if self.settings.init_from:
        logging.info("Starting from %s in %s", self.settings.init_from, self.workdir.path)
        s = self.settings
        return 0, importer.initial_state(s.init_from, s.model, s.data.format, self.setup,
                                         self.input.tokenizer)
      logging.info("Starting from scratch in %s", self.workdir.path)
      return 0, self.setup.init_fn()
    self.clock.restored_step = self.clock.last_step = restored.step
    self.loop.load(restored.host["loop"])
    self.feedback.load(restored.host["feedback"], restored.step)
    if self.budget:
      self.budget.load(restored.host.get("budget"))
    logging.info("Resumed from checkpoint at step %d in %s", restored.step, self.ckpt.directory)
    return restored.step, restored.state

  def _peak_flops(self) -> float:
    """The mesh's rated peak at the compute dtype, else a matmul timed here (e.g. a CPU)."""
    dtype = bert.compute_dtype(self.settings.model.dtype)
    peak = flops.rated_peak(self.mesh.devices.flat[0], dtype) or flops.measured_matmul_peak(dtype)
    return peak * self.mesh.size

  def _set_throughput_shapes(self) -> None:
    self.throughput.set_shapes(
        self.phase.batch_size * self.phase.seq_len,
        self.parts.flops_per_token(self.input.tokenizer.vocab_size, self.phase.seq_len,
                                   self.phase.predictions))

  def _eval_missing(self, step: int) -> bool:
    """An eval due at the resumed step that never reached metrics.jsonl (the run stopped
    between the checkpoint and the eval, or a preemption saved without evaluating)."""
    missing = jax.process_index() == 0 and step > 0 and self.eval_due(step) and not any(
        r["step"] == step and any(k.startswith("eval/") for k in r)
        for r in metrics_lib.rows(self.workdir.metrics))
    return distributed.allgather_json(missing)[0]  # process 0 holds the log

  # ---- the loop's hooks (loop.StepLoop) ------------------------------------------------------
  def before_step(self, step: int) -> None:
    if step >= self.phase.end:  # next sequence-length phase: new shapes, same state
      self._open_phase(self.plan.phases[self.phase.index + 1])
      self._set_throughput_shapes()
      logging.info("Phase %d from step %d: %s, seq_len %d, max_predictions %d, batch %d,"
                   " rope_base %g", self.phase.index, step, self.phase.objective.upper(),
                   self.phase.seq_len, self.phase.max_predictions, self.phase.batch_size,
                   self.phase.rope_base)

  def next_batch(self, step: int) -> dict:
    batch = next(self.data)
    if self.budget:  # the share spent as the step is dispatched: its schedule position
      local_rows = self.phase.batch_size // jax.process_count()
      batch = {**batch, **sharding.to_device(self.budget.batch_entry(local_rows), self.mesh)}
    return batch

  def record_step(self, step: int, device_metrics) -> None:
    """Host side of one finished step: participants, and the log every `log_every_steps`."""
    m = jax.device_get(device_metrics)  # note: a host-device sync point (on the previous step)
    if step == self.start + 1:
      self.throughput.update(step)  # start timing after the first step: excludes compilation
    objective = self.parts.objective(self.plan.at(step - 1).objective)  # the step's phase's
    self.feedback.after_step(step, m, applied=self.loop.record(step, m, objective))
    if self.budget and self.budget_spent_at is None and m[time_budget.KEY] >= 1.0:
      self.budget_spent_at = step
    train = self.settings.train
    last_step = step == train.steps or (self.budget_spent_at is not None
                                        and step > self.budget_spent_at)
    if step % train.log_every_steps == 0 or last_step:
      row = self.loop.end_interval(m, objective)
      row.update(self.stragglers.check(step))  # a collective: every process, every log step
      self.clock.write()
      if row:
        row.update(self.throughput.update(step),
                   input_wait_fraction=self.data.take_wait_fraction())
        row.update(metrics_lib.device_memory([d.memory_stats() for d in jax.local_devices()]))
        if self.budget:
          row[time_budget.KEY] = float(m[time_budget.KEY])
        row.update(goodput.metrics(goodput.summarize(self.earlier + [self.clock.snapshot()])))
        metrics_lib.log_progress(step, train.steps, row)
        self.writer.write(step, row)

  def eval_due(self, step: int) -> bool:
    train = self.settings.train
    return step % train.eval_every_steps == 0 or step == train.steps

  def evaluate(self, step: int, state, interrupted: Callable[[], bool] = lambda: False) -> bool:
    # The held-out batches keep train.batch_size through a batch-size warmup: the same set.
    with self.budget.paused() if self.budget else contextlib.nullcontext():
      out = heldout_metrics(self.eval_step, self.parts.objective(self.phase.objective),
                            state["params"], self.input, self.phase, self.mesh,
                            self.settings.train.batch_size, interrupted)
    if out is None:
      return False
    logging.info("eval at step %d: %s", step,
                 ", ".join(f"{k.split('/')[1]} {v:.4f}" for k, v in out.items()))
    self.writer.write(step, out)
    self.throughput.update(step)  # keep eval time out of the next tokens/s
    self.eval_metrics = out
    return True

  def save(self, step: int, state) -> None:
    self.writer.flush()  # the rows this checkpoint covers reach a bucket workdir first
    host = {"loop": self.loop.state(), "feedback": self.feedback.state()}
    if self.budget:
      host["budget"] = self.budget.state()
    self.ckpt.save(step, state, self.data, host=host)

  def sync_due(self, step: int) -> bool:
    return self.feedback.syncs_at(step)  # the feedback must see step `step` first

  def stop_due(self, step: int) -> bool:
    """After the step following the one whose metrics showed the budget spent (the same step
    on every process: the metric is the devices' own)."""
    if self.budget_spent_at is None or step == self.settings.train.steps:
      return False
    logging.info("Time budget of %g h spent (%.1f s of training) at step %d: final evaluation"
                 " and checkpoint", self.settings.train.budget_hours, self.budget.spent(), step)
    return True

  # ---- the run -------------------------------------------------------------------------------
  def run(self, stop_after: int | None) -> dict[str, float]:
    train = self.settings.train
    self.start, state = self._restore()
    # Only now: settings that cannot resume change nothing.
    self.workdir.save_config(self.settings.to_config_dict())
    self.writer = metrics_lib.MetricWriter(self.workdir.metrics, self.workdir.tensorboard,
                                           resume_step=self.start)
    self.throughput = metrics_lib.Throughput(train.steps, self._peak_flops())
    self._set_throughput_shapes()
    last = train.steps if stop_after is None else min(train.steps, stop_after)
    if self.budget:
      if self.budget.fraction() >= 1.0:
        logging.info("Time budget of %g h already spent at step %d: nothing to train (raise"
                     " train.budget_hours to go on)", train.budget_hours, self.start)
        last = self.start
      self.budget.start()
    profiler = profiling.StepProfiler(train.profile_steps, self.workdir.path)
    t0 = time.perf_counter()
    try:
      if self._eval_missing(self.start):
        self.evaluate(self.start, state)
      if self.start >= train.steps:
        logging.info("Checkpoint step %d >= train.steps=%d: nothing to train", self.start,
                     train.steps)
      # Through self: a phase may bring its own train step (another rotary base).
      state, last, _ = self.run_steps(lambda *args: self.train_step(*args), state, self.start,
                                      last, profiler)
    finally:  # also on errors: let a pending async save finish rather than lose it
      self.clock.enter("finish")
      profiler.stop()
      self.data.close()
      self.ckpt.close()
      self.writer.close()
      self.watchdog.close()
    if last > self.start:
      logging.info("Trained steps %d..%d in %.1f s; workdir %s", self.start, last,
                   time.perf_counter() - t0, self.workdir.path)
    if jax.process_index() == 0 and metrics_lib.rows(self.workdir.metrics):
      learning_curves.save_curves([self.workdir.path], self.workdir.curves)
    self.clock.write()
    return self.eval_metrics
