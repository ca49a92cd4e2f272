"""Sequence-length phases: BERT trained 90% of its steps on 128-token rows, then 10% on 512.

`config.train.phases` is a tuple of (fraction of train.steps, seq_len, max_predictions_per_seq);
empty means one phase with `data.seq_len` and `masking.max_predictions_per_seq`. The model, the
optimizer state and the step carry over a switch; the input pipeline is rebuilt for the new
shapes (with its own seed, so it does not replay the first phase's document order).
"""

from __future__ import annotations

import dataclasses

import ml_collections

# Data seeds of successive phases are this far apart.
_PHASE_SEED_STRIDE = 7919


@dataclasses.dataclass(frozen=True)
class Phase:
  index: int
  start: int  # steps done when the phase begins
  end: int  # steps done when it ends
  seq_len: int
  max_predictions: int


def plan(config) -> list[Phase]:
  """The run's phases; their ends are fractions of train.steps (the last one ends there)."""
  total = config.train.steps
  spec = tuple(config.train.phases) or (
      (1.0, config.data.seq_len, config.masking.max_predictions_per_seq),)
  phases, start, cumulative = [], 0, 0.0
  for i, (fraction, seq_len, max_predictions) in enumerate(spec):
    cumulative += fraction
    end = total if i == len(spec) - 1 else min(total, round(cumulative * total))
    phases.append(Phase(i, start, end, int(seq_len), int(max_predictions)))
    start = end
  return phases


def phase_at(phases: list[Phase], steps_done: int) -> Phase:
  """The phase that trains step `steps_done + 1` (the last phase once training is over)."""
  for phase in phases:
    if steps_done < phase.end:
      return phase
  return phases[-1]


def phase_config(config, phase: Phase) -> ml_collections.ConfigDict:
  """A copy of `config` with the phase's row length, prediction slots and data seed."""
  out = ml_collections.ConfigDict(config.to_dict())
  out.data.seq_len = phase.seq_len
  out.masking.max_predictions_per_seq = phase.max_predictions
  out.seed = config.seed + _PHASE_SEED_STRIDE * phase.index
  return out
