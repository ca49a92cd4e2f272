"""train.budget_hours (training/time_budget.py): what counts as training time, the schedule
keyed to it, the run ending at its budget, and a resume going on with what is left."""

import logging
import time

import jax
import jax.numpy as jnp
import pytest

from conftest import latest_step
from mlmjax.errors import ConfigError
from mlmjax.training import metrics
from mlmjax.training import optimizer
from mlmjax.training import time_budget
from mlmjax.training import train
from mlmjax.training.run_settings import RunSettings


class _Clock:
  """A clock the test moves by hand (seconds)."""

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_evaluations_and_compilations_are_not_counted_and_a_resume_adds_to_the_past():
  clock = _Clock()
  budget = time_budget.TimeBudget(hours=1.0, clock=clock)
  budget.load({"spent_seconds": 600.0})  # a checkpoint's: 10 minutes spent before
  budget.start()
  clock.now += 900.0
  with budget.paused():  # an evaluation
    clock.now += 300.0
  assert budget.spent() == 1500.0 and budget.fraction() == pytest.approx(1500 / 3600)
  assert float(budget.state()["spent_seconds"]) == 1500.0
  # A real compilation, on the real clock: its seconds (jax.monitoring's) are left out.
  real = time_budget.TimeBudget(hours=1.0)
  real.start()
  t0, compiled = time.monotonic(), time_budget.compile_seconds()
  jax.jit(lambda x: sum(jnp.sin(x * i) for i in range(300))).lower(jnp.ones(8)).compile()
  wall, compiling = time.monotonic() - t0, time_budget.compile_seconds() - compiled
  assert compiling > 0.5 * wall > 0
  assert real.spent() < wall - 0.9 * compiling


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


@pytest.mark.slow
def test_the_run_follows_its_budget_ends_there_and_resumes_with_what_is_left(
    tmp_path, micro_config, caplog):
  """A 4-second budget with a cap of 100,000 steps: the logged learning rate at every step is
  the schedule at train.steps x the budget spent (warmup and linear decay over the budget), the
  run ends with its budget, with a final evaluation and checkpoint at its last step; run again,
  it trains nothing; given 4 more seconds, it resumes from that checkpoint with the time it
  had spent."""
  seconds = 4.0
  micro_config.train.update(steps=100_000, warmup_steps=10_000, log_every_steps=1,
                            eval_every_steps=100_000, checkpoint_every_steps=100_000,
                            budget_hours=seconds / 3600)
  workdir = str(tmp_path / "run")
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  rows = _trained(workdir)
  last = rows[-1]["step"]
  assert 10 < last < 100_000
  assert "Time budget of 0.00111111 h spent" in caplog.text
  schedule = optimizer.learning_rate_schedule(RunSettings.from_config(micro_config).train)
  for row in rows:  # the rate a step applied: at its own position
    position = max(row["step"] - 1, row["budget_fraction"] * 100_000)
    assert row["learning_rate"] == pytest.approx(float(schedule(position)), rel=1e-5,
                                                 abs=1e-9)
  fractions = [r["budget_fraction"] for r in rows]
  assert fractions == sorted(fractions) and fractions[-2] >= 1.0 > fractions[0]
  peak = max(rows, key=lambda r: r["learning_rate"])["budget_fraction"]
  assert 0.05 < peak < 0.2  # the warmup is a tenth of the budget, not of the step cap
  evals = [r["step"] for r in metrics.rows(f"{workdir}/metrics.jsonl") if "eval/loss" in r]
  assert evals == [last] and latest_step(workdir) == last
  caplog.clear()
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  assert f"Time budget of 0.00111111 h already spent at step {last}: nothing to train" in (
      caplog.text)
  assert _trained(workdir)[-1]["step"] == last
  micro_config.train.budget_hours = 2 * seconds / 3600
  caplog.clear()
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  assert f"Resumed from checkpoint at step {last}" in caplog.text
  resumed = [r for r in _trained(workdir) if r["step"] > last]
  assert resumed and resumed[0]["step"] == last + 1
  # It had spent its first budget: half of the new one, and more from there.
  assert resumed[0]["budget_fraction"] >= 0.5
  assert resumed[-2]["budget_fraction"] >= 1.0
