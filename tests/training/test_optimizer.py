"""Optimizers (AdamW, LAMB) and gradient accumulation: k micro-batches == one k-times batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_same_arrays
from mlmjax import errors
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training.core import optimizer as optim
from mlmjax.training.run_settings import RunSettings
from synthetic_steps import (VOCAB, collectives_in, init_state, losses_of, small_config,
                             synthetic_batches, train)


def _toy_params():
  rng = np.random.default_rng(0)
  return {"dense": {"kernel": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32),
                    "bias": jnp.asarray(rng.normal(size=(4,)), jnp.float32)},
          "norm": {"scale": jnp.ones((4,), jnp.float32)}}


def _typed(config):
  """make_optimizer's arguments from a config: its optimizer section, typed, and the steps."""
  return optim.OptimizerSettings.from_config(config.optimizer), config.train.steps


def _updates(optimizer, grads_fn, steps=2):
  """The updates of the last of `steps` steps (the first has warmup's learning rate 0)."""
  config = small_config()
  config.optimizer.kind = optimizer
  config.optimizer.learning_rate = 1e-2
  tx = optim.make_optimizer(*_typed(config))
  params = _toy_params()
  state = tx.init(params)
  for step in range(steps):
    updates, state = tx.update(grads_fn(params), state, params, step=step)
  return params, updates, state, _typed(config)


def test_unknown_optimizer_is_a_one_line_error():
  config = small_config()
  config.optimizer.kind = "sgd"
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(config)
  assert str(e.value) == "optimizer.kind='sgd' is not one of adamw, lamb, muon"


def test_lamb_moves_each_matrix_by_learning_rate_times_its_norm():
  """The trust ratio: ||update|| = lr * ||w|| for every kernel/embedding, whatever the scale of
  its gradient (here 1e-3); AdamW's updates do not. LayerNorm scales and biases are excluded
  from layer adaptation as from weight decay (ALBERT's and NVIDIA's LAMB): their updates are
  exactly AdamW's, even with a gradient scale of 1e3."""
  def grads(params):
    return jax.tree.map(lambda p, s: s * jnp.cos(p), params,
                        {"dense": {"kernel": 1e-3, "bias": 1e3}, "norm": {"scale": 1.0}})
  params, lamb, _, typed = _updates("lamb", grads)
  _, adamw, _, _ = _updates("adamw", grads)
  lr = float(optim.learning_rate_schedule(*typed)(1))
  kernel = params["dense"]["kernel"]
  np.testing.assert_allclose(np.linalg.norm(lamb["dense"]["kernel"]),
                             lr * np.linalg.norm(kernel), rtol=1e-5)
  assert not np.isclose(np.linalg.norm(adamw["dense"]["kernel"]), lr * np.linalg.norm(kernel),
                        rtol=0.1)
  for path in (("dense", "bias"), ("norm", "scale")):
    np.testing.assert_array_equal(lamb[path[0]][path[1]], adamw[path[0]][path[1]])
    assert np.any(lamb[path[0]][path[1]])


