"""Ahead-of-time compilation of the real train and eval steps for a target this machine does
not have (a TPU slice, a GPU node: parallel/targets.py), and what the compiler says of them.

Everything the run would build is built the same way (assembly.py's setup and train step,
steps.make_eval_step, on a mesh of the target's devices); only the inputs
are abstract (ShapeDtypeStructs carrying their NamedShardings), so nothing is allocated. Each
distinct shape of the run's phases (batch, row length, prediction slots) is compiled, so a run
that fits at its first row length is known to fit at its last; a diffusion phase's shape adds
`eval_bound`, the held-out step `evaluate` runs for its bound (a slot a position, logits whole).
Per step and shape:

  memory       per device, from the compiled executable: arguments, outputs, temporaries,
               generated code; total = those minus what outputs alias (the donated state),
               against the device's HBM
  flops        the compiler's count per device (cost_analysis) beside flops.py's model FLOPs.
               The compiler counts a loop body once. With model.scan_layers that is the layer
               loop: `compiler_flops_counts_layers` says how many layers it saw, and the ratio
               compares it with flops.py's count of those layers (one), not all L. Under FSDP
               XLA may turn weight-gradient matmuls into windowed einsums, loops over the
               shards (`windowed_einsum_loops`: {iterations: loops}): their FLOPs are counted
               for one iteration, so the ratio falls below 1 with no work missing (BERT-large
               on v5p-64 with FSDP 32: 96 loops of 16 iterations, ratio 0.74; docs/performance.md).
  collectives  by kind, count and result bytes per device (parallel/hlo.py)
  attention    the fused kernel found in the program (or [] for plain XLA attention)
  predicted    the step's time on the target, tokens/s and MFU, by class of kernel: a roofline
               of each kernel at the chip's published rates, calibrated on measured GPU steps
               (training/planning/step_time.py); time_to_train adds up the run's train steps

`cost_analysis()["optimal_seconds"]` is not reported: it came out negative for some programs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time

import jax
import numpy as np

from mlmjax.data import run_input
from mlmjax.data.text.settings import TokenizerSettings
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.errors import MissingDependencyError
from mlmjax.errors import UserError
from mlmjax.models import bert as model_lib
from mlmjax.models import chip_rates
from mlmjax.models import flops as flops_lib
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel import hlo
from mlmjax.parallel import sharding
from mlmjax.parallel import targets
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training.planning import fit
from mlmjax.training.planning import step_time

GiB = 1024**3


class DoesNotFitError(UserError):
  """A step needs more memory per device than the target has."""


@dataclasses.dataclass
class Compiled:
  """One step's report (`report`, one JSON object) and its optimized HLO text."""
  report: dict
  hlo_text: str


def vocab_size(tokenizer: TokenizerSettings) -> int:
  """The run's vocabulary size without reading any data (the tokenizer file if named)."""
  if tokenizer.path:
    return tokenizer_lib.load(tokenizer.path).vocab_size
  return tokenizer.vocab_size


def compile_steps(config, target: targets.Target, which=("train", "eval", "eval_bound")
                  ) -> list[Compiled]:
  """Checks `config` (a ConfigDict or RunSettings) for the target, then compiles each step of
  `which` for it at each shape of the run's phases (train.phases: batch, row length, slots;
  `eval_bound` at a diffusion phase's only), with train.fit='auto' at the setting chosen for
  the target (fit.py)."""
  # One process per TPU host; process indices restart in each slice.
  num_processes = len({(getattr(d, "slice_index", 0), d.process_index) for d in target.devices})
  parts = assembly.Assembly.of(config)  # train.phases parsed: the plan of the run
  config_check.check(parts.settings, parts.plan, len(target.devices), num_processes,
                     platform=target.platform)
  if target.platform != "cpu":  # the chip's rates, before minutes of compiling: one line
    chip_rates.get(target.device_kind,  # if the chip or the dtype has none
                   model_lib.compute_dtype(parts.settings.model.dtype, target.platform))
  with _cudnn_said_in_one_line(parts.settings.model.attention_impl):
    return _compile_steps(parts, target, which)


def _compile_steps(parts: assembly.Assembly, target: targets.Target, which) -> list[Compiled]:
  mesh = sharding.make_mesh(parts.settings.mesh, target.devices)
  vocab = vocab_size(parts.settings.tokenizer)
  choice = None
  if parts.settings.train.fit == "auto":
    choice = fit.choose(parts, vocab, mesh,
                        fit.budget_bytes(parts.settings.train, target.hbm_bytes),
                        keep_programs=True)
    parts = fit.apply(parts, choice)
  setup = parts.setup(vocab, mesh)
  out, evaluated = [], set()
  for phases, (batch, seq_len, train_slots, objective) in parts.plan.shapes().items():
    # eval_bound: what `evaluate` runs for a diffusion run, its held-out rows a slot a position
    bound = parts.objective(objective).bound_samples > 0
    for name in (n for n in which if n != "eval_bound" or bound):
      if name.startswith("eval"):  # one a shape, whatever the phases train at it
        if (name, batch, seq_len) in evaluated:
          continue
        evaluated.add((name, batch, seq_len))
      # The fit compiled the chosen train steps already: reported, not compiled again.
      fitted = choice.programs.get((batch, seq_len, train_slots, objective)) if (
          choice is not None and name == "train") else None
      out.append(_compile_step(name, parts, setup, vocab, target, batch, seq_len,
                               train_slots, objective, fitted))
      out[-1].report["phases"] = phases  # the train.phases entries of this shape
      if name == "train":
        out[-1].report["objective"] = objective
      if choice is not None:
        out[-1].report["fit"] = choice.report()
  return out


