"""train.dropout_rng: jax's PRNG implementations for dropout's random bits (configs/base.py)."""

import jax
import numpy as np
import pytest

from mlmjax.errors import ConfigError
from mlmjax.models import layers
from mlmjax.training import config_check
from synthetic_steps import init_state, losses_of, small_config, synthetic_batches, train

RNGS = ("threefry2x32", "rbg", "unsafe_rbg")


@pytest.mark.parametrize("impl", RNGS)
def test_each_generator_drops_at_the_rate_and_rescales(impl):
  x = np.ones((400, 250), np.float32)
  out = np.asarray(layers.dropout(x, 0.1, jax.random.key(3, impl=impl)))
  kept = out != 0
  assert abs(kept.mean() - 0.9) < 0.005  # 100,000 draws: sd 0.001
  np.testing.assert_allclose(out[kept], 1 / 0.9, rtol=1e-6)


def test_the_default_is_the_bits_runs_trained_with_before_the_setting():
  """Checkpoints of earlier runs resume with the same dropout: the default key is the raw
  threefry key jax.random.PRNGKey made, folded with the step the same way."""
  typed = jax.random.fold_in(jax.random.key(7, impl="threefry2x32"), 12)
  raw = jax.random.fold_in(jax.random.PRNGKey(7), 12)
  np.testing.assert_array_equal(jax.random.key_data(typed), raw)


def test_the_generators_differ_and_the_unsafe_one_repeats():
  """threefry's repeatability is every resume test's; the hardware generator's is tested here."""
  config = small_config()
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.1
  batches = synthetic_batches(2)
  init, _ = init_state(config, jax.devices()[:1])
  losses = {}
  for impl in RNGS:
    config.train.dropout_rng = impl
    losses[impl] = losses_of(train(config, batches, jax.devices()[:1], init=init)[0])
  assert len({tuple(v) for v in losses.values()}) == 3  # other bits, other dropout
  again = losses_of(train(config, batches, jax.devices()[:1], init=init)[0])
  assert again == losses["unsafe_rbg"]


def test_an_unknown_generator_is_one_line():
  config = small_config()
  config.train.dropout_rng = "philox"
  with pytest.raises(ConfigError, match="train.dropout_rng='philox' is not one of"
                     " threefry2x32, rbg, unsafe_rbg"):
    config_check.checked(config)
