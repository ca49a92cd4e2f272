"""Training curves of one or more runs as a PNG: loss, accuracy, learning rate and tokens/s.

Reads each run's metrics.jsonl (pretraining or fine-tuning: the keys present decide what is
drawn) and overlays the runs: one colour per run (a single run: one per curve), line styles
in the panel's key order (train solid, its held-out `eval/` twin dashed with markers).
Training and fine-tuning runs draw their own at the end (WORKDIR/curves.png); `python -m
mlmjax.plot` (plot.py) draws any runs together. matplotlib draws off-screen (a Figure without
pyplot), so no display is needed.
"""

from __future__ import annotations

import io
import os

from mlmjax import errors
from mlmjax import paths
from mlmjax.training.run import metrics as metrics_lib
from mlmjax.training.run import workdir as workdir_lib

# Panels: (title, y label, metric keys in drawing order; `eval/` keys are held-out metrics).
PANELS = (
    ("Loss", "cross-entropy", ("loss", "eval/loss")),
    ("Accuracy and dev metrics", "score", (
        "mlm_accuracy", "eval/mlm_accuracy", "nsp_accuracy", "eval/nsp_accuracy", "accuracy",
        "eval/accuracy", "eval/f1", "eval/matthews_corr", "eval/pearson", "eval/spearman")),
    ("Learning rate", "learning rate", ("learning_rate",)),
    ("Throughput", "tokens / s", ("tokens_per_sec",)),
)


class PlotError(errors.UserError):
  """Nothing to plot (no run, or no logged steps yet)."""


def _labels(workdirs: list[str]) -> list[str]:
  """Short names that tell the runs apart: the folder names, or the full paths if they clash."""
  names = [paths.basename(p if paths.is_remote(p) else os.path.normpath(p)) for p in workdirs]
  return names if len(set(names)) == len(names) else [
      p if paths.is_remote(p) else os.path.normpath(p) for p in workdirs]


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
  points = [(r["step"], r[key]) for r in rows if key in r]
  return [s for s, _ in points], [v for _, v in points]


def save_curves(workdirs: list[str], out: str) -> str:
  """Draws the runs in `workdirs` into the PNG `out`; returns its path."""
  # Imported here: only what draws pays for it. A Figure of its own, not pyplot's global
  # state: no display needed, nothing left open, safe inside any program.
  import matplotlib  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  runs = []
  for path in workdirs:
    metrics_path = workdir_lib.Workdir(path).metrics
    if not paths.exists(metrics_path):
      raise PlotError(f"{path} holds no metrics ({metrics_path} does not exist)")
    runs.append(metrics_lib.rows(metrics_path))
  if not any(runs):
    raise PlotError(f"no logged steps in {', '.join(workdirs)} yet")
  colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
  styles = ("-", "--", "-.", ":")  # the panel's keys in order: train, eval, train, eval, ...
  fig = Figure(figsize=(12, 8))
  axes = fig.subplots(2, 2)
  for ax, (title, ylabel, keys) in zip(axes.flat, PANELS):
    for i, (label, rows) in enumerate(zip(_labels(workdirs), runs)):
      drawn = 0
      for key in keys:
        steps, values = _series(rows, key)
        if not steps:
          continue
        # One colour per run; a single run's curves get a colour each.
        color = colors[(i if len(workdirs) > 1 else drawn) % len(colors)]
        ax.plot(steps, values, color=color, linestyle=styles[drawn % len(styles)],
                marker="o" if key.startswith("eval/") else None, markersize=3,
                label=key if len(workdirs) == 1 else f"{label}: {key}")
        drawn += 1
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize=8)
    else:
      ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    if title == "Learning rate":
      ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
  fig.suptitle(" vs ".join(_labels(workdirs)) if len(workdirs) > 1 else workdirs[0])
  fig.subplots_adjust(left=0.07, right=0.98, bottom=0.07, top=0.92, wspace=0.2, hspace=0.3)
  png = io.BytesIO()
  fig.savefig(png, format="png", dpi=100)
  paths.write_atomic(out, png.getvalue())  # local or in a bucket
  return out