def _compile_step(name: str, parts: assembly.Assembly, setup, vocab: int, target, batch: int,
                  seq_len: int, train_slots: int, objective: str,
                  fitted: tuple | None = None) -> Compiled:
  """The train or eval step at one phase shape and objective, and its report; `fitted`: that
  step as the fit compiled it (compiled, seconds), reported as it is."""
  mesh, settings = setup.mesh, parts.settings
  if name == "train":
    slots = train_slots
    fn = parts.train_step(setup, objective=objective)
    state = setup.abstract_state
    predicted = parts.objective(objective).predicted_positions(seq_len, slots)
    per_token = parts.flops_per_token(vocab, seq_len, predicted)
  else:
    # The held-out batches: MLM's at eval.mask_rate whatever the objective ("eval"), or masked
    # as diffusion masks them for its bound ("eval_bound": run_input.eval_batches), whose
    # logits are whole whatever objective.logits_chunk says (objectives/mlm.py heldout_sums).
    fn, state = parts.eval_step(setup, objective), setup.abstract_state["params"]
    masked_as = "diffusion" if name == "eval_bound" else "mlm"
    slots = seq_len if name == "eval_bound" else run_input.held_out_max_predictions(
        seq_len, settings.eval.mask_rate)
    # Forward only: a third of the train step's.
    per_token = parts.flops_per_token(vocab, seq_len, slots) / 3
  args = (state, parts.batch_spec(mesh, batch, seq_len, slots,
                                  objective if name == "train" else masked_as))
  tokens = batch * seq_len / mesh.size
  model_flops = per_token * tokens
  # What the compiler can see of it: with scan_layers it counts the loop body once, so
  # the comparison takes L - 1 layers out of flops.py's count too (BERT-style stacks; an
  # ELECTRA's two stacks are not split out: None).
  seen = model_flops
  if settings.model.scan_layers:
    seen = None
    if parts.objective().generator_fraction(settings.objective) is None:
      layers = settings.model.num_layers
      stack = flops_lib.encoder_flops_per_token(settings.model, seq_len) * tokens
      seen = model_flops - (3 if name == "train" else 1) * stack * (layers - 1) / layers
  compiled, compile_s = fitted or _compile(name, fn, args, target)
  out = _report(compiled, compile_s, name, settings.model, settings.train.grad_accum_steps,
                target, mesh, batch, seq_len, model_flops, seen)
  out.report["predicted"] = None  # no published rates: this machine's CPU (the fit, tests)
  if target.platform != "cpu":
    prediction = step_time.predict(parts, out.hlo_text, mesh, batch, seq_len,
                                   forward_only=name != "train")
    out.report["predicted"] = prediction.report(tokens, model_flops)
  return out


def _compile(name, fn, args, target) -> tuple:
  """fn compiled for `args` on the target, and the seconds it took; one error line when it
  does not fit."""
  t0 = time.perf_counter()
  try:
    compiled = fn.lower(*args).compile()
  except jax.errors.JaxRuntimeError as e:
    if "RESOURCE_EXHAUSTED" in str(e):
      raise DoesNotFitError(_over_message(name, target, str(e))) from None
    raise
  return compiled, time.perf_counter() - t0


@contextlib.contextmanager
def _cudnn_said_in_one_line(attention_impl: str):
  """jax looks for cuDNN's library when it lowers cuDNN attention, in the fit search's
  compiles as in the steps': its RuntimeError becomes one line saying what to install."""
  try:
    yield
  except RuntimeError as e:
    if "cuDNN not found" not in str(e):
      raise
    raise MissingDependencyError(
        f"model.attention_impl={attention_impl!r} is cuDNN attention here, and compiling it"
        " needs cuDNN: pip install nvidia-cudnn-cu12, or set"
        " model.attention_impl='pallas_gpu'") from None


