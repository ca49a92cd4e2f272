"""train.dropout_rng: jax's PRNG implementations for dropout's random bits (configs/base.py)."""

import jax
import numpy as np
import pytest

from mlmjax.errors import ConfigError
from mlmjax.models import layers
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from synthetic_steps import VOCAB, init_state, losses_of, small_config, synthetic_batches, train

RNGS = ("threefry2x32", "rbg", "unsafe_rbg")


@pytest.mark.parametrize("impl", RNGS)
def test_each_generator_drops_at_the_rate_and_rescales(impl):
  x = np.ones((400, 250), np.float32)
  out = np.asarray(layers.dropout(x, 0.1, jax.random.key(3, impl=impl)))
  kept = out != 0
  assert abs(kept.mean() - 0.9) < 0.005  # 100,000 draws: sd 0.001
  np.testing.assert_allclose(out[kept], 1 / 0.9, rtol=1e-6)


def test_the_generators_draw_other_masks_from_the_same_seed_and_step():
  """What the setting changes: the train step's key for a step is fold_in(key(seed, impl),
  step), and from the same seed and step each generator drops other units (each the same
  again when asked twice). Were all three the same, the test below could not tell them apart."""
  x = np.ones((64, 64), np.float32)
  masks = {}
  for impl in RNGS:
    key = jax.random.fold_in(jax.random.key(7, impl=impl), 12)
    masks[impl] = np.asarray(layers.dropout(x, 0.1, key)) != 0
    np.testing.assert_array_equal(np.asarray(layers.dropout(x, 0.1, key)) != 0, masks[impl])
  for a, b in (("threefry2x32", "rbg"), ("threefry2x32", "unsafe_rbg"), ("rbg", "unsafe_rbg")):
    assert (masks[a] != masks[b]).mean() > 0.1, (a, b)  # independent masks: 0.18 differ


def test_the_train_step_draws_every_dropout_from_the_configured_generator(monkeypatch):
  """train.dropout_rng reaches the bits: each dropout of the train step (the embeddings', the
  attention probabilities', both residuals' of each layer) draws from a key of the configured
  implementation, not jax's default. Traced only (jax.eval_shape: nothing compiled), so the fast
  tier has it; the test below trains with each generator."""
  drawn = []
  real = layers.dropout

  def recording(x, rate, key):
    if key is not None and rate > 0:
      drawn.append(jax.random.key_impl(key))
    return real(x, rate, key)
  monkeypatch.setattr(layers, "dropout", recording)
  config = small_config()
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.1
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  for impl in RNGS:
    config.train.dropout_rng = impl
    parts = assembly.Assembly.of(config)
    setup = parts.setup(VOCAB, mesh)
    drawn.clear()
    jax.eval_shape(parts.train_step(setup), setup.abstract_state,
                   parts.batch_spec(mesh, 16, 32, 6))
    assert drawn == [impl] * (1 + 3 * config.model.num_layers), (impl, drawn)


def test_the_default_is_the_bits_runs_trained_with_before_the_setting():
  """Checkpoints of earlier runs resume with the same dropout: the default key is the raw
  threefry key jax.random.PRNGKey made, folded with the step the same way."""
  typed = jax.random.fold_in(jax.random.key(7, impl="threefry2x32"), 12)
  raw = jax.random.fold_in(jax.random.PRNGKey(7), 12)
  np.testing.assert_array_equal(jax.random.key_data(typed), raw)


@pytest.mark.slow  # four trainings, three compiles; the traced test above is the fast tier's
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