def test_the_schedule_follows_the_step_through_skipped_updates():
  """A skipped (non-finite) step keeps its place in the schedule: the update of step 2 uses
  schedule(2) although only one update was applied before it. Adam with b1 = b2 = 0 and
  gradients of ones moves every weight by exactly the learning rate (up to eps)."""
  config = small_config()
  config.optimizer.update(learning_rate=1e-2, warmup_steps=4, weight_decay=0.0, adam_b1=0.0,
                          adam_b2=0.0, adam_eps=1e-9)
  tx = optim.make_optimizer(*_typed(config))
  params = _toy_params()
  state = tx.init(params)
  ones = jax.tree.map(jnp.ones_like, params)
  nan = jax.tree.map(lambda p: jnp.full_like(p, jnp.nan), params)
  schedule = optim.learning_rate_schedule(*_typed(config))
  for step, grads in enumerate([ones, nan, ones, ones]):
    updates, state = tx.update(grads, state, params, step=step)
    want = 0.0 if step == 1 else -float(schedule(step))
    for u in jax.tree.leaves(updates):
      np.testing.assert_allclose(u, want, rtol=1e-6)
  assert float(schedule(2)) != float(schedule(1))


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_no_weight_decay_on_layernorm_and_biases(optimizer):
  """With zero gradients only weight decay moves parameters: kernels, not biases or scales."""
  _, updates, _, _ = _updates(optimizer, lambda p: jax.tree.map(jnp.zeros_like, p))
  assert np.abs(updates["dense"]["kernel"]).min() > 0
  assert not np.any(updates["dense"]["bias"]) and not np.any(updates["norm"]["scale"])


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_nonfinite_gradients_change_nothing(optimizer):
  """optax.apply_if_finite around both: a NaN gradient gives a zero update, counts the step as
  skipped and leaves the moments as they were."""
  finite = lambda p: jax.tree.map(jnp.ones_like, p)
  _, _, before, _ = _updates(optimizer, finite, steps=1)
  config = small_config()
  config.optimizer.kind = optimizer
  config.optimizer.learning_rate = 1e-2
  tx = optim.make_optimizer(*_typed(config))
  nan = jax.tree.map(lambda p: jnp.full_like(p, jnp.nan), _toy_params())
  updates, after = tx.update(nan, before, _toy_params(), step=1)
  assert all(not np.any(u) for u in jax.tree.leaves(updates))
  assert int(after.notfinite_count) == 1 and int(after.total_notfinite) == 1
  for x, y in zip(jax.tree.leaves(before.inner_state), jax.tree.leaves(after.inner_state)):
    np.testing.assert_array_equal(x, y)


# ---- gradient accumulation --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mesh_shape,k,optimizer", [
    ((2, 2, 2), 4, "adamw"),  # DP x FSDP x TP, one row per device per micro-batch
    ((8, 1, 1), 2, "lamb"),
])
def test_micro_batches_equal_one_big_batch(mesh_shape, k, optimizer):
  """k micro-batches of 16/k rows == one batch of 16: metrics and parameters after 3 steps,
  with the NSP head (its loss is normalised by rows, the MLM loss by masked tokens: both over
  the global batch) and the per-token loss sums of adaptive masking."""
  config = small_config(mesh_shape)
  config.data.format = "segment_pair"
  config.optimizer.kind = optimizer
  batches = synthetic_batches(3, nsp=True)
  init, _ = init_state(config)
  big_metrics, big_state = train(config, batches, per_token_loss=True, init=init)
  config.train.grad_accum_steps = k
  acc_metrics, acc_state = train(config, batches, per_token_loss=True, init=init)
  assert set(big_metrics[0]) == set(acc_metrics[0]) >= {"nsp_loss_sum", "token_loss_sum"}
  for big, acc in zip(big_metrics, acc_metrics):
    for key in big:
      np.testing.assert_allclose(acc[key], big[key], rtol=1e-5, atol=1e-6, err_msg=key)
  assert losses_of(big_metrics)[-1] < losses_of(big_metrics)[0]
  assert_same_arrays(acc_state, big_state, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_micro_batches_stay_on_their_devices():
  """The split into micro-batches moves no data: the accumulating data-parallel step holds no
  all-to-all, gather or permute, only all-reduces (gradients and sums, per micro-batch)."""
  config = small_config((8, 1, 1))
  config.train.grad_accum_steps = 2
  settings = RunSettings.from_config(config)
  mesh = sharding.make_mesh(settings.mesh)
  setup = assembly.Assembly.of(settings).setup(VOCAB, mesh)
  s = sharding.batch_sharding(mesh)
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s)
           for k, v in synthetic_batches(1)[0].items()}
  step = assembly.Assembly.of(settings).train_step(setup)
  hlo = step.lower(setup.abstract_state, batch).compile()
  assert set(collectives_in(hlo.as_text())) == {"all-reduce"}
