"""Masked-LM loss sums: global normalisation and the [MASK]-only accuracy."""

import jax.numpy as jnp
import numpy as np

from mlmjax.models import special_ids
from mlmjax.training.core import losses
from mlmjax.training import objectives


def test_sums_and_mask_token_accuracy():
  # 1 row, 4 slots (the last is padding); the model predicts id 7 everywhere.
  logits = jnp.zeros((1, 4, 10)).at[..., 7].set(5.0)
  ids = jnp.array([[7, 7, 8, 7]])
  weights = jnp.array([[1.0, 1.0, 1.0, 0.0]])
  # slot 1 was kept unchanged
  shown = jnp.array([[special_ids.MASK_ID, 7, special_ids.MASK_ID, special_ids.MASK_ID]])
  sums = losses.mlm_sums(logits, ids, weights, shown)
  assert float(sums["mlm_count"]) == 3 and float(sums["mlm_correct"]) == 2
  assert float(sums["mask_token_count"]) == 2 and float(sums["mask_token_correct"]) == 1
  out = objectives.get("mlm").summarize({k: float(v) for k, v in sums.items()})
  np.testing.assert_allclose(out["mlm_accuracy"], 2 / 3)
  np.testing.assert_allclose(out["mask_token_accuracy"], 1 / 2)
  np.testing.assert_allclose(out["perplexity"], np.exp(out["loss"]), rtol=1e-6)
  assert "mask_token_accuracy" not in objectives.get("mlm").summarize(
      {k: float(v) for k, v in losses.mlm_sums(logits, ids, weights).items()})
