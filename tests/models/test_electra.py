"""ELECTRA: the generator fills only masked slots, the labels mark exactly what changed, the
loss is the generator's MLM plus 50 x the discriminator's; the preset trains and resumes."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from mlmjax.configs import electra as electra_config
from conftest import assert_resumes_exactly, micro, saved_state
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import tasks
from mlmjax.finetuning import trainer
from mlmjax.models import electra
from mlmjax.models.settings import ModelSettings
from mlmjax.training import objectives
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training import train
from synthetic_steps import synthetic_batches


def _micro(micro_config):
  c = micro_config
  c.objective.kind = "electra"
  c.objective.generator_fraction = 0.5
  c.model.embedding_size = 16
  c.masking.update(mask_token_prob=0.85, random_token_prob=0.0)
  return c


def test_generator_replaces_only_masked_slots_and_labels_mark_what_changed(micro_config):
  c = _micro(micro_config)
  model = electra.ElectraForPretraining(ModelSettings.from_config(c.model),
                                        c.objective.generator_fraction, 512, nnx.Rngs(params=0))
  batch = {k: jnp.asarray(v) for k, v in synthetic_batches(1, batch_size=4)[0].items()}
  # Compiled, not op by op: one program instead of hundreds of small ones.
  out = nnx.jit(lambda m, b, k: m(b, dropout_key=k))(model, batch, jax.random.PRNGKey(3))
  ids, corrupted = np.asarray(batch["input_ids"]), np.asarray(out["rtd_input_ids"])
  original = ids.copy()
  weights = np.asarray(batch["masked_weights"]) > 0
  for r in range(len(ids)):
    p = np.asarray(batch["masked_positions"])[r][weights[r]]
    original[r, p] = np.asarray(batch["masked_ids"])[r][weights[r]]
    outside = np.ones(ids.shape[1], bool)
    outside[p] = False
    np.testing.assert_array_equal(corrupted[r, outside], ids[r, outside])  # only masked slots
    assert corrupted[r, p].min() >= 5  # no special token is ever sampled
  np.testing.assert_array_equal(np.asarray(out["rtd_labels"]), (corrupted != original))
  assert 0 < out["rtd_labels"].sum() <= weights.sum()
  # The loss: the generator's mean MLM cross-entropy + 50 x the mean per-token binary one.
  sums = jax.jit(objectives.get("electra").sums)(out, batch)
  logp = jax.nn.log_softmax(out["mlm_logits"], -1)
  mlm = -np.sum(np.take_along_axis(logp, batch["masked_ids"][..., None], -1)[..., 0] * weights)
  mlm /= weights.sum()
  real = np.asarray(batch["segment_ids"]) > 0
  logits, labels = np.asarray(out["rtd_logits"], np.float64), np.asarray(out["rtd_labels"])
  bce = -(labels * np.log(1 / (1 + np.exp(-logits)))
          + (1 - labels) * np.log(1 - 1 / (1 + np.exp(-logits))))
  want = mlm + 50.0 * (bce * real).sum() / real.sum()
  np.testing.assert_allclose(float(objectives.get("electra").loss(sums, c.objective)), want,
                             rtol=1e-5)
  # The discriminator encodes the clean input for fine-tuning and export.
  assert nnx.eval_shape(lambda m, b: m.encode(b), model, batch).shape == (
      4, 32, c.model.hidden_size)


@pytest.fixture(scope="module")
def electra_run(tokenizer_path, tmp_path_factory):
  """The micro ELECTRA run (8 steps): (its workdir, its final eval metrics)."""
  workdir = str(tmp_path_factory.mktemp("electra") / "straight")
  return workdir, train.train_and_evaluate(_micro(micro(tokenizer_path)), workdir)


@pytest.mark.slow
def test_electra_trains_and_resumes_exactly(tmp_path, micro_config, caplog, electra_run):
  c = _micro(micro_config)
  preset = electra_config.get_config("small")
  assert (preset.objective.discriminator_weight, preset.model.embedding_size) == (50.0, 128)
  straight, metrics = electra_run
  split = str(tmp_path / "split")
  for key in ("eval/rtd_accuracy", "eval/rtd_precision", "eval/rtd_recall",
              "eval/rtd_replaced_fraction", "eval/mlm_accuracy"):
    assert 0.0 <= metrics[key] <= 1.0, key
  assert 0.0 < metrics["eval/rtd_replaced_fraction"] < 0.15
  a, _ = assert_resumes_exactly(c, straight, split, 5, caplog)
  assert set(a["params"]) >= {"generator", "discriminator", "token_embedding", "rtd_out"}


@pytest.mark.slow
def test_electra_discriminator_fine_tunes(tmp_path, electra_run):
  """The fine-tuning command's encoder is ELECTRA's discriminator, loaded from the checkpoint
  as it is (a learning rate of 1e-12 leaves it unchanged)."""
  pretrained, _ = electra_run
  config = finetune_config.get_config()
  config.data.update(seq_len=32, max_train_examples=32)
  config.train.update(epochs=1.0, batch_size=16, log_every_steps=1)
  config.optimizer.update(learning_rate=1e-12)
  result = trainer.finetune(config, pretrained, tasks.load("kjv_testament"),
                            str(tmp_path / "finetuned"))
  assert (result["init"], result["pretrained_step"], result["steps"]) == ("pretrained", 8, 2)
  assert 0.0 <= result["dev"]["accuracy"] <= 1.0
  checkpoints = workdir_lib.Workdir(str(tmp_path / "finetuned")).checkpoints
  encoder = ocp.StandardCheckpointer().restore(os.path.join(checkpoints, "2", "state"))[
      "params"]["encoder"]
  pre = saved_state(pretrained)["params"]
  def flat(tree):  # {"discriminator/blocks/0/...": array}; raw restores key layers by str
    return {"/".join(str(k.key) for k in path): x
            for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
  encoder, pre = flat(encoder), flat(pre)
  assert encoder.keys() == pre.keys()  # the whole pretraining model: generator included
  for name in pre:
    np.testing.assert_allclose(encoder[name], pre[name], atol=1e-8, err_msg=name)
