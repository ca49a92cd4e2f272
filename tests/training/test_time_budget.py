"""train.budget_hours (training/planning/time_budget.py): what counts as training time, the schedule
keyed to it, the run ending at its budget, and a resume going on with what is left."""

import collections
import inspect
import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import latest_step
from mlmjax.errors import ConfigError
from mlmjax.training.core import optimizer
from mlmjax.training.planning import time_budget
from mlmjax.training.run import metrics
from mlmjax.training.run_settings import RunSettings
from mlmjax.training import train


class _Clock:
  """A clock the test moves by hand (seconds)."""

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_evaluations_are_not_counted_and_a_resume_adds_to_the_past():
  """On a clock the test moves: an evaluation's time (paused) is left out, and the seconds a
  checkpoint says were spent before count."""
  clock = _Clock()
  budget = time_budget.TimeBudget(hours=1.0, clock=clock)
  budget.load({"spent_seconds": 600.0})  # a checkpoint's: 10 minutes spent before
  budget.start()
  clock.now += 900.0
  with budget.paused():  # an evaluation
    clock.now += 300.0
  assert budget.spent() == 1500.0 and budget.fraction() == pytest.approx(1500 / 3600)
  assert float(budget.state()["spent_seconds"]) == 1500.0
  # A run's budget is on the wall clock (the tests give it theirs).
  assert inspect.signature(time_budget.TimeBudget).parameters["clock"].default is time.monotonic


def _compile_new_program(salt: float) -> None:
  """Compiles a program no cache holds (the salt is one of its constants)."""
  jax.jit(lambda x: sum(jnp.sin(x * (i + salt)) for i in range(20))).lower(jnp.ones(8)).compile()


def test_compilations_are_not_counted_whenever_they_happen():
  """The seconds jax.monitoring reports for a real compilation (tracing, lowering, XLA) are left
  out of the time spent, in training and inside an evaluation alike (once, not twice). Every
  event the budget listens for is one jax emits for a compilation, and the budget subtracts
  exactly their seconds. On the test's clock, which moves by those seconds and what the test
  adds to them, so nothing here depends on how long anything takes."""
  heard = collections.Counter()

  def listen(event, seconds, **_):
    heard[event] += seconds
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    clock = _Clock()
    budget = time_budget.TimeBudget(hours=1.0, clock=clock)
    budget.start()
    salt = float(np.random.default_rng().integers(1 << 20))
    before = time_budget.compile_seconds()
    _compile_new_program(salt)  # the first step's
    compiling = time_budget.compile_seconds() - before
    # Each duration jax reported for it (tracing, lowering, XLA) is one the budget counts.
    reported = {e for e in heard if e.startswith("/jax/core/compile/")}
    assert "/jax/core/compile/backend_compile_duration" in reported
    assert reported == set(time_budget._COMPILE_EVENTS)  # pylint: disable=protected-access
    assert compiling > 0 and compiling == pytest.approx(sum(heard[e] for e in reported),
                                                        rel=1e-9)
    clock.now += compiling + 60.0  # the wall clock ran through it, then a minute of steps
    assert budget.spent() == pytest.approx(60.0, abs=1e-6)
    with budget.paused():  # an evaluation that compiles its step, then runs for 30 s
      before = time_budget.compile_seconds()
      _compile_new_program(salt + 0.5)
      clock.now += time_budget.compile_seconds() - before + 30.0
    assert time_budget.compile_seconds() > before
    assert budget.spent() == pytest.approx(60.0, abs=1e-6)
    clock.now += 15.0
    assert budget.spent() == pytest.approx(75.0, abs=1e-6)
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)


def test_a_budget_takes_no_phases_and_no_negative_hours(micro_config):
  micro_config.train.budget_hours = 1.0
  micro_config.train.phases = ((0.5, 32, 6), (0.5, 32, 6))
  with pytest.raises(ConfigError) as e:
    RunSettings.from_config(micro_config)
  assert str(e.value) == ("train.budget_hours ends a run by its time, but train.phases switch"
                          " at fractions of train.steps: use one or the other")
  micro_config.train.phases = ()
  micro_config.train.budget_hours = -1.0
  with pytest.raises(ConfigError, match=r"train.budget_hours=-1.0 must be >= 0"):
    RunSettings.from_config(micro_config)


def _trained(workdir):
  return [r for r in metrics.rows(f"{workdir}/metrics.jsonl") if "loss" in r]


