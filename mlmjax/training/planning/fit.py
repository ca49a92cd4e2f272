"""Automatic fit (`train.fit='auto'`): the micro-batch count (train.grad_accum_steps) and the
recomputation (model.remat) that make the train step fit device memory, chosen by compiling
candidates with the real compiler for the run's mesh (or mlmjax.compile's target).

    k: the micro-batch counts every phase's batch allows (whole rows per device), fewest first
    the fewest k with model.remat='none' if it fits (one compile where the step fits as it is)
    else the fewest k whose step fits with model.remat='full' (the least memory at a given k),
      found by galloping up from the fewest, then bisecting (memory falls as k grows)
    at that k, the least recomputation that fits: 'none', then 'dots_saveable', then 'full',
      by bisection (memory falls as recomputation grows)
    where the chip publishes its rates (TPU, GPU; step_time.py), by speed: for each remat,
      the fewest k where it fits (galloping again), and of those, the one whose compiled
      steps are predicted fastest over the run; on a CPU, by memory alone (the one above)

Why those candidates only: at a given remat, more micro-batches pass over the weights and
gradients more times for the same work, so no candidate with more is predicted faster. The
remats are all compared: less recomputation is not always predicted faster, nor does it
always need more memory (on v5p-8, a 2-layer step of 1,024 tokens: 'dots_saveable' is
predicted slower than 'full' and needs more memory than 'none'; tests/training/test_fit.py
compiles every candidate of it and checks the choice).

A candidate's memory is what its compiled train step needs per device (memory_bytes), the
largest over the run's phase shapes (compiled longest rows first, stopping at the first over
the budget); it fits when that is at most the budget
(train.fit_memory_gib, else the device's memory). The eval step, forward only, needs less. The
global batch, the data and the learning do not change with the choice: accumulation gives the
same update as the whole batch at once (steps.py), and remat only recomputes. A run keeps its
choice in WORKDIR/fit.json with what it was made for (devices, mesh, budget, model, shapes),
so a resume on the same devices does not search again.
"""

from __future__ import annotations

import dataclasses
import json
import time

from absl import logging
import jax

from mlmjax import errors
from mlmjax.parallel import sharding
from mlmjax import paths
from mlmjax.training import assembly
from mlmjax.training.planning import phases as phases_lib
from mlmjax.training.planning import step_time
from mlmjax.training.settings import TrainSettings

REMATS = ("none", "dots_saveable", "full")  # least recomputation first
GiB = 1024**3
_TOO_BIG = 1 << 62  # what a program the compiler refuses as too big needs, for comparisons


@dataclasses.dataclass(frozen=True)
class Choice:
  grad_accum_steps: int
  remat: str
  memory_bytes: int  # per device, the largest phase's
  budget_bytes: int
  compiled: int  # candidates compiled to find it (0: taken from fit.json)
  # The run's mean train step as predicted on the chip (step_time.py); None where the chip
  # publishes no rates (a CPU), where the choice is by memory alone.
  predicted_step_s: float | None = None
  why: str = ""  # the candidates it was chosen from, in words
  # Every candidate compiled: (k, remat) -> (bytes per device, predicted seconds or None).
  tried: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
  # With choose(keep_programs=True): the chosen candidate's compiled train step and its compile
  # seconds by phase shape (phases.Plan.shapes' values), which mlmjax.compile reports instead of
  # compiling the same program again. Not saved.
  programs: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

  def summary(self) -> str:
    return (f"train.grad_accum_steps={self.grad_accum_steps}, model.remat={self.remat!r}:"
            f" {self.memory_bytes / GiB:.2f} GiB per device of {self.budget_bytes / GiB:.2f}"
            + (f"; {self.why}" if self.why else ""))

  def saved(self) -> dict:
    """What fit.json keeps of it."""
    return {k: getattr(self, k) for k in ("grad_accum_steps", "remat", "memory_bytes",
                                          "budget_bytes", "predicted_step_s", "why")}

  def report(self) -> dict:
    return {"grad_accum_steps": self.grad_accum_steps, "remat": self.remat,
            "memory_gib": round(self.memory_bytes / GiB, 3),
            "budget_gib": round(self.budget_bytes / GiB, 3), "compiled": self.compiled,
            "predicted_step_s": self.predicted_step_s, "why": self.why}


def memory_bytes(compiled) -> dict[str, int]:
  """What a compiled program needs per device, by kind, and in total: the arguments and
  outputs (less what outputs alias: the donated state), temporaries and generated code."""
  m = compiled.memory_analysis()
  mem = {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
         "aliased": m.alias_size_in_bytes, "temporaries": m.temp_size_in_bytes,
         "generated_code": m.generated_code_size_in_bytes}
  mem["total"] = (mem["arguments"] + mem["outputs"] - mem["aliased"] + mem["temporaries"]
                  + mem["generated_code"])
  return mem


def apply(parts: assembly.Assembly, choice: Choice) -> assembly.Assembly:
  return candidate(parts, choice.grad_accum_steps, choice.remat)


