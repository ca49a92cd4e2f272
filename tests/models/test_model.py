"""Model behaviour: document isolation in packed rows, masked-only head."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mlmjax.models import attention as attention_lib
from mlmjax.models import bert as model_lib
from mlmjax.models import compile_target
from mlmjax.models import layers
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel import targets


def _model(micro_config, vocab=512):
  return model_lib.BertForPretraining(ModelSettings.from_config(micro_config.model), vocab,
                                      nnx.Rngs(params=0))


def _row(doc_a, doc_b, length=32):
  ids = np.zeros((1, length), np.int32)
  seg = np.zeros((1, length), np.int32)
  pos = np.zeros((1, length), np.int32)
  a, b = len(doc_a), len(doc_b)
  ids[0, :a], seg[0, :a], pos[0, :a] = doc_a, 1, np.arange(a)
  ids[0, a:a + b], seg[0, a:a + b], pos[0, a:a + b] = doc_b, 2, np.arange(b)
  return {"input_ids": ids, "segment_ids": seg, "positions": pos,
          "token_type_ids": np.zeros_like(ids)}


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_documents_in_one_row_do_not_see_each_other(micro_config, positions):
  micro_config.model.position_embedding_type = positions
  model = _model(micro_config)
  doc_a = [2, 10, 11, 12, 13, 14, 3]
  doc_b = [2, 20, 21, 22, 23, 24, 25, 26, 3]
  h1 = np.asarray(model.encode(_row(doc_a, doc_b)))
  h2 = np.asarray(model.encode(_row(doc_a, [2, 99, 98, 97, 96, 95, 94, 93, 3])))
  n = len(doc_a)
  np.testing.assert_array_equal(h1[0, :n], h2[0, :n])  # doc A: bit-identical
  assert not np.allclose(h1[0, n:n + len(doc_b)], h2[0, n:n + len(doc_b)])
  # ...and doc A's outputs equal those of doc A alone in its own row.
  alone = np.asarray(model.encode(_row(doc_a, [])))
  np.testing.assert_allclose(h1[0, :n], alone[0, :n], rtol=1e-6, atol=1e-6)


def test_masked_only_head_equals_full_projection_at_those_positions(micro_config):
  model = _model(micro_config)
  batch = _row([2, 10, 11, 12, 13, 14, 3], [2, 20, 21, 4, 23, 3])
  batch["masked_positions"] = np.array([[1, 3, 10, 0]], np.int32)
  logits_bpv = model(batch)["mlm_logits"]
  assert logits_bpv.shape == (1, 4, 512)
  # Reference: project every position, then pick.
  h = model.encode(batch)
  full = model.mlm_norm(jax.nn.gelu(model.mlm_transform(h), approximate=False))
  full = full @ model.token_embedding[...].T + model.mlm_bias[...]
  np.testing.assert_allclose(np.asarray(logits_bpv[0]), np.asarray(full[0, [1, 3, 10, 0]]),
                             rtol=1e-5, atol=1e-5)


def test_dropout_only_with_a_key(micro_config):
  model = _model(micro_config)
  batch = _row([2, 10, 11, 12, 3], [2, 20, 21, 3])
  a, b = model.encode(batch), model.encode(batch)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  k = jax.random.PRNGKey(0)
  c, d = model.encode(batch, k), model.encode(batch, k)
  np.testing.assert_array_equal(np.asarray(c), np.asarray(d))
  assert not jnp.allclose(a, c)


def test_type_zero_adds_nothing_and_type_one_does(micro_config):
  model = _model(micro_config)
  batch = _row([2, 10, 11, 12, 3], [2, 20, 21, 3])
  before = np.asarray(model.encode(batch))
  model.type_embedding[...] = jax.random.normal(jax.random.PRNGKey(1), model.type_embedding.shape)
  np.testing.assert_array_equal(before, np.asarray(model.encode(batch)))
  batch["token_type_ids"] = (batch["segment_ids"] == 2).astype(np.int32)  # doc B as type 1
  after = np.asarray(model.encode(batch))
  np.testing.assert_array_equal(before[0, :5], after[0, :5])
  assert not np.allclose(before[0, 5:9], after[0, 5:9])


def test_nsp_head_reads_the_first_cls_only(micro_config):
  model = model_lib.BertForPretraining(ModelSettings.from_config(micro_config.model), 512,
                                       nnx.Rngs(params=0), nsp_head=True)
  batch = _row([2, 10, 11, 3, 12, 13, 3], [])
  batch["token_type_ids"][0, 4:7] = 1
  batch["masked_positions"] = np.array([[1, 4]], np.int32)
  out = model(batch)
  assert out["nsp_logits"].shape == (1, 2)
  pooled = jnp.tanh(model.pooler(model.encode(batch)[:, 0]))
  np.testing.assert_allclose(np.asarray(out["nsp_logits"]),
                             np.asarray(model.nsp_classifier(pooled)), rtol=1e-5, atol=1e-6)
  assert "nsp_logits" not in _model(micro_config)(batch)  # no head unless asked for
  # Training (dropout on): the pooled [CLS] goes to the classifier without dropout, as in BERT
  # and Hugging Face's BertPreTrainingHeads (only the encoder's dropout applies).
  key = jax.random.PRNGKey(3)
  pooled = jnp.tanh(model.pooler(model.encode(batch, key)[:, 0]))
  np.testing.assert_allclose(np.asarray(model(batch, key)["nsp_logits"]),
                             np.asarray(model.nsp_classifier(pooled)), rtol=1e-5, atol=1e-6)


def test_rope_sees_only_relative_positions(micro_config):
  micro_config.model.position_embedding_type = "rope"
  model = _model(micro_config)
  assert not hasattr(model, "position_embedding")  # no absolute table at all
  batch = _row([2, 10, 11, 12, 13, 14, 3], [])
  shifted = dict(batch, positions=batch["positions"] + 7 * (batch["segment_ids"] > 0))
  np.testing.assert_allclose(np.asarray(model.encode(batch)), np.asarray(model.encode(shifted)),
                             rtol=2e-4, atol=2e-5)
  # The learned table, in contrast, sees absolute positions.
  micro_config.model.position_embedding_type = "learned"
  learned = _model(micro_config)
  assert not np.allclose(np.asarray(learned.encode(batch)), np.asarray(learned.encode(shifted)),
                         atol=1e-3)


@pytest.mark.slow
def test_scan_and_remat_train_like_the_plain_model():
  """Stacked layers under lax.scan and every rematerialisation policy: the same initial
  weights (stacked), the same losses and the same parameters after three steps."""
  from synthetic_steps import small_config, synthetic_batches, train  # pylint: disable=g-import-not-at-top
  batches = synthetic_batches(3)
  plain_metrics, plain = train(small_config((1, 1, 1)), batches, devices=jax.devices()[:1])
  for scan, remat in ((True, "none"), (False, "full"), (True, "dots_saveable")):
    config = small_config((1, 1, 1))
    config.model.scan_layers, config.model.remat = scan, remat
    metrics, state = train(config, batches, devices=jax.devices()[:1])
    for m, want in zip(metrics, plain_metrics):
      np.testing.assert_allclose(m["mlm_loss_sum"], want["mlm_loss_sum"], rtol=1e-5)
    blocks = state["params"]["blocks"]
    for i, layer in plain["params"]["blocks"].items():
      got = jax.tree.map(lambda x: x[int(i)], blocks) if scan else blocks[i]
      for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(layer)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_master_weights_and_trains():
  from synthetic_steps import losses_of, small_config, synthetic_batches, train  # pylint: disable=g-import-not-at-top
  config = small_config((1, 1, 1))
  config.model.dtype = "bfloat16"
  config.optimizer.learning_rate = 3e-3
  batches = synthetic_batches(2)
  metrics, state = train(config, batches * 5, devices=jax.devices()[:1])
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(state["params"]))
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(state["opt_state"])
             if np.issubdtype(x.dtype, np.floating))
  losses = losses_of(metrics)
  assert losses[-1] < losses[0] - 0.5, losses
  model = model_lib.BertForPretraining(ModelSettings.from_config(config.model), 512,
                                       nnx.Rngs(params=0))
  batch = {k: v[:2] for k, v in batches[0].items()}
  assert model.encode(batch).dtype == jnp.bfloat16
  assert model(batch)["mlm_logits"].dtype == jnp.float32


def test_local_attention_mask_is_the_sliding_window_within_each_sequence():
  seg = np.array([[1] * 12 + [2] * 6 + [0] * 2])
  want = np.zeros((20, 20), bool)
  for t in range(20):
    for s in range(20):
      want[t, s] = seg[0, t] == seg[0, s] > 0 and abs(t - s) <= 4  # window 8: 4 each side
  np.testing.assert_array_equal(np.asarray(attention_lib.mask(seg, 8, local=True))[0, 0], want)
  everywhere = np.asarray(attention_lib.mask(seg, 8, local=False))[0, 0]
  np.testing.assert_array_equal(everywhere, (seg[0][:, None] == seg[0][None]) & (seg[0] > 0))
  # The kernels apply it too: splash's own local mask (interpreted) against the oracle.
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(1, 128, 2, 16)), jnp.float32) for _ in range(3))
  seg = jnp.asarray(np.r_[[1] * 70, [2] * 50, [0] * 8][None])
  real = np.asarray(seg > 0)[0]
  want = attention_lib.reference(q, k, v, seg, window=16, local=True)
  for impl in ("xla", "splash"):
    got = attention_lib.attend(q, k, v, seg, impl, interpret=True, window=16, local=True)
    np.testing.assert_allclose(np.asarray(got)[0, real], np.asarray(want)[0, real], atol=2e-5)


@pytest.mark.parametrize("mlp,bias", [("gelu", True), ("geglu", False), ("swiglu", True)])
def test_block_parameter_counts(micro_config, mlp, bias):
  m = micro_config.model
  m.mlp, m.use_bias, m.norm_position = mlp, bias, "pre"
  d, f = m.hidden_size, m.intermediate_size
  block = layers.Block(ModelSettings.from_config(m), nnx.Rngs(params=0))
  count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(block, nnx.Param)))
  matrices = 4 * d * d + (3 if mlp != "gelu" else 2) * d * f  # q, k, v, out; MLP in (+gate), out
  biases = (3 * d + d + (2 if mlp != "gelu" else 1) * f + d + 2 * d) if bias else 0
  assert count == matrices + 2 * d + biases  # + the two LayerNorm scales


@pytest.mark.slow
def test_modern_block_trains_and_resumes_exactly(tmp_path, micro_config, caplog):
  """The ModernBERT preset's options on the micro model: pre-LN, GeGLU, no biases, sliding
  windows (8 tokens in two of three layers), two rotary bases, WSD with 1 - sqrt decay and
  update clipping, scanned layers."""
  from mlmjax.configs import modernbert  # pylint: disable=g-import-not-at-top
  from conftest import assert_resumes_exactly  # pylint: disable=g-import-not-at-top
  from mlmjax.training import train  # pylint: disable=g-import-not-at-top
  preset = modernbert.get_config("base")
  c = micro_config
  for key in ("norm_position", "mlp", "use_bias", "position_embedding_type", "global_attention_every",
              "rope_base", "local_rope_base", "layer_norm_eps", "scan_layers"):
    c.model[key] = preset.model[key]
  c.model.num_layers, c.model.local_attention_window = 3, 8
  for key in ("schedule", "decay_shape", "adam_b2", "update_clip_rms"):
    c.optimizer[key] = preset.optimizer[key]
  straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
  metrics = train.train_and_evaluate(c, straight)
  assert np.isfinite(metrics["eval/loss"])
  a, _ = assert_resumes_exactly(c, straight, split, 5, caplog)
  assert "final_norm" in a["params"] and "bias" not in a["params"]["final_norm"]


def test_span_boundary_head_reads_only_the_boundaries_and_the_offset(micro_config):
  model = model_lib.BertForPretraining(ModelSettings.from_config(micro_config.model), 512,
                                       nnx.Rngs(params=0), sbo_head=True)
  batch = _row([2, 10, 11, 4, 4, 4, 14, 3], [])
  batch.update(masked_positions=np.array([[3, 4, 5]]), masked_span_left=np.array([[2, 2, 2]]),
               masked_span_right=np.array([[6, 6, 6]]), masked_span_offset=np.array([[0, 1, 2]]))
  got = np.asarray(model(batch)["sbo_logits"])
  h = model.encode(batch)[0]
  head = model.span_boundary
  gelu = lambda x: jax.nn.gelu(x, approximate=False)
  for slot in range(3):
    x = jnp.concatenate([h[2], h[6], head.offset_embedding[...][slot]])
    y = head.norm2(gelu(head.dense2(head.norm1(gelu(head.dense1(x))))))
    want = y @ model.token_embedding[...].T + head.bias[...]
    np.testing.assert_allclose(got[0, slot], np.asarray(want), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype,tolerance", [(jnp.float32, 1e-5), (jnp.bfloat16, 1e-2)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_fused_backward_equals_jax_derivative(micro_config, dtype, tolerance, bias):
  """model.layer_norm_backward='fused' (written out) against 'autodiff' (jax's derivative of the
  same forward): the outputs and every gradient, in float32 and bfloat16 activations."""
  keys = jax.random.split(jax.random.key(0), 4)
  x = (3.0 * jax.random.normal(keys[0], (4, 16, 64)) + 1.0).astype(dtype)
  upstream = jax.random.normal(keys[1], (4, 16, 64))
  grads = {}
  for backward in ("fused", "autodiff"):
    micro_config.model.update(layer_norm_backward=backward, use_bias=bias, hidden_size=64)
    norm = layers.LayerNorm(64, ModelSettings.from_config(micro_config.model))
    norm.scale[...] = 1.0 + 0.1 * jax.random.normal(keys[2], (64,))
    if bias:
      norm.bias[...] = 0.1 * jax.random.normal(keys[3], (64,))
    graphdef, params = nnx.split(norm)

    def loss(params, x):
      y = nnx.merge(graphdef, params)(x)
      assert y.dtype == dtype
      return (y.astype(jnp.float32) * upstream).sum()
    # the setting chooses: only the fused norm is a custom gradient
    assert ("custom_vjp" in str(jax.make_jaxpr(loss)(params, x))) == (backward == "fused")
    grads[backward] = (loss(params, x), *jax.grad(loss, (0, 1))(params, x))
  for fused, autodiff in zip(*(jax.tree.leaves(g) for g in grads.values())):
    np.testing.assert_allclose(np.asarray(fused, np.float32), np.asarray(autodiff, np.float32),
                               rtol=tolerance, atol=tolerance * np.abs(autodiff).max())


def test_layer_norm_backward_auto_is_fused_on_tpu_and_gpu_and_jax_s_on_cpu(micro_config):
  """'auto' (the default) by the platform the model is built for: the written-out backward
  where the compiler showed fewer bytes (TPU, GPU), jax's where it measured faster (CPU)."""
  assert [layers.fused_layer_norm("auto", p) for p in ("tpu", "gpu", "cpu")] == [
      True, True, False]
  assert layers.fused_layer_norm("fused", "cpu") and not layers.fused_layer_norm(
      "autodiff", "tpu")
  micro_config.model.layer_norm_backward = "auto"
  norm = layers.LayerNorm(64, ModelSettings.from_config(micro_config.model))  # this CPU
  assert not norm.fused
  mesh = jax.sharding.Mesh(np.array(targets.get("v5p-8").devices), ("data",))
  norm = layers.LayerNorm(64, ModelSettings.from_config(micro_config.model),
                          compile_target.Target(mesh, ("data",), ()))
  assert norm.fused


@pytest.mark.slow  # over 5 s: trains the model with each backward
def test_layer_norm_backwards_train_alike_scanned_and_rematerialised():
  """Three steps of the small model, layers scanned and fully recomputed (the custom gradient
  inside jax.checkpoint and lax.scan): the same losses and parameters with either backward."""
  from synthetic_steps import small_config, synthetic_batches, train  # pylint: disable=g-import-not-at-top
  batches, states, losses = synthetic_batches(3), [], []
  for backward in ("fused", "autodiff"):
    config = small_config((1, 1, 1))
    config.model.update(layer_norm_backward=backward, scan_layers=True, remat="full")
    metrics, state = train(config, batches, devices=jax.devices()[:1])
    losses.append([m["mlm_loss_sum"] for m in metrics])
    states.append(state["params"])
  np.testing.assert_allclose(*losses, rtol=1e-5)
  for x, y in zip(*(jax.tree.leaves(s) for s in states)):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
