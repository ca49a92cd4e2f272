"""Training phases: BERT trained 90% of its steps on 128-token rows, then 10% on 512; the 2025
recipes also grow the batch (mmBERT), raise the rotary base with the length (ModernBERT's
context extension) and anneal the mask rate (30% -> 15% -> 5%) phase by phase.

`config.train.phases` is a tuple of (fraction of train.steps, seq_len, max_predictions_per_seq)
with an optional 4th item, a dict of what else the phase changes:

    batch_size     global rows per step (batch-size warmup; default train.batch_size)
    rope_base      rotary base of the global layers (default model.rope_base)
    mask_rate      the phase's own mask rate schedule, from mask_rate at its first step ...
    mask_rate_end  ... to mask_rate_end at its last (default: mask_rate, constant), shaped by
                   masking.mask_rate_schedule; phases without them follow the run-long one
    objective      'clm' (next-token prediction, causal_lm.py) or 'mlm' (default:
                   objective.kind): causal LM first, then MLM

Empty means one phase with `data.seq_len` and `masking.max_predictions_per_seq`. The model,
the optimizer state and the step carry over a switch; the input pipeline is rebuilt for the new
shapes (with its own seed, so it does not replay the first phase's document order), and the
train step for the new rotary base.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlmjax.data import masking
from mlmjax.training.settings import RunSettings, TrainSettings

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
  max_predictions: int  # prediction slots: those configured, fewer if the rates never need them
  batch_size: int
  rope_base: float
  seed: int  # of its data: document order, packing, masks (not of dropout: the run's seed)
  mask_rates: tuple[float, float] | None = None  # its own (start, end) rates, if it names them
  objective: str = "mlm"  # objective.kind, or the phase's own 'clm' / 'mlm'

  @property
  def predictions(self) -> int:
    """The positions whose tokens a step predicts per row: the masked slots (MLM), or every
    position but the last (the causal-LM objective)."""
    return predicted_positions(self.seq_len, self.max_predictions, self.objective)


def predicted_positions(seq_len: int, slots: int, objective: str) -> int:
  """Phase.predictions of a step's shape and objective."""
  return seq_len - 1 if objective == "clm" else slots


def options(entry) -> dict:
  """The 4th item of a phase entry ({} when there is none)."""
  return dict(entry[3]) if len(entry) > 3 else {}


def _spec(settings: RunSettings) -> tuple:
  return settings.train.phases or (
      (1.0, settings.data.seq_len, settings.masking.max_predictions_per_seq),)


def _bounds(spec, total: int) -> list[tuple[int, int]]:
  """(start, end) steps of each phase; the ends are fractions of train.steps."""
  out, start, cumulative = [], 0, 0.0
  for i, entry in enumerate(spec):
    cumulative += entry[0]
    end = total if i == len(spec) - 1 else min(total, round(cumulative * total))
    out.append((start, end))
    start = end
  return out


def mask_rates(settings: RunSettings) -> masking.RateSchedule:
  """The run's mask rate by step: a phase naming `mask_rate` gets a segment of its own, the
  others follow the run-long masking.mask_rate -> mask_rate_end."""
  m, total = settings.masking, settings.train.steps
  run_end = m.mask_rate if m.mask_rate_schedule == "constant" else m.mask_rate_end
  run_long = masking.RateSchedule((masking.Segment(0, total, m.mask_rate, run_end),),
                                  m.mask_rate_schedule)
  segments = []
  for entry, (start, end) in zip(_spec(settings), _bounds(_spec(settings), total)):
    opts = options(entry)
    if "mask_rate" in opts:
      rate = float(opts["mask_rate"])
      segments.append(masking.Segment(start, end, rate, float(opts.get("mask_rate_end", rate))))
    else:  # the run-long schedule's piece over this phase
      segments.append(masking.Segment(start, end, m.mask_rate, run_end, ramp=(0, total)))
  if not any("mask_rate" in options(e) for e in _spec(settings)):
    return run_long  # one segment: a cosine stays one cosine over the run
  return masking.RateSchedule(tuple(segments), m.mask_rate_schedule)


def schedules_mask_rate(settings: RunSettings) -> bool:
  """Whether the mask rate changes during the run (else masking.mask_rate throughout)."""
  return settings.masking.mask_rate_schedule != "constant" or any(
      "mask_rate" in options(e) for e in _spec(settings))


def plan(settings: RunSettings) -> list[Phase]:
  """The run's phases; their ends are fractions of train.steps (the last one ends there)."""
  spec = _spec(settings)
  rates = mask_rates(settings) if schedules_mask_rate(settings) else None
  phases = []
  for i, (entry, (start, end)) in enumerate(zip(spec, _bounds(spec, settings.train.steps))):
    opts = options(entry)
    seq_len, slots = int(entry[1]), int(entry[2])
    if rates is not None:  # the slots follow the rate: as many as a full row wants at its peak
      _, wanted = masking.budget(seq_len - 2, rates.peak(start, end), slots)
      slots = min(slots, int(wanted))
    own = ((float(opts["mask_rate"]), float(opts.get("mask_rate_end", opts["mask_rate"])))
           if "mask_rate" in opts else None)
    phases.append(Phase(i, start, end, seq_len, slots,
                        int(opts.get("batch_size", settings.train.batch_size)),
                        float(opts.get("rope_base", settings.model.rope_base)),
                        settings.seed + _PHASE_SEED_STRIDE * i, own,
                        opts.get("objective", settings.objective.kind)))
  return phases


def shapes(settings: RunSettings) -> dict[tuple[int, ...], tuple[int, int, int, str]]:
  """The run's distinct train steps, (batch, seq_len, prediction slots, objective), by the
  indices of the phases that have each: what a compile must check."""
  out: dict[tuple[int, int, int, str], list[int]] = {}
  for phase in plan(settings):
    out.setdefault((phase.batch_size, phase.seq_len, phase.max_predictions, phase.objective),
                   []).append(phase.index)
  return {tuple(indices): shape for shape, indices in out.items()}


def base_shape(settings: RunSettings) -> Phase:
  """The whole run as one phase of data.seq_len, masking.max_predictions_per_seq and
  train.batch_size, whatever train.phases says (the shape the benchmarks measure)."""
  return Phase(0, 0, settings.train.steps, settings.data.seq_len,
               settings.masking.max_predictions_per_seq, settings.train.batch_size,
               settings.model.rope_base, settings.seed, objective=settings.objective.kind)


def phase_at(phases: list[Phase], steps_done: int) -> Phase:
  """The phase that trains step `steps_done + 1` (the last phase once training is over)."""
  for phase in phases:
    if steps_done < phase.end:
      return phase
  return phases[-1]


def batch_sizes(train_config: TrainSettings) -> list[int]:
  """Every global batch size of the run (train.batch_size and the phases'), ascending."""
  return sorted({train_config.batch_size, *(
      int(options(e).get("batch_size", train_config.batch_size)) for e in train_config.phases)})


def step_tokens(train_config: TrainSettings) -> tuple[np.ndarray, np.ndarray]:
  """(step, tokens seen after it) at every phase boundary, from train.* alone (the optimizer's
  token clock): rows x seq_len per step, phase by phase. Without phases every step is alike."""
  spec = train_config.phases or ((1.0, 1, 1),)
  steps, tokens = [0], [0.0]
  for entry, (start, end) in zip(spec, _bounds(spec, train_config.steps)):
    rows = int(options(entry).get("batch_size", train_config.batch_size))
    steps.append(end)
    tokens.append(tokens[-1] + (end - start) * rows * int(entry[1]))
  return np.asarray(steps, np.float64), np.asarray(tokens, np.float64)
