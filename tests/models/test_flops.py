"""models/flops.py: the training FLOPs per token behind every MFU figure (training/run/metrics.py's
log, mlmjax.bench, mlmjax.compile's model FLOPs, docs/performance.md), checked against
BERT-base counted by hand here with the standard definition.

The standard count (Kaplan et al. 2020, section 2.1; PaLM, appendix B) of a training step, per
token: 6 N for the matmuls of the N non-embedding weights (2 FLOPs a multiply-add forward, twice
that backward: the gradients of the activations and of the weights), plus 12 L T D for
attention's two matmuls (scores Q K^T and the context P V, each 2 T D a token and layer forward,
x 3 for training). An MLM's vocabulary projection runs on the masked slots only (P of the T
positions of a row), so its share is 6 (P / T) (D^2 + D V): the head's D x D transform and the
decoder tied to the token embedding. Embedding lookups are gathers, not matmuls, and are left
out, as are biases, LayerNorm, softmax, GELU and the NSP head (per row, not per token): well
under 1% at BERT sizes."""

import jax
import pytest

from mlmjax.configs import bert
from mlmjax.models import flops
from mlmjax.parallel import sharding
from mlmjax.training import assembly

# BERT-base (configs/bert.py:base): layers, hidden, MLP, vocabulary.
L, D, F, V = 12, 768, 3072, 30522
# Its two phases' rows (train.phases): (seq_len, max_predictions_per_seq).
PHASES = ((128, 20), (512, 80))


def _by_hand(seq_len: int, predictions: int) -> float:
  """BERT-base's training FLOPs per token, the standard count (module docstring)."""
  n = L * (4 * D * D + 2 * D * F)  # per layer: Q, K, V and output (D x D); MLP in and out
  attention = 12 * L * seq_len * D  # 3 x (2 T D scores + 2 T D context) per layer
  head = 6 * predictions / seq_len * (D * D + D * V)  # on the masked slots only
  return 6 * n + attention + head


@pytest.fixture(scope="module")
def parts():
  return assembly.Assembly.of(bert.get_config("base"))


def test_the_hand_count_is_bert_base():
  """The hand count's parts as published: 85M non-embedding weights (BERT's 110M less its
  23.8M of embeddings and some biases), and the totals the formula below is compared with."""
  assert L * (4 * D * D + 2 * D * F) == 84_934_656
  assert _by_hand(128, 20) == 6 * 84_934_656 + 14_155_776 + 22_528_800 == 546_292_512
  assert _by_hand(512, 80) == 6 * 84_934_656 + 56_623_104 + 22_528_800 == 588_759_840


def test_the_hand_count_s_weights_are_the_model_s(parts):
  """The N and the head of the hand count are the weights BERT-base has: every matmul kernel of
  its blocks, the head's transform, and the decoder tied to the token embedding (no decoder
  weight of its own). A model that gained a weight matrix would need flops.py to count it."""
  assert (parts.settings.model.num_layers, parts.settings.model.hidden_size,
          parts.settings.model.intermediate_size, parts.settings.tokenizer.vocab_size,
          parts.settings.model.mlp) == (L, D, F, V, "gelu")
  mesh = sharding.make_mesh(parts.settings.mesh, jax.devices()[:1])
  params = parts.setup(V, mesh).abstract_state["params"]
  kernels = [
      (jax.tree_util.keystr(path), x.size)
      for path, x in jax.tree_util.tree_flatten_with_path(params["blocks"])[0]
      if jax.tree_util.keystr(path).endswith("kernel']")]
  assert len(kernels) == 4 * L  # qkv, out, mlp_in, mlp_out
  assert sum(size for _, size in kernels) == L * (4 * D * D + 2 * D * F)
  assert params["mlm_transform"]["kernel"].shape == (D, D)
  assert params["token_embedding"].shape == (V, D) and params["mlm_bias"].shape == (V,)
  assert not any("decoder" in jax.tree_util.keystr(p)
                 for p, _ in jax.tree_util.tree_flatten_with_path(params)[0])


@pytest.mark.parametrize("seq_len,predictions", PHASES)
def test_bert_base_training_flops_per_token_are_the_standard_count(parts, seq_len, predictions):
  """flops.py's count equals the hand count to the last FLOP, at both BERT phases (attention's
  share grows with the row, the head's stays at P / T): the 3 of the backward pass, attention's
  two matmuls and the head on masked slots only are each several percent of the total, so a
  factor lost or added anywhere fails here. The run's own count (Assembly.flops_per_token,
  what the training loop logs MFU with) takes the phase's row length and prediction slots."""
  want = _by_hand(seq_len, predictions)
  got = flops.train_flops_per_token(parts.settings.model, V, seq_len, predictions)
  assert got == pytest.approx(want, rel=1e-12)
  assert parts.flops_per_token(V, seq_len, predictions) == pytest.approx(want, rel=1e-12)
  # The forward pass of the stack alone: a third of the training count, head excluded.
  stack = flops.encoder_flops_per_token(parts.settings.model, seq_len)
  assert 3 * stack == pytest.approx(want - 6 * predictions / seq_len * (D * D + D * V),
                                    rel=1e-12)


def test_the_run_s_count_defaults_to_its_row_length_and_prediction_slots(parts):
  """Without a phase's shapes: data.seq_len and masking.max_predictions_per_seq (128, 20 for
  BERT-base), the slots the head runs on, not the 15% of 128 tokens masked on average."""
  assert (parts.settings.data.seq_len, parts.settings.masking.max_predictions_per_seq) == (128, 20)
  assert parts.flops_per_token(V) == pytest.approx(_by_hand(128, 20), rel=1e-12)
