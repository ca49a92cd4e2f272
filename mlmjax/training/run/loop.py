"""The step loop that pretraining (train.py) and fine-tuning (finetuning/trainer.py) share.

    for each step: [before] -> train step -> record the previous step on the host -> at the
    due steps: evaluate, checkpoint -> on a preemption notice: checkpoint and stop
    the last step: checkpoint (written), then evaluate unless a preemption notice comes

Each loop says what its steps, evaluations and checkpoints are (the hooks of `StepLoop`); the
order of things, the two-steps-in-flight rule, preemption and the non-finite policy are here,
once, so both loops behave alike.
"""

from __future__ import annotations

import itertools
import time
from typing import Callable

from absl import logging

from mlmjax import errors
from mlmjax.training.run import profiling


class NonFiniteError(errors.UserError):
  """Training produced a NaN/Inf loss or gradient and the policy says stop."""


class NonFinitePolicy:
  """`train.nonfinite_policy` and `train.max_consecutive_skips`: a non-finite step changed
  nothing (the optimizer skipped it); 'stop' ends the run at once, 'skip' goes on unless more
  than max_consecutive_skips steps in a row were skipped. Its counters are checkpointed."""

  def __init__(self, policy: str, max_consecutive_skips: int):
    self.policy = policy  # train.nonfinite_policy
    self.max_consecutive = max_consecutive_skips
    self.skipped, self.consecutive = 0, 0

  def applied(self, step: int, nonfinite) -> bool:
    """False if step `step`'s update was skipped (after applying the policy: raise or warn)."""
    if not nonfinite:
      self.consecutive = 0
      return True
    self.skipped += 1
    self.consecutive += 1
    if self.policy == "stop":
      raise NonFiniteError(
          f"step {step}: non-finite loss or gradients; the update was not applied and nothing"
          " after the last checkpoint was saved (lower optimizer.learning_rate, or set"
          " train.nonfinite_policy='skip')")
    if self.consecutive > self.max_consecutive:
      raise NonFiniteError(
          f"step {step}: {self.consecutive} non-finite steps in a row (more than"
          f" train.max_consecutive_skips={self.max_consecutive}); stopping")
    logging.warning("step %d: non-finite loss or gradients; update skipped (%d so far)", step,
                    self.skipped)
    return False

  def state(self) -> dict:
    return {"skipped": self.skipped, "consecutive": self.consecutive}

  def load(self, state: dict) -> None:
    self.skipped, self.consecutive = int(state["skipped"]), int(state["consecutive"])


