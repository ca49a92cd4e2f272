"""Held-out metrics of a pretraining run's checkpoint, and masked diffusion's bound: what
`python -m mlmjax.evaluate` prints (its docstring says what each option does)."""

from __future__ import annotations

import math

from mlmjax.training import finished_run
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training import train


def evaluate(path: str, source: str = "", step: int | None = None,
             mask_rate: float | None = None, batches: int | None = None,
             strategy: str | None = None, bound_samples: int | None = None) -> dict:
  """The metrics of checkpoint `step` (default: the latest) of the run in `path`, masked at
  `mask_rate` with `strategy` (default: the run's own), on its held-out split or every
  document of `source`, and the diffusion bound over `bound_samples` draws (default: as many
  as the objective of the run's last phase asks for)."""
  run_dir = workdir_lib.Workdir(path)
  run = finished_run.load(path, step, mesh="run")
  settings = run.settings
  if mask_rate is not None:
    settings = settings.replace(eval={"mask_rate": mask_rate})  # its rules: a one-line error
  if batches is not None:
    settings = settings.replace(train={"eval_batches": batches})
  if strategy is not None:
    settings = settings.replace(masking={"strategy": strategy})
  parts = run.parts.with_settings(settings)
  run_input = parts.held_out_input(run_dir.saved_tokenizer(), run_dir.vocab_stats, source)
  phase = run.plan.phases[-1]
  objective = parts.objective(phase.objective)
  eval_step = parts.eval_step(run.setup, phase.objective)
  out = train.heldout_metrics(eval_step, objective, run.state["params"], run_input, phase,
                              run.setup.mesh)
  if bound_samples is None:
    bound_samples = objective.bound_samples
  if bound_samples:
    bounds = [train.heldout_metrics(eval_step, objective, run.state["params"], run_input,
                                    phase, run.setup.mesh,
                                    diffusion_sample=k)["eval/diffusion_bound"]
              for k in range(bound_samples)]
    bound = sum(bounds) / len(bounds)
    out.update({"eval/diffusion_bound": bound, "eval/bits_per_token": bound / math.log(2.0),
                "eval/bound_samples": bound_samples})
  return {"workdir": path, "step": run.step, "source": source or settings.data.source,
          "documents": len(run_input.eval_source), "mask_rate": settings.eval.mask_rate,
          "strategy": settings.masking.strategy,
          "batches": settings.train.eval_batches,
          **{k.removeprefix("eval/"): v for k, v in out.items()}}
