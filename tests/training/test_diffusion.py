"""The diffusion objective (objective.kind='diffusion', or a phase's): the variational bound
computed by hand, the loss the settings choose, one prediction slot per position, the rules
it refuses, the preset, a loss that falls, the bound from python -m mlmjax.evaluate,
MLM-then-diffusion resuming exactly across the switch, and logits decoded in chunks training
as whole ones."""

import json
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import command_lines
from conftest import (assert_resumed, assert_same_arrays, saved_state, train_iter,
                      train_on_one_device, user_env)
from mlmjax.configs import diffusion as diffusion_preset
from mlmjax.data import masking
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.errors import ConfigError
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training import objectives
from mlmjax.training.planning import phases
from mlmjax.training.run import metrics
from mlmjax.training.run_settings import RunSettings
from mlmjax.training.settings import ObjectiveSettings
from mlmjax.training import train

V = 16


def _batch():
  """One row: [CLS] [MASK] [MASK] 10 [SEP] [PAD]; the two [MASK]s are targets of documents at
  rates 0.5 and 0.25 (one slot of padding)."""
  return {"input_ids": jnp.array([[2, 4, 4, 10, 3, 0]]),
          "segment_ids": jnp.array([[1, 1, 1, 1, 1, 0]]),
          "masked_ids": jnp.array([[11, 12, 0]]),
          "masked_weights": jnp.array([[1.0, 1.0, 0.0]]),
          "masked_rates": jnp.array([[0.5, 0.25, 0.0]])}


def _objective(loss):
  return ObjectiveSettings(kind="diffusion", generator_fraction=0.25, discriminator_weight=50.0,
                           span_boundary_weight=0.0, diffusion_loss=loss, logits_chunk=0)


def test_the_bound_is_each_targets_cross_entropy_over_its_rate_per_maskable_token():
  logits = jnp.zeros((1, 3, V))  # every target's cross-entropy: log 16
  diffusion = objectives.get("diffusion")
  sums = diffusion.sums({"mlm_logits": logits}, _batch())
  # log 16 / 0.5 + log 16 / 0.25 over the 3 maskable tokens (two masked, one shown: 10).
  assert float(sums["diffusion_bound_sum"]) == pytest.approx(6 * math.log(V))
  assert float(sums["diffusion_token_count"]) == 3
  assert float(diffusion.loss(sums, _objective("inverse_rate"))) == pytest.approx(
      2 * math.log(V))
  assert float(diffusion.loss(sums, _objective("plain"))) == pytest.approx(math.log(V))
  read = diffusion.summarize({k: float(v) for k, v in sums.items()})
  assert read["diffusion_bound"] == pytest.approx(2 * math.log(V))
  assert read["bits_per_token"] == pytest.approx(2 * 4)  # 2 log 16 nats = 8 bits


def test_a_diffusion_phase_has_a_slot_per_position_and_the_preset_passes(micro_config):
  micro_config.train.phases = ((0.5, 32, 6), (0.5, 32, 6, {"objective": "diffusion"}))
  plan = phases.plan(RunSettings.from_config(micro_config))
  assert [(p.objective, p.max_predictions) for p in plan] == [("mlm", 6), ("diffusion", 32)]
  for size in diffusion_preset.SIZES:
    config = diffusion_preset.get_config(size)
    config_check.checked(config, 8, 1)
    assert phases.plan(RunSettings.from_config(config)).whole_run.max_predictions == (
        config.data.seq_len)


def test_the_rules_it_refuses_are_one_line(micro_config):
  micro_config.objective.kind = "diffusion"
  micro_config.masking.strategy = "span"
  with pytest.raises(ConfigError) as e:
    config_check.checked(micro_config, 1, 1)
  assert str(e.value) == ("the diffusion objective masks each token alone at its document's"
                          " rate: it takes masking.strategy='random', not 'span'")
  micro_config.objective.diffusion_loss = "elbo"
  with pytest.raises(ConfigError) as e:
    RunSettings.from_config(micro_config)
  assert str(e.value) == ("objective.diffusion_loss='elbo' is not one of inverse_rate, plain")


