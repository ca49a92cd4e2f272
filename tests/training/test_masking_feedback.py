"""Adaptive masking's feedback participant: the per-token loss table and its weights."""

import numpy as np

from mlmjax.training.run import masking_feedback


def _metrics(loss, count):
  return {"token_loss_sum": np.asarray(loss, np.float64),
          "token_count": np.asarray(count, np.float64)}


def test_table_refreshes_on_schedule_and_weights_follow_the_loss():
  table = masking_feedback.TokenLossFeedback(vocab_size=10, every_steps=4, decay=0.5)
  assert table.per_token_loss and table.weights_at(100) is None  # uniform before feedback
  loss, count = np.zeros(10), np.zeros(10)
  loss[[5, 6]], count[[5, 6]] = [8.0, 2.0], [2.0, 2.0]  # mean loss 4 for id 5, 1 for id 6
  for step in (1, 2, 3):
    assert not table.syncs_at(step)
    table.after_step(step, _metrics(loss / 3, count / 3), applied=True)
  assert table.weights_at(3) is None
  assert table.syncs_at(4)  # the loop hands over step 4 before taking the next batch
  table.after_step(4, _metrics(np.full(10, 1e9), np.ones(10)), applied=False)  # skipped
  # Seen ids get their mean loss; unseen ones the average estimate; specials never. The table
  # applies to the batches of step 5 on (batch index 4), not to earlier ones.
  assert table.weights_at(3) is None
  np.testing.assert_allclose(table.weights_at(4), [0] * 5 + [4.0, 1.0, 2.5, 2.5, 2.5])
  loss[[5, 6]] = [0.0, 6.0]
  for step in (5, 6, 7, 8):
    table.after_step(step, _metrics(loss / 4, count / 4), applied=True)
  # An exponential moving average over refreshes.
  np.testing.assert_allclose(table.weights_at(8)[5:7], [0.5 * 4 + 0.5 * 0, 0.5 * 1 + 0.5 * 3])
  # What a checkpoint at step 8 holds gives the same weights from step 8 on.
  restored = masking_feedback.TokenLossFeedback(vocab_size=10, every_steps=4, decay=0.5)
  restored.load({k: v.copy() for k, v in table.state().items()}, steps_done=8)
  np.testing.assert_array_equal(restored.weights_at(8), table.weights_at(8))


def test_no_feedback_does_nothing():
  none = masking_feedback.NoFeedback()
  assert not none.per_token_loss and not none.syncs_at(100) and none.weights_at(5) is None
  none.after_step(1, {}, applied=True)
  assert none.state() == {}