def candidate(parts: assembly.Assembly, grad_accum_steps: int, remat: str) -> assembly.Assembly:
  """The run with `grad_accum_steps` micro-batches and `remat` (its plan does not read them)."""
  return parts.with_settings(parts.settings.replace(train={"grad_accum_steps": grad_accum_steps},
                                                    model={"remat": remat}))


def budget_bytes(train: TrainSettings, device_bytes: int | None) -> int | None:
  """train.fit_memory_gib, else `device_bytes` (None: unknown, as on a CPU)."""
  if train.fit_memory_gib > 0:
    return int(train.fit_memory_gib * GiB)
  return device_bytes


def local_device_bytes() -> int | None:
  """The memory of this process's devices as their runtime reports it (None on a CPU)."""
  stats = jax.local_devices()[0].memory_stats() or {}
  return stats.get("bytes_limit")


def micro_batch_counts(plan: phases_lib.Plan, mesh: jax.sharding.Mesh) -> list[int]:
  """Every k for which each phase's batch splits into k micro-batches of whole rows on each
  data-parallel device."""
  dp = 1
  for axis in sharding.BATCH_AXES:
    dp *= mesh.shape[axis]
  sizes = plan.batch_sizes()
  return [k for k in range(1, min(sizes) // dp + 1) if all(s % (dp * k) == 0 for s in sizes)]


def step_memory(parts: assembly.Assembly, vocab_size: int, mesh: jax.sharding.Mesh,
                budget: int | None = None, programs: dict | None = None) -> int:
  """Per-device memory of the compiled train step of the run `parts`, the largest over its phase
  shapes; a program the compiler refuses as too big counts as larger than any budget. The
  shape with the most tokens is compiled first, and once one needs more than `budget` the
  rest are not compiled (the candidate does not fit whatever they need: BERT's 128-token
  phase is not compiled for a candidate whose 512-token phase is over). `programs`, if given,
  gets each shape's compiled step and compile seconds."""
  setup = parts.setup(vocab_size, mesh)
  largest = 0
  shapes = sorted(parts.plan.shapes().values(), key=lambda s: -s[0] * s[1])
  for batch_size, seq_len, predictions, objective in shapes:
    batch = parts.batch_spec(mesh, batch_size, seq_len, predictions, objective)
    step = parts.train_step(setup, objective=objective)
    start = time.perf_counter()
    try:
      compiled = step.lower(setup.abstract_state, batch).compile()
    except jax.errors.JaxRuntimeError as e:
      if "RESOURCE_EXHAUSTED" not in str(e):
        raise
      return _TOO_BIG
    if programs is not None:
      programs[batch_size, seq_len, predictions, objective] = (
          compiled, time.perf_counter() - start)
    largest = max(largest, memory_bytes(compiled)["total"])
    if budget is not None and largest > budget:
      break
  return largest


def _needs(nbytes: int) -> str:
  """A candidate's memory in words: 'needs 3.20 GiB', or the compiler's refusal."""
  return f"needs {nbytes / GiB:.2f} GiB" if nbytes < _TOO_BIG else "is too big for the compiler"


def choose(parts: assembly.Assembly, vocab_size: int, mesh: jax.sharding.Mesh,
           budget: int, keep_programs: bool = False) -> Choice:
  """The candidate the module docstring says, for `budget` bytes per device; a ConfigError
  when nothing fits. `keep_programs`: the choice carries its compiled train steps
  (Choice.programs)."""
  counts = micro_batch_counts(parts.plan, mesh)
  timed = step_time.rates_known(parts, mesh)
  measured: dict[tuple[int, str], int] = {}
  seconds: dict[tuple[int, str], float] = {}  # predicted, of the candidates that fit
  kept: dict[tuple[int, str], dict] = {}  # the compiled steps of candidates that fit

  def need(k: int, remat: str) -> int:
    if (k, remat) not in measured:
      programs = {} if keep_programs or timed else None
      measured[k, remat] = step_memory(candidate(parts, k, remat), vocab_size, mesh, budget,
                                       programs)
      fits = measured[k, remat] <= budget
      if timed and fits:
        seconds[k, remat] = _run_step_seconds(parts, mesh, programs)
      if keep_programs and fits:
        kept[k, remat] = programs
      logging.info("Fit: grad_accum_steps=%d, remat=%r %s (budget %.2f GiB per device)%s", k,
                   remat, _needs(measured[k, remat]), budget / GiB,
                   f", predicted {seconds[k, remat] * 1e3:.2f} ms a step" if fits and timed
                   else "")
    return measured[k, remat]

  def chosen(k: int, remat: str, why: str = "") -> Choice:
    tried = {c: (measured[c], seconds.get(c)) for c in measured}
    return Choice(k, remat, need(k, remat), budget, len(measured), seconds.get((k, remat)),
                  why, tried=tried, programs=kept.get((k, remat), {}))

  def fewest(remat: str) -> int | None:
    """The fewest k whose step fits with `remat`, galloping up from the fewest."""
    place = _first(lambda i: need(counts[i], remat) <= budget, len(counts))
    return None if place is None else counts[place]

  if timed:
    fastest = [(k, remat) for remat in REMATS if (k := fewest(remat)) is not None]
    if fastest:
      best = min(fastest, key=lambda c: seconds[c])
      return chosen(*best, "predicted fastest of " + ", ".join(
          f"{k} x {remat!r} {seconds[k, remat] * 1e3:.3g} ms" for k, remat in fastest))
  # By memory, the best candidate first: where the step fits as it is, one compile decides.
  elif need(counts[0], REMATS[0]) <= budget:
    return chosen(counts[0], REMATS[0])
  # The fewest k that fits with 'full': presets fit at the first or second count, found in
  # one or two compiles; the most micro-batches (one row a device, for BERT on 8 chips 32 of
  # them) is compiled only when no fewer fit.
  k = fewest("full")
  if k is None:
    k = counts[-1]
    raise errors.ConfigError(
        f"train.fit='auto': nothing fits {budget / GiB:.2f} GiB per device; even"
        f" train.grad_accum_steps={k} (the most the batch allows) with"
        f" model.remat='full' {_needs(need(k, 'full'))}: shard over more devices"
        " (config.mesh.shape), or use a smaller model or row length")
  # At that k the least recomputation that fits, by bisection ('full' fits): 'dots_saveable'
  # first, so that a step that fits only with 'full' costs one compile more, not two.
  return chosen(k, REMATS[_bisect(lambda i: need(k, REMATS[i]) <= budget, 0, len(REMATS) - 1)])


def _run_step_seconds(parts: assembly.Assembly, mesh: jax.sharding.Mesh,
                      programs: dict) -> float:
  """The run's mean train step, predicted from a candidate's compiled steps (step_memory's
  `programs`): each shape's step time weighted by its phases' steps."""
  plan = parts.plan
  total = steps = 0.0
  for indices, shape in plan.shapes().items():
    compiled, _ = programs[shape]
    n = sum(plan[i].end - plan[i].start for i in indices)
    total += n * step_time.predict(parts, compiled.as_text(), mesh, shape[0], shape[1]).step_s
    steps += n
  return total / steps


def _first(fits, n: int) -> int | None:
  """The first i in [0, n) with fits(i), for a `fits` that is false, then true (memory falls
  as i grows); None if none is. Gallops (0, 1, 3, 7, ...) until one fits, then bisects the
  last gap: an answer at place p costs about 2 log2(p + 1) probes, one for p = 0."""
  low, i, step = 0, 0, 1
  while not fits(i):
    if i == n - 1:
      return None
    low, i, step = i + 1, min(i + step, n - 1), step * 2
  return _bisect(fits, low, i)


def _bisect(fits, low: int, high: int) -> int:
  """The first i in [low, high] with fits(i), for a `fits` that is false, then true, and
  true at `high`."""
  while low < high:
    mid = (low + high) // 2
    if fits(mid):
      high = mid
    else:
      low = mid + 1
  return high


def _made_for(parts: assembly.Assembly, mesh: jax.sharding.Mesh, budget: int | None) -> dict:
  """What a choice depends on: a saved one is reused only for the same."""
  settings = parts.settings
  model = dataclasses.asdict(settings.model)
  del model["remat"]
  return {"devices": mesh.size, "device_kind": mesh.devices.flat[0].device_kind,
          "mesh": dict(mesh.shape), "budget_bytes": budget, "model": model,
          "objective": dataclasses.asdict(settings.objective), "format": settings.data.format,
          "shapes": list(parts.plan.shapes().values()),
          "optimizer": settings.optimizer.kind}


def resolve(parts: assembly.Assembly, vocab_size: int, mesh: jax.sharding.Mesh,
            record: str) -> assembly.Assembly:
  """The run `parts` with the choice for this mesh: the one saved at `record`
  (WORKDIR/fit.json) if it was made for the same, else a new one, saved there."""
  settings = parts.settings
  budget = budget_bytes(settings.train, local_device_bytes())
  made_for = json.loads(json.dumps(_made_for(parts, mesh, budget)))  # as it reads back
  if paths.exists(record):
    saved = json.loads(paths.read_text(record))
    if saved.get("made_for") == made_for:
      choice = Choice(**{**saved["choice"], "compiled": 0})
      logging.info("Fit (from %s): %s", record, choice.summary())
      return apply(parts, choice)
    logging.info("Fit: %s was made for other devices or settings; choosing again", record)
  if budget is None:
    logging.info("Fit: %s reports no memory limit; set train.fit_memory_gib to fit one."
                 " Keeping train.grad_accum_steps=%d, model.remat=%r",
                 mesh.devices.flat[0].device_kind, settings.train.grad_accum_steps,
                 settings.model.remat)
    return parts
  choice = choose(parts, vocab_size, mesh, budget)
  logging.info("Fit: %s (%d candidates compiled)", choice.summary(), choice.compiled)
  if jax.process_index() == 0:
    paths.write_atomic(record, json.dumps({"choice": choice.saved(), "made_for": made_for},
                                          indent=2) + "\n")
  return apply(parts, choice)
