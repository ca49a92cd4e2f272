"""The causal-LM objective on the encoder (training/objectives/clm.py): the rows it restores, the
targets it predicts, a model that sees no future token, and CLM-then-MLM resuming exactly
across the switch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import assert_resumes_exactly
from mlmjax.errors import ConfigError
from mlmjax.models import bert
from mlmjax.models.settings import ModelSettings
from mlmjax.training import config_check
from mlmjax.training.core import losses
from mlmjax.training import objectives
from mlmjax.training.objectives import clm as causal_lm
from mlmjax.training.planning import phases
from mlmjax.training.run import metrics
from mlmjax.training.run_settings import RunSettings
from mlmjax.training import train

MASK = 4  # special_ids.MASK_ID


def _batch():
  """Two rows: two packed documents then padding; one document filling the row. Masked slots
  hold [MASK], a random token and a kept token; the last slots are padding (weight 0)."""
  original = np.array([[2, 10, 11, 12, 3, 2, 20, 21, 22, 3, 0, 0],
                       [2, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 3]], np.int32)
  segment = np.array([[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0], [1] * 12], np.int32)
  positions = np.array([[2, 7, 0, 0], [1, 5, 9, 0]], np.int32)
  weights = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.float32)
  shown = original.copy()
  shown[0, 2], shown[0, 7] = MASK, 99  # [MASK], a random token
  shown[1, 1], shown[1, 9] = MASK, MASK  # (row 1, position 5 kept as it was)
  return original, {
      "input_ids": shown, "segment_ids": segment, "masked_positions": positions,
      "masked_ids": np.take_along_axis(original, positions, axis=1) * (weights > 0),
      "masked_weights": weights,
      "positions": np.array([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 0], list(range(12))], np.int32),
      "token_type_ids": np.zeros_like(original)}


def test_the_step_restores_the_rows_and_predicts_each_next_token_of_a_sequence():
  original, batch = _batch()
  np.testing.assert_array_equal(causal_lm.unmasked_ids(batch), original)
  targets, weights = causal_lm.next_token_targets(causal_lm.prepare(batch))
  np.testing.assert_array_equal(targets, original[:, 1:])
  # Row 0: no prediction across the documents' boundary (position 4 -> 5) nor into padding.
  np.testing.assert_array_equal(weights[0], [1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(weights[1], [1] * 11)
  assert float(causal_lm.global_counts(causal_lm.prepare(batch))["clm_count"]) == 19


def test_the_loss_is_the_mean_next_token_cross_entropy_whatever_the_chunk():
  """Chunks of 4 positions (11 padded to 12), of 5 and one chunk of all: the same sums as the
  logits computed whole, the same gradients, and per-token sums alike."""
  _, batch = _batch()
  batch = causal_lm.prepare(batch)
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  outputs = {"clm_features": jax.random.normal(keys[0], (2, 11, 16)),
             "decoder": jax.random.normal(keys[1], (128, 16)),
             "decoder_bias": jax.random.normal(keys[2], (128,))}
  targets, weights = causal_lm.next_token_targets(batch)
  logits = bert.decode(outputs["clm_features"], outputs["decoder"], outputs["decoder_bias"])
  logp = jax.nn.log_softmax(logits)
  want = -jnp.sum(jnp.take_along_axis(logp, targets[..., None], -1)[..., 0] * weights) / 19
  whole = losses.per_token_sums(logits, targets, weights)
  step = objectives.get("clm").step(None)
  loss = lambda o, chunk: step.loss(causal_lm.sums(o, batch, chunk=chunk))
  grads = {}
  for chunk in (4, 5, 128):
    sums = causal_lm.sums(outputs, batch, per_token_loss=True, chunk=chunk)
    assert float(step.loss(sums)) == pytest.approx(float(want), rel=1e-6)
    np.testing.assert_allclose(sums["token_loss_sum"], whole["token_loss_sum"], rtol=1e-5)
    np.testing.assert_array_equal(sums["token_count"], whole["token_count"])
    assert float(sums["clm_count"]) == 19
    grads[chunk] = jax.grad(loss)(outputs, chunk)
  for chunk in (4, 5):
    for key in outputs:
      np.testing.assert_allclose(grads[chunk][key], grads[128][key], rtol=1e-5, atol=1e-7)
  summary = objectives.get("clm").summarize(jax.device_get(causal_lm.sums(outputs, batch)))
  assert summary["clm_loss"] == summary["loss"] == pytest.approx(float(want), rel=1e-6)
  assert set(summary) == {"loss", "clm_loss", "clm_accuracy", "perplexity"}


def test_the_encoder_predicts_each_next_token_from_the_tokens_before_it_only(micro_config):
  """Changing the token at position 6 leaves the next-token logits at positions 0..5 bit for
  bit, changes those from 6 on, and leaves the other document of the row alone; the same
  model called for MLM (a fresh copy, as every step makes) still attends both ways."""
  model = bert.BertForPretraining(ModelSettings.from_config(micro_config.model), 128,
                                       nnx.Rngs(params=0))
  graphdef, params = nnx.split(model)
  _, batch = _batch()
  batch = causal_lm.prepare(batch)
  changed = {**batch, "input_ids": batch["input_ids"].at[0, 6].set(77)}
  def call(b):
    out = nnx.merge(graphdef, params).next_token_features(b)
    return np.asarray(bert.decode(out["clm_features"], out["decoder"], out["decoder_bias"]))
  before, after = call(batch), call(changed)
  np.testing.assert_array_equal(after[0, :6], before[0, :6])
  assert not np.allclose(after[0, 6:9], before[0, 6:9])
  np.testing.assert_array_equal(after[1], before[1])
  mlm = lambda b: np.asarray(nnx.merge(graphdef, params)({**b, "masked_positions": np.array(
      [[5, 0, 0, 0], [1, 0, 0, 0]], np.int32)})["mlm_logits"])
  assert not np.allclose(mlm(batch)[0, 0], mlm(changed)[0, 0])  # position 5 sees 6 again


def test_clm_phases_are_refused_with_electra(micro_config):
  micro_config.objective.kind = "electra"
  micro_config.train.phases = ((0.5, 32, 6, {"objective": "clm"}), (0.5, 32, 6))
  with pytest.raises(ConfigError) as e:
    settings = RunSettings.from_config(micro_config)
    config_check.check_saved(settings, phases.plan(settings))
  assert str(e.value) == (
      "train.phases objective 'clm' trains an encoder's own MLM head, which"
      " objective.kind='electra' does not have: use objective.kind='mlm'")
  micro_config.objective.kind = "mlm"
  micro_config.train.phases = ((1.0, 32, 6, {"objective": "ar"}),)
  with pytest.raises(ConfigError, match="train.phases objective"):
    RunSettings.from_config(micro_config)


@pytest.mark.slow
def test_clm_then_mlm_trains_both_and_resumes_bit_identically_across_the_switch(
    tmp_path, micro_config, caplog):
  """4 CLM steps then 4 MLM steps: the log says which objective each step trained, the
  held-out metrics are MLM's throughout, and a run stopped in the CLM phase and resumed across
  the switch ends bit-identical to the straight one (dropout on)."""
  micro_config.train.phases = ((0.5, 32, 6, {"objective": "clm"}), (0.5, 32, 6))
  micro_config.train.update(log_every_steps=1, eval_every_steps=4)
  assert [p.objective for p in phases.plan(RunSettings.from_config(micro_config))] == [
      "clm", "mlm"]
  straight = str(tmp_path / "straight")
  train.train_and_evaluate(micro_config, straight)
  rows = metrics.rows(str(tmp_path / "straight" / "metrics.jsonl"))
  trained = {r["step"]: r for r in rows if "loss" in r}
  assert all("clm_accuracy" in trained[s] and "mlm_accuracy" not in trained[s]
             for s in range(1, 5))
  assert all("mlm_accuracy" in trained[s] and "clm_accuracy" not in trained[s]
             for s in range(5, 9))
  assert [r["step"] for r in rows if "eval/mlm_accuracy" in r] == [4, 8]
  assert_resumes_exactly(micro_config, straight, str(tmp_path / "split"), 3, caplog)
