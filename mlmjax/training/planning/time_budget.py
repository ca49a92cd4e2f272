"""A run given a training-time budget, `train.budget_hours` (Cramming, Geiping & Goldstein 2022:
at a fixed budget, tie the schedule to the time, not to a guessed number of steps).

    schedule position = max(step, train.steps x spent / budget)

The learning rate is the step schedule's (warmup, decay: optimizer.py) at that position, so
warmup and decay take their shares of the budget whatever the machine's speed, and train.steps
becomes a cap: a run ends when its budget is spent (or at train.steps, if that comes first),
with a final evaluation and checkpoint. Resumed, it goes on with the budget left: the time
spent is saved in every checkpoint.

What counts: wall-clock time in the training loop, the input pipeline's waits included, less
every compilation (the compile durations jax reports through jax.monitoring, whenever they
happen: the first step, a phase's new shapes) and less the held-out evaluations. Checkpoint
saves count (they are asynchronous; the training pays for them).

Each step is given the share spent as a [B] batch entry (`KEY`: each process's rows carry its
own clock's) and uses, and reports, the smallest over the devices, so that every process of a
multi-host run reads the same value and stops after the same step. The smallest, because a
process's clock also counts the time it waits for the others to finish compiling: the process
that compiled longest waited least.
"""

from __future__ import annotations

import contextlib
import threading
import time

import jax
import numpy as np

from mlmjax.training.core import steps

KEY = steps.BUDGET_SPENT  # the batch entry and the metric
# jax.monitoring's durations of a compilation (tracing, lowering, XLA).
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_compile_seconds = 0.0  # this process's total so far
_listening = False  # _on_duration registered with jax.monitoring
_listening_lock = threading.Lock()


def _on_duration(event: str, seconds: float, **_) -> None:
  global _compile_seconds
  if event in _COMPILE_EVENTS:
    _compile_seconds += seconds


def _listen() -> None:
  """Registers _on_duration with jax.monitoring, once per process: when the first budget is
  made, not when this module is imported (a process without a budget keeps no listener)."""
  global _listening
  with _listening_lock:
    if not _listening:
      jax.monitoring.register_event_duration_secs_listener(_on_duration)
      _listening = True


def compile_seconds() -> float:
  """Seconds this process has spent compiling since its first TimeBudget was made (0 before)."""
  return _compile_seconds


class TimeBudget:
  """The budget and the training time spent of it (the module docstring says what counts)."""

  def __init__(self, hours: float, clock=time.monotonic):
    _listen()
    self.seconds = hours * 3600.0
    self._clock = clock
    self._spent_before = 0.0  # in earlier runs of the same workdir
    self._mark: tuple[float, float] | None = None  # (clock, compile seconds) at start()
    self._excluded = 0.0  # evaluations since start()

  def start(self) -> None:
    """Counting starts now (after the restore and set-up)."""
    self._mark = (self._clock(), compile_seconds())
    self._excluded = 0.0

  def spent(self) -> float:
    """Training seconds spent, earlier runs included."""
    if self._mark is None:
      return self._spent_before
    clock, compiled = self._mark
    return self._spent_before + (self._clock() - clock) - (compile_seconds() - compiled) - (
        self._excluded)

  def fraction(self) -> float:
    return self.spent() / self.seconds

  @contextlib.contextmanager
  def paused(self):
    """Time inside is not counted (compilations inside are already left out)."""
    clock, compiled = self._clock(), compile_seconds()
    try:
      yield
    finally:
      self._excluded += (self._clock() - clock) - (compile_seconds() - compiled)

  def batch_entry(self, local_rows: int) -> dict[str, np.ndarray]:
    """{KEY: [local_rows]} for this process's rows of the next step's batch."""
    return {KEY: np.full((local_rows,), self.fraction(), np.float32)}

  def state(self) -> dict:
    return {"spent_seconds": np.float64(self.spent())}

  def load(self, state: dict | None) -> None:
    """From a checkpoint's host state (none in a run's first checkpoint before budgets)."""
    self._spent_before = float(state["spent_seconds"]) if state else 0.0