@pytest.mark.slow
def test_the_bound_falls_as_the_tiny_model_trains(tmp_path, micro_config):
  micro_config.objective.kind = "diffusion"
  micro_config.train.update(steps=40, log_every_steps=20, eval_every_steps=40,
                            checkpoint_every_steps=40)
  micro_config.optimizer.update(learning_rate=3e-3)
  train_on_one_device(micro_config, str(tmp_path / "run"))
  rows = [r for r in metrics.rows(str(tmp_path / "run" / "metrics.jsonl")) if "loss" in r]
  assert [r["step"] for r in rows] == [20, 40]
  assert rows[-1]["diffusion_bound"] < rows[0]["diffusion_bound"] - 0.3
  assert rows[-1]["loss"] < rows[0]["loss"]
  # python -m mlmjax.evaluate: 4 draws of the bound by default for a diffusion run, their mean.
  outs = command_lines.run([["mlmjax.evaluate", f"--workdir={tmp_path / 'run'}", *flags]
                            for flags in (["--mask_rate=0.85"], ["--bound_samples=1"])],
                           env=user_env())
  scored, one = (json.loads(out.stdout) for out in outs)
  assert scored["bound_samples"] == 4 and scored["mask_rate"] == 0.85
  assert scored["bits_per_token"] == pytest.approx(scored["diffusion_bound"] / math.log(2))
  assert scored["diffusion_bound"] != one["diffusion_bound"]  # the other draws count
  assert abs(scored["diffusion_bound"] - rows[-1]["diffusion_bound"]) < 0.5


@pytest.mark.slow
@pytest.mark.e2e  # also at the newest jax (.ci/newest_jax)
def test_mlm_diffusion_mlm_resumes_bit_identically_across_and_inside_each_switch(
    tmp_path, micro_config, caplog):
  """2 MLM steps, 4 diffusion steps, 2 MLM steps (dropout on): the diffusion steps alone log
  the bound, and a run stopped at the first switch (step 2), inside the diffusion phase (step
  5) and inside the MLM phase after it (step 7) ends bit-identical to the straight one."""
  micro_config.train.phases = ((0.25, 32, 6), (0.5, 32, 6, {"objective": "diffusion"}),
                               (0.25, 32, 6))
  micro_config.train.update(log_every_steps=1, eval_every_steps=4)
  straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
  train.train_and_evaluate(micro_config, straight)
  trained = {r["step"]: r for r in metrics.rows(f"{straight}/metrics.jsonl") if "loss" in r}
  assert [s for s in trained if "diffusion_bound" in trained[s]] == [3, 4, 5, 6]
  train.train_and_evaluate(micro_config, split, stop_after=2)
  for stop_after, resumed_from in ((5, 2), (7, 5), (None, 7)):
    caplog.clear()
    with caplog.at_level(logging.INFO):
      train.train_and_evaluate(micro_config, split, stop_after=stop_after)
    assert_resumed(split, resumed_from, caplog.text)
  assert_same_arrays(saved_state(straight), saved_state(split))


@pytest.mark.slow
def test_logits_decoded_in_chunks_train_as_logits_made_whole(micro_config, corpus,
                                                             vocab_stats_for_tests):
  """objective.logits_chunk: one train step from the same state on the same batch gives the
  same metrics and the same parameters as the whole logits (the diffusion bound, the NSP head
  of a pair format and the per-token sums of adaptive masking alike), 32 slots in chunks of 12
  (the last one padded)."""
  micro_config.objective.kind = "diffusion"
  micro_config.data.format = "segment_pair"
  micro_config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
  settings = RunSettings.from_config(micro_config)
  slots = phases.plan(settings).whole_run.max_predictions
  masker = masking.Masker(settings.masking.replace(max_predictions_per_seq=slots),
                          vocab_stats_for_tests,
                          diffusion=settings.masking.diffusion())
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  batch = next(iter(train_iter(micro_config, tok, corpus[0], masker)))
  mesh = sharding.make_mesh(micro_config.mesh)
  results = []
  for chunk in (0, 12):
    parts = assembly.Assembly.of(settings.replace(objective={"logits_chunk": chunk}))
    setup = parts.setup(len(tok), mesh)
    step = parts.train_step(setup, per_token_loss=True)
    state, out = step(setup.init_fn(), sharding.to_device(batch, mesh))
    results.append(jax.tree.map(np.asarray, (state["params"], out)))
  (params_whole, whole), (params_chunked, chunked) = results
  assert set(whole) == set(chunked)
  assert {"diffusion_bound_sum", "nsp_loss_sum", "token_loss_sum"} <= set(whole)
  assert_same_arrays(whole, chunked, rtol=2e-5, atol=1e-5)
  assert_same_arrays(params_whole, params_chunked, rtol=1e-4, atol=1e-6)
