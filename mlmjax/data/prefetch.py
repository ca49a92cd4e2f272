"""Device-side prefetch: the next training batches are built and put on the device mesh by a
background thread while the device computes the current step.

At most `depth` batches wait on the devices (one more may be in the making), so memory stays
small and fixed. The prefetcher stands in for the host iterator in checkpoints: its position is
that of the last batch handed to the training loop, not of what was prefetched, so a resumed
run continues with exactly the next batch. It also counts how long the loop waited for input.

Masks that follow training feedback (adaptive masking) must not be made ahead of the loop:
the thread then only builds the host batch, and the loop's own thread masks it and puts it on
the devices when it takes it (after handing over the metrics the masks depend on). So batches
and masks are the same with and without prefetch.
"""

from __future__ import annotations

import queue
import threading
import time

from mlmjax.data import pipeline
from mlmjax.parallel import sharding

_POLL_SECONDS = 0.1  # how often a blocked producer checks whether it should stop


class DevicePrefetcher:
  """Iterates device batches of a `pipeline.ShardedIterator` (depth 0: built on demand)."""

  def __init__(self, host: pipeline.ShardedIterator, mesh, depth: int):
    self.host, self.mesh, self.depth = host, mesh, depth
    self._state = host.get_state()  # the position of the batches handed out
    self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    self._waited, self._since = 0.0, time.perf_counter()

  # ---- what the checkpoint sees ----------------------------------------------------------------
  def set_state(self, state: dict) -> None:
    """A restored position; only before the first batch."""
    assert self._thread is None, "set_state after prefetching started"
    self.host.set_state(state)
    self._state = self.host.get_state()

  def global_state(self) -> dict:
    return pipeline.gather(self._state)

  # ---- batches --------------------------------------------------------------------------------
  def _build(self):
    """One batch as far as it may be built ahead: (device batch or host item, position)."""
    item = self.host.next_unfinished()
    state = self.host.get_state()
    if self.host.masks_late:
      return item, state
    return sharding.to_device(self.host.finish(item), self.mesh), state

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

  def __next__(self) -> dict:
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
    batch, self._state = built
    if self.host.masks_late:
      batch = sharding.to_device(self.host.finish(batch), self.mesh)
    self._waited += time.perf_counter() - t
    return batch

  def take_wait_fraction(self) -> float:
    """The fraction of wall time since the last call that the loop spent waiting for input."""
    now = time.perf_counter()
    fraction = self._waited / max(now - self._since, 1e-9)
    self._waited, self._since = 0.0, now
    return fraction

  def close(self) -> None:
    """Stops the thread and the host iterator's workers."""
    self._stop.set()
    if self._thread is not None:
      while self._thread.is_alive():
        try:  # unblock a producer waiting for room
          self._queue.get(timeout=_POLL_SECONDS)
        except queue.Empty:
          pass
      self._thread = None
    self.host.close()
