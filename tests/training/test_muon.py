"""optimizer.kind='muon': the blocks' matrices get Muon (checked against a numpy Newton-Schulz),
everything else AdamW; behind apply_if_finite; sharded like the parameters; a tiny run learns."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training.core import optimizer as optim
from synthetic_steps import VOCAB, losses_of, small_config, synthetic_batches, train

# Muon's quintic Newton-Schulz coefficients (Jordan et al., 2024), 5 iterations.
NS_COEFFS, NS_STEPS = (3.4445, -4.775, 2.0315), 5


def numpy_newton_schulz(g):
  """The hand computation: X = G / ||G||_F on the wide side, X <- aX + (bA + cA^2)X, A = XX^T."""
  x = g.astype(np.float64) / (np.linalg.norm(g) + 1e-8)
  wide = x.shape[0] > x.shape[1]
  x = x.T if wide else x
  a, b, c = NS_COEFFS
  for _ in range(NS_STEPS):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if wide else x


def _params():
  rng = np.random.default_rng(0)
  return {"blocks": [{"mlp_out": {"kernel": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32),
                                  "bias": jnp.asarray(rng.normal(size=(4,)), jnp.float32)},
                      "attention": {"qkv_kernel": jnp.asarray(rng.normal(size=(3, 4, 2, 2)),
                                                              jnp.float32)}}],
          "mlm_transform": {"kernel": jnp.asarray(rng.normal(size=(4, 4)), jnp.float32)}}


def _optimizer_config(name):
  config = small_config()
  config.optimizer.update(kind=name, learning_rate=1e-2, warmup_steps=1, weight_decay=0.0,
                          grad_clip_norm=1e9)
  return optim.OptimizerSettings.from_config(config.optimizer), config.train.steps


def _step(name, grads, params):
  """The update of step 1 (step 0 is warmup's rate 0) from a fresh state."""
  tx = optim.make_optimizer(*_optimizer_config(name))
  updates, state = tx.update(grads, tx.init(params), params, step=1)
  return updates, state, float(optim.learning_rate_schedule(*_optimizer_config(name))(1))


def test_muon_update_of_a_matrix_is_its_orthogonalised_gradient():
  params = _params()
  grads = jax.tree.map(lambda p: jnp.asarray(
      np.random.default_rng(p.size).normal(size=p.shape), jnp.float32), params)
  updates, _, lr = _step("muon", grads, params)
  g = np.asarray(grads["blocks"][0]["mlp_out"]["kernel"])
  # The first momentum is a positive multiple of g, which the normalisation removes; then
  # Moonshot's RMS matching: 0.2 * sqrt(max(fan_in, fan_out)).
  want = -lr * 0.2 * np.sqrt(8) * numpy_newton_schulz(g)
  np.testing.assert_allclose(updates["blocks"][0]["mlp_out"]["kernel"], want, rtol=2e-4,
                             atol=1e-7)
  # Its singular values are pushed towards one (Newton-Schulz's band, about 0.7..1.2).
  s = np.linalg.svd(np.asarray(updates["blocks"][0]["mlp_out"]["kernel"]) / (-lr * 0.2 *
                                                                            np.sqrt(8)))[1]
  assert 0.6 < s.min() and s.max() < 1.25, s
  # q, k and v are orthogonalised one by one, each a [D, N*H] matrix.
  qkv = np.asarray(grads["blocks"][0]["attention"]["qkv_kernel"])
  for i in range(3):
    want = -lr * 0.2 * 2 * numpy_newton_schulz(qkv[i].reshape(4, 4)).reshape(4, 2, 2)
    np.testing.assert_allclose(updates["blocks"][0]["attention"]["qkv_kernel"][i], want,
                               rtol=2e-4, atol=1e-7)
  # Biases and heads outside the blocks get exactly AdamW's update.
  adamw, _, _ = _step("adamw", grads, params)
  for path in (("blocks", 0, "mlp_out", "bias"), ("mlm_transform", "kernel")):
    get = lambda tree: tree[path[0]][path[1]][path[2]][path[3]] if len(path) == 4 else (
        tree[path[0]][path[1]])
    np.testing.assert_array_equal(get(updates), get(adamw))


def test_muon_skips_nonfinite_gradients():
  params = _params()
  nan = jax.tree.map(lambda p: jnp.full_like(p, jnp.nan), params)
  updates, state, _ = _step("muon", nan, params)
  assert all(not np.any(u) for u in jax.tree.leaves(updates))
  assert int(state.notfinite_count) == 1


@pytest.mark.slow
def test_muon_state_is_sharded_like_the_parameters_and_a_tiny_run_learns():
  config = small_config((1, 4, 2))  # FSDP x tensor parallel
  config.optimizer.update(kind="muon", learning_rate=1e-2, warmup_steps=1)
  mesh = sharding.make_mesh(config.mesh)
  setup = assembly.Assembly.of(config).setup(VOCAB, mesh)
  want = setup.state_shardings["params"]["blocks"][0]["attention"]["qkv_kernel"]
  assert tuple(want.spec) == (None, "fsdp", "tensor", None)
  momenta = [s for keys, s in jax.tree_util.tree_leaves_with_path(
      setup.state_shardings["opt_state"])
             if "inner_states['muon']" in jax.tree_util.keystr(keys) and "qkv" in str(keys)]
  assert len(momenta) == 2 and all(s == want for s in momenta)  # one per layer
  # One batch again and again: a model that learns memorises it.
  metrics, _ = train(config, synthetic_batches(1) * 5)
  losses = losses_of(metrics)
  assert losses[-1] < losses[0] - 1.0, losses
