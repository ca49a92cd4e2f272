"""A pretraining objective of one's own, defined in this file alone (no library file edited):
registered by name, trained through the same assembly as `python -m mlmjax.main` (its config's
`user_dir` this file), resumed exactly, and evaluated by `python -m mlmjax.evaluate`, which
imports this file again from the run's config.json (training/objectives/, mlmjax/user_code.py).
This module is a user's module too, so it imports at its top only what one would: the tests'
helpers are imported where they are used."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlmjax.errors import ConfigError
from mlmjax.training import objectives

Z_WEIGHT = 1e-4  # PaLM's


@objectives.register
class ZLossMLM(objectives.MaskedLM):
  """MLM with PaLM's z-loss (Chowdhery et al., 2022, section 5): Z_WEIGHT x log(Z)^2 of each
  masked slot's softmax normaliser Z, which keeps log Z near 0."""

  name = "mlm_zloss"
  sum_keys = objectives.MaskedLM.sum_keys + ("z_loss_sum",)

  def head_sums(self, outputs, batch):
    log_z = jax.nn.logsumexp(outputs["mlm_logits"].astype(jnp.float32), axis=-1)
    return {"z_loss_sum": jnp.sum(log_z ** 2 * batch["masked_weights"])}

  def head_loss(self, sums, objective, loss):
    return loss + Z_WEIGHT * sums["z_loss_sum"] / jnp.maximum(sums["mlm_count"], 1.0)

  def summarize(self, sums):
    count = max(float(sums["mlm_count"]), 1.0)
    return {**super().summarize(sums), "z_loss": float(sums["z_loss_sum"]) / count}


def test_its_loss_is_mlm_plus_the_z_loss_by_hand():
  logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 7)) * 3
  batch = {"masked_ids": jnp.array([[1, 2, 0], [3, 4, 5]]),
           "masked_weights": jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])}
  mine = objectives.get("mlm_zloss")
  sums = mine.sums({"mlm_logits": logits}, batch)
  logp = np.asarray(jax.nn.log_softmax(logits))
  weights = np.asarray(batch["masked_weights"])
  xent = -np.take_along_axis(logp, np.asarray(batch["masked_ids"])[..., None], -1)[..., 0]
  log_z = np.log(np.exp(np.asarray(logits, np.float64)).sum(-1))
  want = (xent * weights).sum() / 5 + Z_WEIGHT * (log_z ** 2 * weights).sum() / 5
  assert float(mine.loss(sums, None)) == pytest.approx(want, rel=1e-5)
  assert mine.summarize(jax.device_get(sums))["z_loss"] == pytest.approx(
      (log_z ** 2 * weights).sum() / 5, rel=1e-5)


def test_a_name_is_registered_once_and_an_unknown_one_is_refused(micro_config):
  class Again(objectives.MaskedLM):
    name = "mlm"
  with pytest.raises(ValueError, match="objective 'mlm' is registered already"):
    objectives.register(Again)
  from mlmjax.training import assembly  # pylint: disable=g-import-not-at-top
  micro_config.objective.kind = "mlm_nosuch"
  with pytest.raises(ConfigError) as e:
    assembly.Assembly.of(micro_config)
  assert str(e.value) == ("objective.kind='mlm_nosuch' is not one of clm, diffusion, electra,"
                          " mlm, mlm_zloss (one of your own: its module in user_dir, or"
                          " --user_dir=FILE)")  # this file's own among them


@pytest.mark.slow  # three short runs and an evaluation
def test_it_trains_resumes_exactly_and_evaluates(tmp_path, micro_config, caplog):
  # pylint: disable=g-import-not-at-top
  from conftest import REPO, assert_resumes_exactly, saved_state, user_env
  from mlmjax.training import train
  micro_config.objective.kind = "mlm_zloss"
  micro_config.user_dir = __file__
  straight = str(tmp_path / "run")
  train.train_and_evaluate(micro_config, straight)  # 8 steps, held out at 4 and 8
  with open(os.path.join(straight, "metrics.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
  logged = [r for r in rows if "loss" in r]
  assert [r["step"] for r in logged] == [2, 4, 6, 8]
  assert all(r["z_loss"] > 0 for r in logged)  # its own summary, every log interval
  assert [r["step"] for r in rows if "eval/z_loss" in r] == [4, 8]  # its held-out sums
  assert_resumes_exactly(micro_config, straight, str(tmp_path / "split"), 5, caplog)
  # Its gradients are its own: the same run as plain MLM ends with other parameters.
  micro_config.objective.kind = "mlm"
  plain = str(tmp_path / "plain")
  train.train_and_evaluate(micro_config, plain)
  ours, theirs = saved_state(straight), saved_state(plain)
  assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(ours["params"]),
                                                      jax.tree.leaves(theirs["params"])))
  # A command in another process reads the run back: config.json names this file, which it
  # imports before the objective is looked up.
  with open(os.path.join(straight, "config.json"), encoding="utf-8") as f:
    assert json.load(f)["user_dir"] == os.path.abspath(__file__)
  command = [sys.executable, "-m", "mlmjax.evaluate", f"--workdir={straight}", "--batches=1"]
  evaluated = subprocess.run(command, cwd=REPO, env=user_env(), capture_output=True, text=True,
                             timeout=300, check=False)
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  out = json.loads(evaluated.stdout)
  assert out["step"] == 8 and out["z_loss"] > 0 and 0 <= out["mlm_accuracy"] <= 1
