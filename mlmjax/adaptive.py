"""Adaptive masking's feedback loop: a per-token-id MLM loss estimate from training.

Every train step reports, per vocabulary id, the summed loss and count of its masked slots.
The host adds these up, and every `masking.adaptive_every_steps` steps folds them into a
running estimate (an exponential moving average over refreshes, weight
`masking.adaptive_decay` on the old value). The masker then selects tokens with probability
proportional to their estimated loss: what the model finds hard gets masked more.

The table (estimate and partial sums) is saved in every checkpoint, and refreshes happen at
fixed steps, so a resumed run masks exactly as an uninterrupted one.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data import masking_settings
from mlmjax.data import tokenizer as tokenizer_lib


class TokenLossTable:

  def __init__(self, vocab_size: int, every_steps: int, decay: float):
    self.every_steps = every_steps
    self.decay = decay
    self.estimate = np.zeros(vocab_size, np.float64)  # running loss per id
    self.seen = np.zeros(vocab_size, bool)  # ids with an estimate
    self.loss_sum = np.zeros(vocab_size, np.float64)  # since the last refresh
    self.count = np.zeros(vocab_size, np.float64)

  @classmethod
  def for_config(cls, masking_config, vocab_size: int) -> "TokenLossTable | None":
    """The run's table, or None when no adaptive masking is configured."""
    if "adaptive" not in masking_settings.strategies_in_use(masking_config):
      return None
    return cls(vocab_size, masking_config.adaptive_every_steps, masking_config.adaptive_decay)

  def add(self, loss_sum_v: np.ndarray, count_v: np.ndarray) -> None:
    self.loss_sum += loss_sum_v
    self.count += count_v

  def due(self, steps_done: int) -> bool:
    return steps_done % self.every_steps == 0

  def refresh(self) -> None:
    hit = self.count > 0
    mean = self.loss_sum[hit] / self.count[hit]
    old = np.where(self.seen[hit], self.estimate[hit], mean)  # a new id starts at its mean
    self.estimate[hit] = self.decay * old + (1.0 - self.decay) * mean
    self.seen |= hit
    self.loss_sum[:] = 0.0
    self.count[:] = 0.0

  def weights(self) -> np.ndarray:
    """[V] selection weights: the loss estimate; ids never predicted yet get the average one
    (so they are not starved); special ids 0. All ones before the first refresh."""
    if not self.seen.any():
      w = np.ones_like(self.estimate)
    else:
      w = np.where(self.seen, self.estimate, self.estimate[self.seen].mean())
    w[:tokenizer_lib.NUM_SPECIAL] = 0.0
    return w

  def state(self) -> dict[str, np.ndarray]:
    return {"estimate": self.estimate, "seen": self.seen, "loss_sum": self.loss_sum,
            "count": self.count}

  def load(self, state: dict[str, np.ndarray]) -> None:
    for name, value in state.items():
      getattr(self, name)[...] = np.asarray(value)