class StepLoop:
  """The loop; a subclass gives its hooks and `self.ckpt` (a checkpoint.Checkpointer), and may
  give a goodput clock (goodput.Clock: the loop says which segment it is in; its watchdog
  watches them) and set `compiling` when the next train step compiles (a new graph or shape)."""

  checkpoint_every: int
  clock = None  # a goodput.Clock, or None: segments not kept
  watchdog = None  # a watchdog.Watchdog (on `clock`), told the step times
  compiling = False

  def _in(self, kind: str) -> None:
    if self.clock is not None:
      self.clock.enter(kind)

  def before_step(self, step: int) -> None:
    """Called before the step that trains step + 1 (e.g. to open the next phase's input)."""

  def next_batch(self, step: int):
    raise NotImplementedError

  def record_step(self, step: int, device_metrics) -> None:
    """The host side of finished step `step` (its metrics are still on the device)."""
    raise NotImplementedError

  def eval_due(self, step: int) -> bool:
    raise NotImplementedError

  def evaluate(self, step: int, state, interrupted: Callable[[], bool] = lambda: False) -> bool:
    """Evaluates the state after step `step`; False if it stopped because `interrupted()`,
    asked between its batches, said so (a preemption notice), with nothing recorded."""
    raise NotImplementedError

  def save(self, step: int, state) -> None:
    raise NotImplementedError

  def sync_due(self, step: int) -> bool:
    """Whether the host must have finished step `step` before the next one is dispatched."""
    return False

  def stop_due(self, step: int) -> bool:
    """Whether the run ends after step `step` (e.g. its time budget is spent), with an
    evaluation and a checkpoint as at its last step."""
    return False

  def run_steps(self, train_step, state, start: int, last: int,
                profiler: profiling.StepProfiler | None = None) -> tuple[object, int, bool]:
    """Trains steps start+1..last; returns (state, the last step done, preempted). A
    `profiler` traces the steps it was asked for (train.profile_steps)."""
    pending = None  # (step, metrics) of the step still in flight
    done = start
    timed_from = None  # when the last step without an evaluation, save or compile ended
    for step in range(start, last):
      self._in("input")
      self.before_step(step)
      batch = self.next_batch(step)
      compiled = self.compiling
      self._in("compile" if compiled else "step")
      if profiler:
        profiler.before(step + 1)
      state, step_metrics = train_step(state, batch)
      self.compiling = False
      if compiled:
        self._in("step")
      if profiler:
        profiler.after(step + 1, step_metrics)
      # At most two steps in flight: block on the previous one (needed by the CPU backend
      # with many devices, and free elsewhere since the device is busy with this step).
      if pending is not None:
        self._record(*pending)
      pending = (step + 1, step_metrics)
      done = step + 1
      # Every step: after a SIGTERM, all processes agree on a step to save at, then stop.
      preempted = self.ckpt.reached_preemption(done)
      finished = self.stop_due(done)
      final = done == last or finished
      save = done % self.checkpoint_every == 0 or final or preempted
      evaluate_now = (self.eval_due(done) or finished) and not preempted
      if save or evaluate_now or self.sync_due(done):
        self._record(*pending)  # what is evaluated or saved below includes step `done`
        pending = None
      if evaluate_now and not final:  # before the checkpoint: a complete one implies its eval
        self._in("eval")
        self.evaluate(done, state)
      if save:
        self._in("save")
        self.save(done, state)
        if self.clock is not None:  # what a later attempt may restore
          self.clock.mark(done)
          self.clock.write()
      if final and not preempted:
        preempted = self._final_evaluation(done, state, evaluate_now)
      self._in("step")
      now = time.monotonic()
      if self.watchdog is not None and timed_from is not None and not (
          compiled or save or evaluate_now):
        self.watchdog.step_time(now - timed_from, done)
      timed_from = now
      if preempted:
        logging.warning("Preemption notice (SIGTERM): saved the checkpoint of step %d; run"
                        " the same command again to continue from there", done)
        return state, done, True
      if finished:
        return state, done, False
    if pending is not None:
      self._record(*pending)
    return state, done, False

  def _record(self, step: int, device_metrics) -> None:
    """record_step, its wait for the device counted apart from the loop's own time (what
    tells a straggler: training/run/stragglers.py)."""
    t = time.monotonic()
    self.record_step(step, device_metrics)
    if self.clock is not None:
      self.clock.step_done(step, waited=time.monotonic() - t)
    if self.watchdog is not None:
      self.watchdog.at_step(step)

  def _final_evaluation(self, step: int, state, due: bool) -> bool:
    """After the last step's checkpoint: waits until it is written, then evaluates if `due`,
    unless a preemption notice comes first or meanwhile (True: the evaluation is left to the
    rerun). So a SIGTERM during the final step or its evaluation (minutes on long rows) loses
    nothing and waits for nothing."""
    self._in("finish")
    self.ckpt.wait()
    # Past the last step, the agreed step counts these polls (every process polls at the same
    # points). orbax's save thread asks with the saved step as it finishes: only once it has
    # do the steps asked only rise, so that the agreed one (the last asked + 1) comes.
    polls = itertools.count(step + 1)

    def notice() -> bool:
      return self.ckpt.reached_preemption(next(polls))

    if notice():
      return True
    self._in("eval")
    return due and not self.evaluate(step, state, interrupted=notice)
