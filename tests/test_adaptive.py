"""Adaptive masking's per-token loss table."""

import numpy as np

from mlmjax import adaptive


def test_table_refreshes_on_schedule_and_weights_follow_the_loss():
  table = adaptive.TokenLossTable(vocab_size=10, every_steps=4, decay=0.5)
  np.testing.assert_array_equal(table.weights(), [0] * 5 + [1] * 5)  # uniform before feedback
  loss, count = np.zeros(10), np.zeros(10)
  loss[[5, 6]], count[[5, 6]] = [8.0, 2.0], [2.0, 2.0]  # mean loss 4 for id 5, 1 for id 6
  table.add(loss, count)
  assert not table.due(3) and table.due(4)
  table.refresh()
  # Seen ids get their mean loss; unseen ones the average estimate; specials never.
  np.testing.assert_allclose(table.weights(), [0] * 5 + [4.0, 1.0, 2.5, 2.5, 2.5])
  loss[[5, 6]] = [0.0, 6.0]
  table.add(loss, count)
  table.refresh()  # exponential moving average over refreshes
  np.testing.assert_allclose(table.weights()[5:7], [0.5 * 4 + 0.5 * 0, 0.5 * 1 + 0.5 * 3])
  restored = adaptive.TokenLossTable(vocab_size=10, every_steps=4, decay=0.5)
  restored.load({k: v.copy() for k, v in table.state().items()})
  np.testing.assert_array_equal(restored.weights(), table.weights())
