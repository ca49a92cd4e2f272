"""Prefetch: the next items of an iterator are made by a background thread while the loop
works on the current one (for training: batches built and put on the device mesh while the
device computes the current step).

At most `depth` items wait (one more may be in the making), so memory stays small and fixed.
Each item is made in two parts: `ahead(item)` on the thread, and `on_take(item, position)` on
the loop's thread when the loop takes it, for work that must wait for the loop (pipeline.py's
late masks: the masks of adaptive masking follow what the previous step fed back). The
prefetcher stands in for its source in checkpoints: its position is that of the last item
handed to the loop, not of what was prefetched, so a resumed run continues with exactly the
next item. It also counts how long the loop waited for input.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

_POLL_SECONDS = 0.1  # how often a blocked producer checks whether it should stop


def _same(item, position=None):
  del position
  return item


class Prefetcher:
  """Iterates the items of `source` (depth 0: made on demand). `source` has get_state(),
  set_state(state), close() and, for checkpoints, `gather(local state)` made global."""

  def __init__(self, source, depth: int, ahead: Callable[[Any], Any] = _same,
               on_take: Callable[[Any, dict], Any] = _same):
    self.source, self.depth, self.ahead, self.on_take = source, depth, ahead, on_take
    self._state = source.get_state()  # the position of the items handed out
    self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    self._waited, self._since = 0.0, time.perf_counter()

  # ---- what the checkpoint sees ----------------------------------------------------------------
  def set_state(self, state: dict) -> None:
    """A restored position; only before the first item."""
    assert self._thread is None, "set_state after prefetching started"
    self.source.set_state(state)
    self._state = self.source.get_state()

  def get_state(self) -> dict:
    return self._state

  def global_state(self) -> dict:
    return self.source.gather(self._state)

  # ---- items ----------------------------------------------------------------------------------
  def _build(self):
    """One item as far as it may be made ahead, and the position after it."""
    item = self.ahead(next(self.source))
    return item, self.source.get_state()

  def _produce(self) -> None:
    try:
      while not self._stop.is_set():
        built = self._build()
        while not self._stop.is_set():
          try:
            self._queue.put((built, None), timeout=_POLL_SECONDS)
            break
          except queue.Full:
            pass
    except BaseException as e:  # pylint: disable=broad-except  (handed to the loop's thread)
      self._queue.put((None, e))

  def __iter__(self):
    return self

  def __next__(self):
    t = time.perf_counter()
    if self.depth == 0:
      built = self._build()
    else:
      if self._thread is None:
        self._thread = threading.Thread(target=self._produce, name="device_prefetch",
                                        daemon=True)
        self._thread.start()
      built, error = self._queue.get()
      if error is not None:
        raise error
    item, self._state = built
    item = self.on_take(item, self._state)
    self._waited += time.perf_counter() - t
    return item

  def take_wait_fraction(self) -> float:
    """The fraction of wall time since the last call that the loop spent waiting for input."""
    now = time.perf_counter()
    fraction = self._waited / max(now - self._since, 1e-9)
    self._waited, self._since = 0.0, now
    return fraction

  def close(self) -> None:
    """Stops the thread and the source (a pipeline's grain workers)."""
    self._stop.set()
    if self._thread is not None:
      while self._thread.is_alive():
        try:  # unblock a producer waiting for room
          self._queue.get(timeout=_POLL_SECONDS)
        except queue.Empty:
          pass
      self._thread = None
    self.source.close()
