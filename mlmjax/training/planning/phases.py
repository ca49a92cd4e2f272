"""Training phases: BERT trained 90% of its steps on 128-token rows, then 10% on 512; the 2025
recipes also grow the batch (mmBERT), raise the rotary base with the length (ModernBERT's
context extension) and anneal the mask rate (30% -> 15% -> 5%) phase by phase.

`config.train.phases` is a tuple of (fraction of train.steps, seq_len, max_predictions_per_seq)
with an optional 4th item, a dict of what else the phase changes (batch size, rotary base, mask
rates, objective): each typed, with its rule and its meaning, in training/settings.py's PhaseSpec.

Empty means one phase with `data.seq_len` and `masking.max_predictions_per_seq`. The model,
the optimizer state and the step carry over a switch; the input pipeline is rebuilt for the new
shapes (with its own seed, so it does not replay the first phase's document order), and the
train step for the new rotary base.

`plan(settings)` parses train.phases into a `Plan`, once at the start of a run, of a compile
and of an evaluation; everything below takes the plan (or a phase of it), never the tuples.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlmjax.data import masking
from mlmjax.training import objectives
from mlmjax.training.run_settings import RunSettings
from mlmjax.training.settings import PhaseSpec

# Data seeds of successive phases are this far apart.
_PHASE_SEED_STRIDE = 7919


@dataclasses.dataclass(frozen=True)
class Phase:
  """What a phase changes of the run: the shapes of its batches, its data seed and its rotary
  base. The input (data/run_input.py) and the steps (train.py) take it as it is."""

  index: int
  start: int  # steps done when the phase begins
  end: int  # steps done when it ends
  seq_len: int
  # Prediction slots: those configured, fewer if the rates never need them; a diffusion
  # phase's rates reach 1, so it has one per position.
  max_predictions: int
  batch_size: int
  rope_base: float
  seed: int  # of its data: document order, packing, masks (not of dropout: the run's seed)
  mask_rates: tuple[float, float] | None = None  # its own (start, end) rates, if it names them
  objective: str = "mlm"  # objective.kind, or the phase's own 'clm' / 'mlm' / 'diffusion'

  @property
  def predictions(self) -> int:
    """The positions whose tokens a step predicts per row: the masked slots (MLM), or every
    position but the last (the causal-LM objective)."""
    return objectives.get(self.objective).predicted_positions(self.seq_len, self.max_predictions)

  @property
  def masker(self) -> str:
    """What the host masker makes for its batches (objectives.MLM_MASKER, DIFFUSION_MASKER)."""
    return objectives.get(self.objective).masker


@dataclasses.dataclass(frozen=True)
class Plan:
  """train.phases parsed: what every part of a run reads of its phases."""

  phases: tuple[Phase, ...]
  # The mask rate by step (None: masking.mask_rate throughout); phases take their piece.
  mask_rates: masking.RateSchedule | None
  # The whole run as one phase of data.seq_len, masking.max_predictions_per_seq and
  # train.batch_size, whatever train.phases says (the shape the benchmarks measure).
  whole_run: Phase
  # (step, tokens seen after it) at every phase boundary: the optimizer's token clock.
  step_tokens: tuple[np.ndarray, np.ndarray]

  # A plan is the sequence of its phases.
  def __iter__(self):
    return iter(self.phases)

  def __getitem__(self, index: int) -> Phase:
    return self.phases[index]

  def __len__(self) -> int:
    return len(self.phases)

  def at(self, steps_done: int) -> Phase:
    """The phase that trains step `steps_done + 1` (the last phase once training is over)."""
    for phase in self.phases:
      if steps_done < phase.end:
        return phase
    return self.phases[-1]

  def shapes(self) -> dict[tuple[int, ...], tuple[int, int, int, str]]:
    """The run's distinct train steps, (batch, seq_len, prediction slots, objective), by the
    indices of the phases that have each: what a compile must check."""
    out: dict[tuple[int, int, int, str], list[int]] = {}
    for phase in self.phases:
      out.setdefault((phase.batch_size, phase.seq_len, phase.max_predictions, phase.objective),
                     []).append(phase.index)
    return {tuple(indices): shape for shape, indices in out.items()}

  def batch_sizes(self) -> list[int]:
    """Every global batch size of the run (train.batch_size and the phases'), ascending."""
    return sorted({self.whole_run.batch_size, *(p.batch_size for p in self.phases)})

  def peak_rate(self, phase: Phase, mask_rate: float) -> float:
    """The highest mask rate of `phase` (`mask_rate` where the rate is constant)."""
    return mask_rate if self.mask_rates is None else self.mask_rates.peak(phase.start, phase.end)


def plan(settings: RunSettings) -> Plan:
  """The run's phases; their ends are fractions of train.steps (the last one ends there)."""
  train, m = settings.train, settings.masking
  spec = train.phases or (PhaseSpec(1.0, settings.data.seq_len, m.max_predictions_per_seq),)
  rates = _mask_rates(spec, m, train.steps)
  phases = []
  for i, (entry, (start, end)) in enumerate(zip(spec, _bounds(spec, train.steps))):
    seq_len, slots = entry.seq_len, entry.max_predictions
    if rates is not None:  # the slots follow the rate: as many as a full row wants at its peak
      _, wanted = masking.budget(seq_len - 2, rates.peak(start, end), slots)
      slots = min(slots, int(wanted))
    own = None if entry.mask_rate is None else (
        entry.mask_rate, entry.mask_rate if entry.mask_rate_end is None else entry.mask_rate_end)
    objective = entry.objective or settings.objective.kind
    slots = objectives.get(objective).slots(seq_len, slots)
    phases.append(Phase(i, start, end, seq_len, slots, entry.batch_size or train.batch_size,
                        entry.rope_base or settings.model.rope_base,
                        settings.seed + _PHASE_SEED_STRIDE * i, own, objective))
  kind = settings.objective.kind
  whole_run = Phase(0, 0, train.steps, settings.data.seq_len,
                    objectives.get(kind).slots(settings.data.seq_len, m.max_predictions_per_seq),
                    train.batch_size, settings.model.rope_base, settings.seed, objective=kind)
  return Plan(tuple(phases), rates, whole_run, _step_tokens(phases))


def _step_tokens(phases: list[Phase]) -> tuple[np.ndarray, np.ndarray]:
  """(step, tokens seen after it) at every phase boundary (the optimizer's token clock): rows x
  seq_len per step, phase by phase."""
  steps, tokens = [0], [0.0]
  for p in phases:
    steps.append(p.end)
    tokens.append(tokens[-1] + (p.end - p.start) * p.batch_size * p.seq_len)
  return np.asarray(steps, np.float64), np.asarray(tokens, np.float64)


def _bounds(spec: tuple[PhaseSpec, ...], total: int) -> list[tuple[int, int]]:
  """(start, end) steps of each phase; the ends are fractions of train.steps."""
  out, start, cumulative = [], 0, 0.0
  for i, entry in enumerate(spec):
    cumulative += entry.fraction
    end = total if i == len(spec) - 1 else min(total, round(cumulative * total))
    out.append((start, end))
    start = end
  return out


def _mask_rates(spec: tuple[PhaseSpec, ...], m: masking.Settings,
                total: int) -> masking.RateSchedule | None:
  """The run's mask rate by step, None if it never changes: a phase naming `mask_rate` gets a
  segment of its own, the others follow the run-long masking.mask_rate -> mask_rate_end."""
  if m.mask_rate_schedule == "constant" and all(e.mask_rate is None for e in spec):
    return None
  run_end = m.mask_rate if m.mask_rate_schedule == "constant" else m.mask_rate_end
  if all(e.mask_rate is None for e in spec):  # one segment: a cosine stays one cosine
    return masking.RateSchedule((masking.Segment(0, total, m.mask_rate, run_end),),
                                m.mask_rate_schedule)
  segments = []
  for entry, (start, end) in zip(spec, _bounds(spec, total)):
    if entry.mask_rate is not None:
      end_rate = entry.mask_rate if entry.mask_rate_end is None else entry.mask_rate_end
      segments.append(masking.Segment(start, end, entry.mask_rate, end_rate))
    else:  # the run-long schedule's piece over this phase
      segments.append(masking.Segment(start, end, m.mask_rate, run_end, ramp=(0, total)))
  return masking.RateSchedule(tuple(segments), m.mask_rate_schedule)
