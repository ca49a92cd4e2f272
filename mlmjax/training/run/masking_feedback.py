"""Masking feedback from training: a participant of the train loop, and the masker's weights.

The loop calls every participant the same way (`after_step`, `state`, `load`); `NoFeedback`
does nothing, so a run without adaptive masking takes the same path as one with it.

Adaptive masking (`masking.strategy='adaptive'`, also inside a mixture): every train step
reports, per vocabulary id, the summed loss and count of its masked slots. The host adds these
up and every `masking.adaptive_every_steps` steps folds them into a running estimate (an
exponential moving average over refreshes, weight `masking.adaptive_decay` on the old value).
The masker then selects tokens with probability proportional to their estimated loss: what the
model finds hard gets masked more.

A table made after step N applies to the masks of the batches that train steps N + 1 on, keyed
by the step, not by when it arrived (the loop hands over step N's metrics before it takes the
next batch, see `syncs_at`). It is saved in every checkpoint, so a resumed run masks
exactly as an uninterrupted one.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data.masking import settings as masking_settings
from mlmjax.models import special_ids


class NoFeedback:
  """The do-nothing participant: uniform weights, no state."""

  per_token_loss = False  # whether the train step must report per-token loss sums

  def weights_at(self, step: int) -> np.ndarray | None:
    """[V] selection weights for the masks of batch `step` (0-based), None = uniform."""
    del step
    return None

  def syncs_at(self, steps_done: int) -> bool:
    """Whether the loop must hand over step `steps_done`'s metrics before it takes the next
    batch (whose masks then depend on them)."""
    del steps_done
    return False

  def after_step(self, steps_done: int, metrics: dict, applied: bool) -> None:
    """`metrics`: the host copy of a finished step's metrics; `applied`: False when its update
    was skipped (non-finite), so its numbers mean nothing."""

  def state(self) -> dict:
    return {}

  def load(self, state: dict, steps_done: int) -> None:
    del state, steps_done


class TokenLossFeedback(NoFeedback):

  per_token_loss = True

  def __init__(self, vocab_size: int, every_steps: int, decay: float):
    self.every_steps = every_steps
    self.decay = decay
    self.estimate = np.zeros(vocab_size, np.float64)  # running loss per id
    self.seen = np.zeros(vocab_size, bool)  # ids with an estimate
    self.loss_sum = np.zeros(vocab_size, np.float64)  # since the last refresh
    self.count = np.zeros(vocab_size, np.float64)
    self._table: tuple[int, np.ndarray] | None = None  # (first step it applies to, weights)

  def weights_at(self, step: int) -> np.ndarray | None:
    if self._table is None or step < self._table[0]:
      return None
    return self._table[1]

  def syncs_at(self, steps_done: int) -> bool:
    return steps_done % self.every_steps == 0

  def after_step(self, steps_done: int, metrics: dict, applied: bool) -> None:
    if applied:
      self.loss_sum += metrics["token_loss_sum"]
      self.count += metrics["token_count"]
    if steps_done % self.every_steps == 0:
      self._refresh()
      self._table = (steps_done, self._weights())

  def _refresh(self) -> None:
    hit = self.count > 0
    mean = self.loss_sum[hit] / self.count[hit]
    old = np.where(self.seen[hit], self.estimate[hit], mean)  # a new id starts at its mean
    self.estimate[hit] = self.decay * old + (1.0 - self.decay) * mean
    self.seen |= hit
    self.loss_sum[:] = 0.0
    self.count[:] = 0.0

  def _weights(self) -> np.ndarray | None:
    """[V] the loss estimate; ids never predicted yet get the average one (so they are not
    starved); special ids 0. None (uniform) before any id has an estimate."""
    if not self.seen.any():
      return None
    w = np.where(self.seen, self.estimate, self.estimate[self.seen].mean())
    w[:special_ids.NUM_SPECIAL] = 0.0
    return w

  def state(self) -> dict:
    return {"estimate": self.estimate, "seen": self.seen, "loss_sum": self.loss_sum,
            "count": self.count}

  def load(self, state: dict, steps_done: int) -> None:
    for name, value in state.items():
      getattr(self, name)[...] = np.asarray(value)
    weights = self._weights()
    self._table = None if weights is None else (steps_done, weights)


def for_settings(masking: masking_settings.Settings, vocab_size: int) -> NoFeedback:
  """The run's feedback participant."""
  if "adaptive" not in masking.in_use():
    return NoFeedback()
  return TokenLossFeedback(vocab_size, masking.adaptive_every_steps, masking.adaptive_decay)