class _StepClock:
  """A run's clock for the test: each training step takes STEP_SECONDS from its dispatch, and
  each compilation exactly the seconds jax reports for it (which the budget leaves out), so the
  budget's share at every step is known whatever the machine's speed."""

  STEP_SECONDS = 0.07  # 4 s / 0.07 s is not a whole number of steps: no rounding at 1.0

  def __init__(self):
    self.steps = 0

  def __call__(self):
    return 100.0 + time_budget.compile_seconds() + self.steps * self.STEP_SECONDS


def _budgets_on(clock: _StepClock):
  """time_budget.TimeBudget as train.py makes it, on `clock`, which a step's dispatch (the
  batch entry the budget gives it) moves on."""
  class Budget(time_budget.TimeBudget):

    def __init__(self, hours: float):
      super().__init__(hours, clock=clock)

    def batch_entry(self, local_rows: int):
      entry = super().batch_entry(local_rows)
      clock.steps += 1
      return entry
  return Budget


@pytest.mark.slow
def test_the_run_follows_its_budget_ends_there_and_resumes_with_what_is_left(
    tmp_path, micro_config, caplog, monkeypatch):
  """A 4-second budget with a cap of 100,000 steps, on a clock where a step takes 0.07 s: each
  step is given the share spent before it (compilations not counted), and the logged learning
  rate at every step is the schedule at train.steps x that share (warmup and linear decay over
  the budget); the run ends after the step following the first whose share reached 1, with a
  final evaluation and checkpoint at its last step; run again, it trains nothing; given 4 more
  seconds, it resumes from that checkpoint with the time it had spent, as if never stopped."""
  seconds = 4.0
  clock = _StepClock()
  monkeypatch.setattr(time_budget, "TimeBudget", _budgets_on(clock))
  micro_config.train.update(steps=100_000, log_every_steps=1, eval_every_steps=100_000,
                            checkpoint_every_steps=100_000, budget_hours=seconds / 3600)
  micro_config.optimizer.update(warmup_steps=10_000)
  workdir = str(tmp_path / "run")
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  rows = _trained(workdir)
  last = rows[-1]["step"]
  assert [r["step"] for r in rows] == list(range(1, last + 1))
  for row in rows:  # the time of the steps before it, on the clock
    assert row["budget_fraction"] == pytest.approx(
        (row["step"] - 1) * clock.STEP_SECONDS / seconds, rel=1e-6)
  spent_at = next(r["step"] for r in rows if r["budget_fraction"] >= 1.0)
  assert last == spent_at + 1 == 60  # step 59 was given 58 x 0.07 s = 4.06 s
  assert "Time budget of 0.00111111 h spent" in caplog.text
  settings = RunSettings.from_config(micro_config)
  schedule = optimizer.learning_rate_schedule(settings.optimizer, settings.train.steps)
  for row in rows:  # the rate a step applied: at its own position
    position = max(row["step"] - 1, row["budget_fraction"] * 100_000)
    assert row["learning_rate"] == pytest.approx(float(schedule(position)), rel=1e-5,
                                                 abs=1e-9)
  peak = max(rows, key=lambda r: r["learning_rate"])["budget_fraction"]
  assert 0.1 <= peak < 0.1 + clock.STEP_SECONDS / seconds  # warmup: a tenth of the budget
  evals = [r["step"] for r in metrics.rows(f"{workdir}/metrics.jsonl") if "eval/loss" in r]
  assert evals == [last] and latest_step(workdir) == last
  caplog.clear()
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  assert f"Time budget of 0.00111111 h already spent at step {last}: nothing to train" in (
      caplog.text)
  assert _trained(workdir)[-1]["step"] == last and clock.steps == last
  micro_config.train.budget_hours = 2 * seconds / 3600
  caplog.clear()
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  assert f"Resumed from checkpoint at step {last}" in caplog.text
  resumed = [r for r in _trained(workdir) if r["step"] > last]
  assert [r["step"] for r in resumed] == list(range(last + 1, resumed[-1]["step"] + 1))
  # It had spent its 60 steps' 4.2 s (just over half of the new budget), and more from there.
  for row in resumed:
    assert row["budget_fraction"] == pytest.approx(
        (row["step"] - 1) * clock.STEP_SECONDS / (2 * seconds), rel=1e-6)
  assert resumed[-1]["step"] == 116 + 1  # step 116 was given 115 x 0.07 s = 8.05 s
