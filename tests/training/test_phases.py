"""What a phase changes besides the row length: the rotary base (context extension), the batch
(batch-size warmup) with the learning rate counted in tokens; exact resume across the change."""

import pytest

from mlmjax.configs import base
from conftest import assert_resumes_exactly
from mlmjax.errors import ConfigError
from mlmjax.models import layers
from mlmjax.training import config_check
from mlmjax.training.core import optimizer
from mlmjax.training import finished_run
from mlmjax.training.planning import phases
from mlmjax.training.run_settings import RunSettings
from mlmjax.training import train


@pytest.mark.slow
def test_the_phase_rotary_base_and_batch_are_those_of_the_forward_pass_and_resume_is_exact(
    tmp_path, micro_config, monkeypatch, caplog):
  """Phase 1: 8 rows of 16 tokens, rotary base 10k; phase 2: 16 rows of 32, base 160k (the
  held-out batches, at the end, keep train.batch_size = 16). Stopped inside phase 1 and resumed
  across the switch, the run ends bit-identical to the straight one."""
  micro_config.train.phases = ((0.5, 16, 3, {"batch_size": 8}),
                               (0.5, 32, 6, {"rope_base": 160_000.0}))
  micro_config.train.update(checkpoint_every_steps=8, eval_every_steps=8, log_every_steps=4)
  micro_config.optimizer.update(schedule_unit="tokens")
  seen = set()  # (base, rows, length) of every rotary table traced into a step

  def spy(positions_bt, head_size, max_positions, base=10000.0):
    seen.add((float(base), *positions_bt.shape))
    return rope_angles(positions_bt, head_size, max_positions, base)
  rope_angles = layers.rope_angles
  monkeypatch.setattr(layers, "rope_angles", spy)
  straight = str(tmp_path / "straight")
  train.train_and_evaluate(micro_config, straight)
  # Global and local layers each take a table: local layers keep model.local_rope_base.
  assert {(10_000.0, 8, 16), (160_000.0, 16, 32), (10_000.0, 16, 32)} <= seen
  assert not {s for s in seen if s[0] == 160_000.0 and s[2] == 16}, seen
  split = str(tmp_path / "split")
  assert_resumes_exactly(micro_config, straight, split, 3, caplog)
  # A finished run (predict, evaluate, export) runs at the base it was last trained at.
  assert finished_run.load(straight).settings.model.rope_base == 160_000.0
  assert finished_run.load(split, step=3).settings.model.rope_base == 10_000.0


def _train_config(unit):
  config = base.get_config()
  config.data.seq_len = 32
  config.train.update(steps=8, batch_size=16,
                      phases=((0.5, 32, 6, {"batch_size": 8}), (0.5, 32, 6)))
  config.optimizer.update(warmup_steps=2, learning_rate=1.0, schedule_unit=unit)
  return config


def _step_tokens(config):
  return phases.plan(RunSettings.from_config(config)).step_tokens


def test_the_learning_rate_counts_tokens_through_a_batch_warmup():
  """4 steps of 8 rows then 4 of 16: the first half of the steps is a third of the tokens."""
  by_steps, by_tokens = (RunSettings.from_config(_train_config(u)) for u in ("steps", "tokens"))
  steps_schedule = optimizer.learning_rate_schedule(by_steps.optimizer, 8)
  tokens_schedule = optimizer.learning_rate_schedule(
      by_tokens.optimizer, 8, _step_tokens(_train_config("tokens")))
  clock = optimizer.token_clock(8, _step_tokens(_train_config("tokens")))
  assert [float(clock(s)) for s in (0, 4, 6, 8)] == pytest.approx([0, 8 / 3, 16 / 3, 8])
  for step in range(9):
    assert float(tokens_schedule(step)) == pytest.approx(float(steps_schedule(clock(step))))
  assert float(tokens_schedule(8)) == 0.0  # the decay still ends at the last step
  # Warmup is two steps' worth of tokens at the full batch: three steps of the half batch.
  assert float(tokens_schedule(2)) < float(steps_schedule(2)) == 1.0 == float(tokens_schedule(3))
  assert float(tokens_schedule(4)) > float(steps_schedule(4))  # less decayed: fewer tokens


def test_phase_plan_and_rules():
  config = _train_config("tokens")
  assert [p.batch_size for p in phases.plan(RunSettings.from_config(config))] == [8, 16]
  config_check.checked(config, 8, 1)
  config.train.phases = ((1.0, 32, 6, {"batch_size": 12}),)
  with pytest.raises(ConfigError, match="train.batch_size=12 must be divisible by"):
    config_check.checked(config, 8, 1)
  config.train.phases = ((1.0, 32, 6, {"rope_base": -1.0}),)
  with pytest.raises(ConfigError, match="rope_base > 0"):
    config_check.checked(config, 8, 1)
  config.train.phases = ((1.0, 32, 6),)
  config.optimizer.schedule_unit = "rows"
  with pytest.raises(ConfigError, match="optimizer.schedule_unit='rows' is not one of"):
    config_check.checked(config, 8, 1)
