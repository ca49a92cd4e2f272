"""Attention kernels against the einsum oracle, on packed rows with padding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlmjax.configs import base
from mlmjax import errors
from mlmjax.models import attention
from mlmjax.training import config_check

B, T, N, H = 2, 128, 2, 16
# On a GPU (tests/conftest.py's MLMJAX_TEST_ON_GPU) the GPU kernels are compiled and cuDNN's is
# tested too; elsewhere the Pallas kernels run in interpret mode, the same kernel code.
ON_GPU = jax.default_backend() == "gpu"
KERNELS = ["xla", "pallas_gpu", "splash"]


def _attend(q, k, v, seg, impl, **kwargs):
  # only the Pallas kernels interpret; on a GPU the GPU one compiles (splash needs a TPU)
  return attention.attend(q, k, v, seg, impl, interpret=not ON_GPU or impl == "splash", **kwargs)


def _inputs():
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32) for _ in range(3))
  seg = np.zeros((B, T), np.int32)
  seg[0, :50], seg[0, 50:101] = 1, 2  # two packed sequences, then padding
  seg[1, :] = 1  # one full-length sequence
  return q, k, v, jnp.asarray(seg)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("impl", KERNELS)
def test_every_kernel_that_runs_here_matches_the_reference(impl, causal):
  """Outputs and gradients on the real tokens (padding outputs are unspecified), bidirectional
  and causal."""
  q, k, v, seg = _inputs()
  real = (seg > 0)[:, :, None, None]
  cotangent = jnp.asarray(np.random.default_rng(1).normal(size=(B, T, N, H)), jnp.float32)

  def loss(fn, q, k, v):
    return jnp.sum(jnp.where(real, fn(q, k, v) * cotangent, 0.0))

  want_out = attention.reference(q, k, v, seg, causal=causal)
  want_grads = jax.grad(
      lambda *a: loss(lambda *b: attention.reference(*b, seg, causal=causal), *a),
      argnums=(0, 1, 2))(q, k, v)
  kernel = lambda q, k, v: _attend(q, k, v, seg, impl, causal=causal)
  out = kernel(q, k, v)
  # float32 on a GPU's matrix units is tf32 (~1e-3 relative) unless asked otherwise
  atol = 2e-2 if ON_GPU else 2e-5
  np.testing.assert_allclose(np.where(real, out, 0), np.where(real, want_out, 0), atol=atol)
  grads = jax.grad(lambda *a: loss(kernel, *a), argnums=(0, 1, 2))(q, k, v)
  for got, want in zip(grads, want_grads):
    np.testing.assert_allclose(got, want, atol=10 * atol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("impl", KERNELS + (["cudnn"] if ON_GPU else []))
def test_every_kernel_in_bfloat16_is_near_the_float32_reference(impl, causal):
  """bfloat16 q/k/v (the compute dtype on accelerators; cuDNN takes nothing else): outputs and
  gradients on the real tokens within bfloat16's error of the float32 oracle."""
  q, k, v, seg = _inputs()
  real = (seg > 0)[:, :, None, None]
  half = lambda x: x.astype(jnp.bfloat16)

  def loss(fn, q, k, v):
    return jnp.sum(jnp.where(real, fn(q, k, v).astype(jnp.float32), 0.0) ** 2)

  reference = lambda *a: attention.reference(*a, seg, causal=causal)
  kernel = lambda *a: _attend(*map(half, a), seg, impl, causal=causal)
  rel = lambda got, want: float(jnp.linalg.norm(jnp.where(real, got.astype(jnp.float32) - want, 0))
                                / jnp.linalg.norm(jnp.where(real, want, 0)))
  assert rel(kernel(q, k, v), reference(q, k, v)) < 1e-2
  got = jax.grad(lambda *a: loss(kernel, *a), argnums=(0, 1, 2))(q, k, v)
  want = jax.grad(lambda *a: loss(reference, *a), argnums=(0, 1, 2))(q, k, v)
  for g, w in zip(got, want):
    assert rel(g, w) < 2e-2


def test_auto_picks_the_kernel_each_platform_can_run():
  assert attention.resolve("auto", jnp.float32, 128, "cpu") == "xla"
  assert attention.resolve("auto", jnp.float32, 128, "tpu") == "splash"
  assert attention.resolve("auto", jnp.float32, 100, "tpu") == "xla"
  assert attention.resolve("auto", jnp.bfloat16, 128, "gpu") == "cudnn"
  assert attention.resolve("auto", jnp.float32, 128, "gpu") == "xla"


@pytest.mark.parametrize("impl,dropout,message", [
    ("splash", 0.0, "model.attention_impl='splash' needs a TPU and sequence lengths that are"
                    " multiples of 128"),
    ("cudnn", 0.0, "model.attention_impl='cudnn' needs an NVIDIA GPU and model.dtype bfloat16"),
    ("pallas_gpu", 0.1, "model.attention_impl='pallas_gpu' needs a GPU"),
])
def test_kernels_this_machine_cannot_run_are_refused_up_front(impl, dropout, message):
  config = base.get_config()
  config.model.attention_impl = impl
  config.model.attention_dropout_rate = dropout
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(config, 1, 1)
  assert str(e.value) == message


def test_the_causal_mask_sees_no_future_token_and_no_other_sequence():
  """Changing the keys and values at positions after t, or in another packed sequence, leaves
  every kernel's output at t as it was; changing one at or before t (same sequence) does not."""
  q, k, v, seg = _inputs()
  future = np.zeros((B, T), bool)
  future[0, 30:50] = True  # the rest of row 0's first sequence from position 30 ...
  future[0, 50:101] = True  # ... and its whole second sequence
  change = jnp.asarray(future)[:, :, None, None]
  k2, v2 = jnp.where(change, k + 3.0, k), jnp.where(change, -v, v)
  for impl in KERNELS:
    attend = lambda k, v: np.asarray(_attend(q, k, v, seg, impl, causal=True))
    before, after = attend(k, v), attend(k2, v2)
    np.testing.assert_allclose(after[0, :30], before[0, :30], atol=1e-6, err_msg=impl)
    np.testing.assert_allclose(after[1], before[1], atol=1e-6, err_msg=impl)  # untouched row
    assert not np.allclose(after[0, 30:50], before[0, 30:50]), impl  # they see position 30
  allowed = np.asarray(attention.mask(seg, causal=True))[0, 0]
  t = np.arange(T)
  seg0 = np.asarray(seg)[0]
  want = (seg0[:, None] == seg0[None, :]) & (seg0[None, :] > 0) & (t[:, None] >= t[None, :])
  np.testing.assert_array_equal(allowed, want)
