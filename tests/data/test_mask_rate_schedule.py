"""masking.mask_rate_schedule: the rate of each step, the realised rates, the slots of each
phase, and exact resume across a change of rate."""

import numpy as np
import pytest

from mlmjax.configs import base
from conftest import assert_resumes_exactly
from mlmjax.data import masking
from mlmjax.data.text import vocab_stats
from mlmjax.errors import ConfigError
from mlmjax.models import special_ids
from mlmjax.training import config_check
from mlmjax.training.planning import phases
from mlmjax.training.run_settings import RunSettings
from mlmjax.training import train

VOCAB = 1000


def _config(schedule="linear", steps=100, start=0.3, end=0.1, spec=()):
  config = base.get_config()
  config.masking.update(mask_rate=start, mask_rate_end=end, mask_rate_schedule=schedule,
                        max_predictions_per_seq=80)
  config.data.seq_len = 256
  config.train.steps = steps
  config.train.phases = spec
  return config


@pytest.mark.parametrize("schedule,expected", [
    ("constant", lambda p: 0.3),
    ("linear", lambda p: 0.3 - 0.2 * p),
    ("cosine", lambda p: 0.1 + 0.2 * (1 + np.cos(np.pi * p)) / 2),
])
def test_the_rate_of_each_step_follows_the_schedule(schedule, expected):
  rates = phases.plan(RunSettings.from_config(_config(schedule))).mask_rates
  if schedule == "constant":  # no schedule: the masker keeps masking.mask_rate
    assert rates is None and _config(schedule).masking.mask_rate == expected(0)
    return
  for done in (0, 10, 50, 99):
    assert rates.at(done) == pytest.approx(expected(done / 100)), done


def test_phases_with_rates_of_their_own_anneal_phase_by_phase():
  """mmBERT's 30% -> 15% -> 5%: each phase constant at its rate, or its own ramp."""
  spec = ((0.5, 256, 80, {"mask_rate": 0.3}), (0.3, 256, 80, {"mask_rate": 0.15}),
          (0.2, 256, 80, {"mask_rate": 0.15, "mask_rate_end": 0.05}))
  rates = phases.plan(RunSettings.from_config(_config("linear", spec=spec))).mask_rates
  assert [rates.at(d) for d in (0, 49, 50, 79)] == [0.3, 0.3, 0.15, 0.15]
  assert rates.at(80) == pytest.approx(0.15) and rates.at(90) == pytest.approx(0.1)
  # The slots follow the phase's highest rate: a full row of 254 maskable tokens.
  plan = phases.plan(RunSettings.from_config(_config("linear", spec=spec)))
  assert [p.max_predictions for p in plan] == [
      76, 38, 38]


def test_a_constant_rate_keeps_the_configured_slots():
  assert phases.plan(RunSettings.from_config(_config("constant")))[0].max_predictions == 80


def _stats():
  z = np.zeros(VOCAB, bool)
  return vocab_stats.VocabStats(word_start=z, punctuation=z, capitalized=z, sentence_end=z,
                                counts=np.zeros(VOCAB, np.int64))


@pytest.mark.parametrize("strategy", ["random", "span"])
def test_realised_rates_over_steps_match_the_schedule(strategy):
  config = _config("cosine")
  config.masking.strategy = strategy
  rates = phases.plan(RunSettings.from_config(config)).mask_rates
  phase = phases.plan(RunSettings.from_config(config))[0]
  config.masking.max_predictions_per_seq = phase.max_predictions
  masker = masking.Masker(masking.Settings.from_config(config.masking), _stats(), mask_rates=rates)
  rng = np.random.default_rng(0)
  ids = rng.integers(special_ids.NUM_SPECIAL, VOCAB, size=(32, 256)).astype(np.int32)
  ids[:, 0], ids[:, -1] = special_ids.CLS_ID, special_ids.SEP_ID
  for done in (0, 25, 50, 75, 99):
    out = masker({"input_ids": ids}, seed=1, step=done, example_ids=np.arange(32))
    realised = out["masked_weights"].sum() / (32 * 254)
    assert realised == pytest.approx(rates.at(done), abs=0.5 / 254), done
    assert out["masked_positions"].shape == (32, phase.max_predictions)


def test_rules():
  with pytest.raises(ConfigError, match="mask_rate_schedule='sine' is not one of"):
    config_check.checked(_config("sine"), 1, 1)
  with pytest.raises(ConfigError, match="static' masks are fixed"):
    config = _config("linear")
    config.masking.strategy = "static"
    config_check.checked(config, 1, 1)
  with pytest.raises(ConfigError, match="its 4th item must be a dict of"):
    config_check.checked(_config(spec=((1.0, 256, 80, {"rate": 0.2}),)), 1, 1)
  with pytest.raises(ConfigError,
                     match="too small for the phase's highest mask rate 0.4 at seq_len 256"):
    config_check.checked(_config(start=0.4), 1, 1)


@pytest.mark.slow
def test_resume_is_bit_identical_across_a_change_of_rate(tmp_path, micro_config, caplog):
  """The rate falls every step, then jumps at the phase switch (step 4): stopped at step 3,
  a resumed run ends exactly where the straight one does."""
  micro_config.masking.update(mask_rate=0.3, mask_rate_end=0.15, mask_rate_schedule="linear",
                              max_predictions_per_seq=10)
  micro_config.train.phases = ((0.5, 32, 10), (0.5, 32, 10, {"mask_rate": 0.15}))
  micro_config.train.checkpoint_every_steps = 8
  straight = str(tmp_path / "straight")
  train.train_and_evaluate(micro_config, straight)
  assert_resumes_exactly(micro_config, straight, str(tmp_path / "split"), 3, caplog)
