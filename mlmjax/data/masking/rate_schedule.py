"""The mask rate as a function of the training step: `masking.mask_rate_schedule`.

A schedule is a few segments of steps, each going from one rate to another ('constant',
'linear' or 'cosine'); training/planning/phases.py makes them from the config (one segment over the
whole run, or one per phase that names its own rates). The rate of a step is a pure function
of the step, so masks stay a pure function of (seed, step, example) and resume exactly.
"""

from __future__ import annotations

import dataclasses
import math

SHAPES = ("constant", "linear", "cosine")


@dataclasses.dataclass(frozen=True)
class Segment:
  start: int  # steps done when it begins
  end: int  # steps done when it ends
  rate_start: float  # the rate at the start of its ramp (steps done)
  rate_end: float  # the rate at the end of its ramp
  # The steps over which the rate goes from rate_start to rate_end: the segment's own, or a
  # longer run-long ramp of which the segment is a piece (None: start and end).
  ramp: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class RateSchedule:
  """Picklable (grain may copy the masker that holds it into worker processes)."""

  segments: tuple[Segment, ...]
  shape: str = "linear"

  def at(self, steps_done: int) -> float:
    """The mask rate of the batch that trains step `steps_done + 1` (the masker's `step`)."""
    seg = self.segments[-1]
    for s in self.segments:
      if steps_done < s.end:
        seg = s
        break
    if self.shape == "constant" or seg.rate_start == seg.rate_end:
      return seg.rate_start
    first, last = seg.ramp or (seg.start, seg.end)
    progress = min(max((steps_done - first) / max(last - first, 1), 0.0), 1.0)
    if self.shape == "cosine":
      progress = (1.0 - math.cos(math.pi * progress)) / 2.0
    return seg.rate_start + (seg.rate_end - seg.rate_start) * progress

  def peak(self, start: int, end: int) -> float:
    """The highest rate of the batches that train steps start+1..end (every shape is
    monotone within a segment, so the first and last batch of each segment piece decide)."""
    done = {start, max(end - 1, start)}
    done.update(s.start for s in self.segments if start < s.start < end)
    done.update(s.end - 1 for s in self.segments if start < s.end <= end)
    return max(self.at(d) for d in done)
