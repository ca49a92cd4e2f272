"""Which preset fits which slice: every preset's train step compiled for a small and a large slice
of TPU v5e, v5p and v6e and for 8 x H100, with train.fit='auto' choosing micro-batches and
rematerialisation (mlmjax/training/planning/fit.py), from this machine (no accelerator needed).

  python benchmarks/preset_fit.py [--presets=bert:base,...] [--targets=v5p-8,...]
      [--results=benchmarks/preset_fit.jsonl] [--table=docs/preset_fit.md] [--fit=off]

Each row is appended to --results as one JSON line as soon as it is compiled (and --table
rewritten from every row there), and rows already there are not compiled again: a killed run,
or one given more presets or targets later, goes on where it stopped. A row that does not
fit at any setting says so (the compiler's own numbers). Each row compiles in a process of its
own: one whose compiler crashes (libtpu 0.0.42.1 does, on bert:large for v6e-8) becomes a row
that says so and in which function; delete its line to compile it again.

The mesh follows the slice: data parallel on one host (8 chips or fewer), FSDP over every chip of
a larger slice (config.mesh.shape = (1, -1, 1)), as docs/scaling.md advises. On 8 x H100 the
attention is what `model.attention_impl='auto'` runs there, cuDNN's flash attention (the einsum
attention for a preset with attention dropout, which no fused kernel takes): compiling it needs
cuDNN's library (`pip install nvidia-cudnn-cu12`, which the `[gpu-cuda12]` extra brings on a GPU machine).
A row this machine lacks a package for (cuDNN, libtpu, jax's CUDA plugin) stops the script with
one line saying what to install; it is not recorded.
Every phase shape of a preset is compiled (BERT's 128 and 512 phases: two lines of one row).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Before anything imports jax, as each command does first (mlmjax/cli.py): jax's unused
# plugins hidden (mlmjax/parallel/plugins.py).
from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()

from mlmjax.errors import MissingDependencyError  # pylint: disable=wrong-import-position
from mlmjax.errors import UserError  # pylint: disable=wrong-import-position
from mlmjax.parallel import targets as targets_lib  # pylint: disable=wrong-import-position

# preset -> (config file:variant, overrides): the list of presets and row lengths.
PRESETS = {
    "tiny": ("tiny", {}),  # the CPU demo: its rows are the ones CI compiles
    "bert:base": ("bert:base", {}),  # phases at 128 and 512
    "bert:large": ("bert:large", {}),
    "roberta:base": ("roberta:base", {}),
    "spanbert:base": ("spanbert:base", {}),
    "electra:base": ("electra:base", {}),
    "modernbert:base": ("modernbert:base", {}),  # 1,024
    "modernbert:large": ("modernbert:large", {}),
    # The context extension: 8,192-token rows, max_predictions for 30% of them.
    "modernbert:base@8192": ("modernbert:base", {"data.seq_len": 8192,
                                                 "masking.max_predictions_per_seq": 2458}),
}
TARGETS = ("v5litepod-8", "v5litepod-256", "v5p-8", "v5p-256", "v6e-8", "v6e-256", "h100x8")
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "preset_fit.jsonl")
TABLE = os.path.join(os.path.dirname(HERE), "docs", "preset_fit.md")
_SINGLE_HOST_DEVICES = 8
_MISSING_DEPENDENCY = 3  # a --child's exit status: this machine cannot compile the row


def config_of(preset: str, target: targets_lib.Target, fit: str = "auto"):
  """The preset's config for `target`: its overrides, train.fit=`fit` ('auto': chosen; 'off':
  the preset's own micro-batches and remat), the slice's mesh."""
  spec, overrides = PRESETS[preset]
  module, *variant = spec.split(":")
  config = importlib.import_module(f"configs.{module}").get_config(*variant)
  for key, value in overrides.items():
    section, name = key.split(".")
    config[section][name] = value
  config.train.fit = fit
  single_host = len(target.devices) <= _SINGLE_HOST_DEVICES
  config.mesh.shape = (-1, 1, 1) if single_host else (1, -1, 1)
  return config


def row(preset: str, target_name: str, fit: str = "auto") -> dict:
  """One (preset, target): per phase shape, whether it fits and with what."""
  # jax's first import: after main() has loaded the plugins of GPU targets.
  from mlmjax.training.planning import aot  # pylint: disable=g-import-not-at-top
  target = targets_lib.get(target_name)
  config = config_of(preset, target, fit)
  t0 = time.perf_counter()
  try:
    compiled = aot.compile_steps(config, target, which=("train",))
  except MissingDependencyError:  # not a result: the script stops (main)
    raise
  except UserError as e:  # fits at no setting, or the config cannot run there
    return {"preset": preset, "target": target_name, "fits": False, "error": str(e),
            "compile_s": round(time.perf_counter() - t0, 1)}
  shapes = []
  for c in compiled:
    r = c.report
    shapes.append({
        "seq_len": r["seq_len"], "batch": r["batch"], "mesh": r["mesh"],
        "grad_accum_steps": r["grad_accum_steps"], "remat": r["remat"],
        "memory_gib": r["memory_gib"], "device_gib": r["device_gib"], "fits": r["fits"],
        "collectives": {k: v["count"] for k, v in r["collectives"].items()},
        "collective_mb": round(sum(v["bytes"] for v in r["collectives"].values()) / 1e6, 1),
        "attention": r["attention_kernels"]})
  return {"preset": preset, "target": target_name, "fits": all(s["fits"] for s in shapes),
          "shapes": shapes, "compile_s": round(time.perf_counter() - t0, 1)}


def row_in_child(preset: str, target_name: str, fit: str) -> dict | None:
  """`row` in a process of its own (this script with --child), so that a compiler that crashes
  ends its row with what killed it rather than the whole table, and each row's compiler memory
  is given back when it ends. The child's log (the fit search's candidates) is passed on live."""
  t0 = time.perf_counter()
  with tempfile.TemporaryFile("w+") as out, subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), f"--presets={preset}",
       f"--targets={target_name}", f"--fit={fit}", "--child"],
      stdout=out, stderr=subprocess.PIPE, text=True) as child:
    log = collections.deque(maxlen=200)  # enough for a failure handler's report
    for line in child.stderr:
      sys.stderr.write(line)
      log.append(line)
    child.wait()
    out.seek(0)
    stdout = out.read()
  return row_of_child(preset, target_name, child.returncode, stdout, "".join(log),
                      round(time.perf_counter() - t0, 1))


def row_of_child(preset: str, target_name: str, returncode: int, stdout: str, stderr: str,
                 seconds: float) -> dict | None:
  """The row a --child process printed. A child killed by a signal (the compiler crashed) gives
  a row that says so and where, from the failure handler's lines that libtpu and XLA print; one
  that failed otherwise (a Python error: a bug to fix, then compile again) gives none."""
  if returncode == 0:
    return json.loads(stdout.strip().splitlines()[-1])
  lines = [line.strip() for line in stderr.splitlines() if line.strip()]
  if returncode == _MISSING_DEPENDENCY:  # the child's last line: what to install
    sys.exit(f"{lines[-1]}, or leave {target_name} out of --targets")
  if returncode > 0:
    print(f"{preset} on {target_name}: not compiled (exit status {returncode}):"
          f" {lines[-1] if lines else ''}", file=sys.stderr)
    return None
  how = signal.Signals(-returncode).name
  if any(line.startswith("***") and "STACK OVERFLOW" in line for line in lines):
    how += ", stack overflow"
  where = next((line.split()[-1] for line in lines if line.startswith("PC: @")), "unknown")
  return {"preset": preset, "target": target_name, "fits": False, "crashed": True,
          "error": f"the compiler crashed ({how}) in {where}", "compile_s": seconds}


def table(rows: list[dict]) -> str:
  """The markdown table of every row (one line per phase shape)."""
  lines = ["| preset | target | seq | batch | mesh | fits | accumulation, remat | GiB / device |"
           " collectives (count; MB / device) | attention | compile |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in sorted(rows, key=lambda r: (list(PRESETS).index(r["preset"])
                                      if r["preset"] in PRESETS else 99,
                                      TARGETS.index(r["target"]) if r["target"] in TARGETS
                                      else 99)):
    if "shapes" not in r:
      fits = "compiler crashed" if r.get("crashed") else "no"
      lines.append(f"| {r['preset']} | {r['target']} | | | | {fits} | | | {r['error']} | |"
                   f" {r['compile_s']:.0f} s |")
      continue
    for s in r["shapes"]:
      mesh = " x ".join(f"{k} {v}" for k, v in s["mesh"].items() if v > 1) or "1 device"
      coll = ", ".join(f"{k} {v}" for k, v in s["collectives"].items())
      # no fused kernel in the program: the einsum attention (attention dropout, or 'xla')
      kernels = ", ".join(s["attention"]) or "einsum"
      lines.append(
          f"| {r['preset']} | {r['target']} | {s['seq_len']} | {s['batch']} | {mesh} |"
          f" {'yes' if s['fits'] else 'no'} | {s['grad_accum_steps']}, {s['remat']} |"
          f" {s['memory_gib']:.2f} of {s['device_gib']:.0f} | {coll}; {s['collective_mb']:,} |"
          f" {kernels} | {r['compile_s']:.0f} s |")
  return "\n".join(lines) + "\n"


def _read(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def write_table(rows: list[dict], path: str, command: str) -> None:
  pending = [f"{p} on {t}" for p in PRESETS for t in TARGETS
             if not any(r["preset"] == p and r["target"] == t for r in rows)]
  text = ("# Which preset fits which slice\n\n"
          "Generated by `benchmarks/preset_fit.py` (its docstring says how): the train step of"
          " each preset compiled for each target on a 2-core CPU machine with jax 0.10.2,"
          " libtpu 0.0.42.1 and (8 x H100) cuDNN 9.28, `train.fit='auto'` choosing the"
          " micro-batches and"
          " rematerialisation. Regenerate with:\n\n    " + command + "\n\n" + table(rows))
  if pending:
    text += ("\nNot compiled yet (the command above goes on with them): "
             + ", ".join(pending) + ".\n")
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def main(argv: list[str]) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--presets", default=",".join(PRESETS))
  p.add_argument("--targets", default=",".join(TARGETS))
  p.add_argument("--results", default=RESULTS)
  p.add_argument("--table", default=TABLE)
  p.add_argument("--fit", default="auto", choices=("auto", "off"),
                 help="'off': each preset as shipped, without the search (one compile a row)")
  p.add_argument("--child", action="store_true",
                 help="compile the one preset and target given and print its row (internal)")
  args = p.parse_args(argv)
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.FLAGS.mark_as_parsed()  # mlmjax's library reads absl flags; this script has none
  if args.child:  # its log shows the fit search's candidates as they are compiled
    try:
      # A GPU target first, before anything imports jax: jax loads the CUDA plugin when imported.
      if targets_lib.parse_tpu(args.targets) is None:
        targets_lib.get(args.targets)
      from absl import logging  # pylint: disable=g-import-not-at-top
      from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top
      logging.set_verbosity(logging.INFO)
      metrics.quiet_library_logs()
      print(json.dumps(row(args.presets, args.targets, args.fit)), flush=True)
    except MissingDependencyError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(_MISSING_DEPENDENCY)
    return
  rows = _read(args.results)
  done = {(r["preset"], r["target"]) for r in rows}
  for preset in args.presets.split(","):
    for target in args.targets.split(","):
      if (preset, target) in done:
        continue
      result = row_in_child(preset, target, args.fit)
      if result is None:
        continue
      print(json.dumps(result), flush=True)
      with open(args.results, "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")
      rows.append(result)
      write_table(rows, args.table, "python benchmarks/preset_fit.py")  # kept current
  write_table(rows, args.table, "python benchmarks/preset_fit.py")


if __name__ == "__main__":
  main(sys.argv[1:])
