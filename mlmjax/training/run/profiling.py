"""`train.profile_steps`: a jax.profiler trace of a few training steps, for TensorBoard's
profile plugin or Perfetto.

"100:105" traces steps 100 to 104 (the step numbers of metrics.jsonl: step N is the N-th
update) into WORKDIR/profile/plugins/profile/<timestamp>/: `*.xplane.pb` for TensorBoard,
`perfetto_trace.json.gz` for ui.perfetto.dev. The trace starts before the first of them is
dispatched and stops once the last has finished on the device (the host blocks on its
outputs: a sync point, once). Skip the first steps: they hold the compilation.
"""

from __future__ import annotations

import os
import re

import jax
from absl import logging

from mlmjax.errors import ConfigError


def parse(spec: str) -> tuple[int, int] | None:
  """"A:B" -> (A, B) with 1 <= A < B; "" -> None (off)."""
  if not spec:
    return None
  m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", spec)
  if not m or not 1 <= int(m.group(1)) < int(m.group(2)):
    raise ConfigError(f"train.profile_steps={spec!r} must be 'FIRST:END' with 1 <= FIRST < END"
                      " (steps FIRST..END-1), or '' for no profile")
  return int(m.group(1)), int(m.group(2))


class StepProfiler:
  """Starts and stops the trace around the steps of `spec`; does nothing when it is ''."""

  def __init__(self, spec: str, workdir: str):
    self.steps = parse(spec)
    self.dir = os.path.join(workdir, "profile")
    self.active = False

  def before(self, step: int) -> None:
    """Called before dispatching the update that becomes step `step`."""
    if self.steps and step == self.steps[0] and not self.active:
      logging.info("Profiling steps %d..%d into %s", self.steps[0], self.steps[1] - 1, self.dir)
      jax.profiler.start_trace(self.dir, create_perfetto_trace=True)
      self.active = True

  def after(self, step: int, outputs) -> None:
    """Called after dispatching step `step`, with its outputs (to wait for the last one)."""
    if self.active and step >= self.steps[1] - 1:
      jax.block_until_ready(outputs)  # note: a host-device sync point, once
      self.stop()

  def stop(self) -> None:
    if self.active:
      jax.profiler.stop_trace()
      self.active = False