def _report(compiled, compile_s: float, name: str, m_cfg: ModelSettings, grad_accum_steps: int,
            target, mesh, batch: int, seq_len: int, model_flops, seen_flops) -> Compiled:
  text = compiled.as_text()
  mem = fit.memory_bytes(compiled)
  total = mem["total"]
  cost = compiled.cost_analysis() or {}  # None on GPU
  cost = cost[0] if isinstance(cost, list) else cost
  compiler_flops = cost.get("flops")
  report = {
      "step": name, "target": target.name, "device": target.device_kind,
      "devices": mesh.size, "mesh": dict(mesh.shape),
      "dtype": str(np.dtype(model_lib.compute_dtype(m_cfg.dtype, target.platform))),
      "attention_impl": m_cfg.attention_impl, "attention_kernels": hlo.attention_kernels(text),
      "remat": m_cfg.remat, "grad_accum_steps": grad_accum_steps,
      "scan_layers": m_cfg.scan_layers, "batch": batch, "seq_len": seq_len,
      "memory_bytes": {**mem, "device": target.hbm_bytes},
      "memory_gib": round(total / GiB, 3), "device_gib": round(target.hbm_bytes / GiB, 2),
      "fits": total <= target.hbm_bytes,
      "compiler_flops_per_device": compiler_flops,
      # The loop of a scanned stack is counted once: the compiler saw 1 layer of L.
      "compiler_flops_counts_layers": 1 if m_cfg.scan_layers else m_cfg.num_layers,
      "model_flops_per_device": model_flops,
      # Like with like: flops.py's count of what the compiler counted (one layer if scanned).
      "compiler_over_model_flops": (compiler_flops / seen_flops
                                    if compiler_flops and seen_flops else None),
      # Passes over memory: fusing work shows here (the compiler's own count on TPU only).
      "kernels": hlo.kernels(text),
      "compiler_bytes_accessed_per_device": cost.get("bytes accessed"),
      "collectives": hlo.collectives(text),
      "windowed_einsum_loops": hlo.windowed_einsum_loops(text),
      "compile_s": round(compile_s, 2),
  }
  return Compiled(report, text)


def time_to_train(config, steps: list[Compiled], target: targets.Target) -> dict:
  """The run's train steps at their predicted times: each phase's steps at its shape's step
  time (`steps`: compile_steps' reports), in hours and chip-hours on the target. Evaluation,
  checkpoints and start-up are left out."""
  plan = assembly.Assembly.of(config).plan
  seconds, train_steps = 0.0, 0
  for compiled in steps:
    report = compiled.report
    if report["step"] != "train":
      continue
    n = sum(plan[i].end - plan[i].start for i in report["phases"])
    seconds += n * report["predicted"]["step_s"]
    train_steps += n
  chips = len(target.devices)  # one device a chip (v4's and v5p's two cores as one)
  return {"step": "run", "target": target.name, "train_steps": train_steps,
          "predicted_hours": seconds / 3600, "predicted_days": seconds / 86400,
          "chips": chips, "chip_hours": seconds / 3600 * chips}


# libtpu's words: "... the total memory required for HLO temporaries (108.03G) exceeds
# available HBM (15.75G)" (or "Used 20.5G of 15.75G hbm").
_OVER = (re.compile(r"required for ([\w ]+?) \(([\d.]+)([KMGT])\) exceeds available HBM"
                    r" \(([\d.]+)([KMGT])\)"),
         re.compile(r"[Uu]sed ()([\d.]+)([KMGT]) of ([\d.]+)([KMGT])"))
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_ADVICE = ("shrink train.batch_size per device (train.grad_accum_steps keeps the global batch),"
           " set model.remat, or shard over more devices (config.mesh.shape)")


def _over_message(name: str, target, error: str) -> str:
  """The one line for a step the compiler found too big (from XLA's RESOURCE_EXHAUSTED)."""
  chip = f"{target.name} ({target.device_kind}, {target.hbm_bytes / GiB:.2f} GiB per device"
  for pattern in _OVER:
    m = pattern.search(error)
    if m:
      what = m.group(1)
      used, free = (float(m.group(i)) * _UNITS[m.group(i + 1)] for i in (2, 4))
      need = f"{used / GiB:.2f} GiB" + (f" for {what}" if what else "")
      return (f"the {name} step needs {need} per device on {chip}, {free / GiB:.2f} GiB"
              f" usable): {(used - free) / GiB:.2f} GiB over; {_ADVICE}")
  detail = next((l.strip() for l in error.splitlines() if "RESOURCE_EXHAUSTED" in l), error)
  return f"the {name} step does not fit {chip}): {detail[:300]}"


def does_not_fit(report: dict, target) -> DoesNotFitError:
  total = report["memory_bytes"]["total"]
  return DoesNotFitError(
      f"the {report['step']} step needs {total / GiB:.2f} GiB per device on {target.name}"
      f" ({target.device_kind}, {target.hbm_bytes / GiB:.2f} GiB per device):"
      f" {(total - target.hbm_bytes) / GiB:.2f} GiB over; {_ADVICE}")


def write_hlo(compiled: Compiled, hlo_dir: str) -> str:
  os.makedirs(hlo_dir, exist_ok=True)
  path = os.path.join(hlo_dir, f"{compiled.report['step']}_step.{compiled.report['target']}.hlo")
  with open(path, "w", encoding="utf-8") as f:
    f.write(compiled.hlo_text)
  return path
