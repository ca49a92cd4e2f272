"""Numerical faults and bad input: nothing non-finite is applied or saved; clear errors."""

import json
import os

import jax
import numpy as np
import pytest

from conftest import saved_state, train_iter
from mlmjax.data.masking import masker as masker_lib
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training.run import loop
from mlmjax.training import train


@pytest.fixture
def nan_at_step(monkeypatch):
  """Makes the masker emit NaN loss weights for the batch of one (0-based) step."""
  def install(bad_step):
    original = masker_lib.Masker.__call__

    def poisoned(self, batch, *, seed, step, example_ids):
      out = original(self, batch, seed=seed, step=step, example_ids=example_ids)
      if step == bad_step and seed < 1000:  # training batches only, not eval's
        out["masked_weights"] = np.full_like(out["masked_weights"], np.nan)
      return out
    monkeypatch.setattr(masker_lib.Masker, "__call__", poisoned)
  return install


@pytest.mark.slow  # over 5 s
def test_nonfinite_step_changes_nothing(micro_config, corpus, make_masker):
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  mesh = sharding.make_mesh(micro_config.mesh)
  setup = assembly.Assembly.of(micro_config).setup(tok.vocab_size, mesh)
  step = assembly.Assembly.of(micro_config).train_step(setup)
  batch = next(train_iter(micro_config, tok, corpus[0], make_masker(micro_config)))
  state = setup.init_fn()
  before = jax.tree.map(np.asarray, state)
  bad = dict(batch, masked_weights=np.full_like(batch["masked_weights"], np.nan))
  state, metrics = step(state, sharding.to_device(bad, mesh))
  assert float(metrics["nonfinite"]) == 1.0
  after = jax.tree.map(np.asarray, state)
  for x, y in zip(jax.tree.leaves(before["params"]), jax.tree.leaves(after["params"])):
    np.testing.assert_array_equal(x, y)
  for _ in range(2):  # good batches still train (the first update has warmup's lr 0)
    state, metrics = step(state, sharding.to_device(batch, mesh))
    assert float(metrics["nonfinite"]) == 0.0
  assert not np.array_equal(np.asarray(state["params"]["token_embedding"]),
                            before["params"]["token_embedding"])


@pytest.mark.slow
def test_skip_policy_logs_and_goes_on(tmp_path, micro_config, nan_at_step):
  nan_at_step(4)  # the 5th step
  train.train_and_evaluate(micro_config, str(tmp_path))
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl") if '"loss"' in l]
  assert [(r["step"], r["skipped_steps"]) for r in rows] == [(2, 0), (4, 0), (6, 1), (8, 1)]
  assert all(np.isfinite(r["loss"]) for r in rows)


@pytest.mark.slow
def test_stop_policy_names_the_step_and_saves_nothing_after_it(tmp_path, micro_config,
                                                               nan_at_step):
  micro_config.train.nonfinite_policy = "stop"
  micro_config.train.checkpoint_every_steps = 2
  nan_at_step(4)
  with pytest.raises(loop.NonFiniteError) as e:
    train.train_and_evaluate(micro_config, str(tmp_path))
  assert str(e.value) == (
      "step 5: non-finite loss or gradients; the update was not applied and nothing after the"
      " last checkpoint was saved (lower optimizer.learning_rate, or set"
      " train.nonfinite_policy='skip')")
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2", "4"]
  state = saved_state(str(tmp_path), 4)
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(state["params"]))
