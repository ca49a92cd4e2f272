"""Draws the training curves of one or more runs, overlaid, into a PNG
(training/run/learning_curves.py).

  python -m mlmjax.plot --workdir=runs/a [runs/b ...] [--out=curves.png]

Panels: train and held-out loss, accuracy (and a fine-tuning run's dev metrics), learning rate,
tokens/s. One run's picture goes to WORKDIR/curves.png by default, several runs' to
./curves.png; the path written is printed.

A pretraining run's goodput across its restarts (training/run/goodput.py) is printed too, one
screen: the share of wall time that trained, and where the rest went; and drawn beside the
curves (WORKDIR/goodput.png: each attempt on the run's timeline).
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order


from absl import flags

from mlmjax import cli
from mlmjax import errors
from mlmjax.training.run import goodput
from mlmjax.training.run import learning_curves
from mlmjax.training.run import workdir as workdir_lib

_WORKDIR = flags.DEFINE_multi_string(
    "workdir", None, "A run's workdir (pretraining or fine-tuning); more runs may follow as"
    " arguments (--workdir=a b c) or as repeated flags.")
_OUT = flags.DEFINE_string("out", None, "The PNG to write (default: WORKDIR/curves.png for one"
                           " run, curves.png here for several).")


def main(argv):
  workdirs = list(_WORKDIR.value or []) + argv[1:]
  if not workdirs:
    raise errors.CommandLineError("--workdir is required: give at least one run")
  out = _OUT.value or (workdir_lib.Workdir(workdirs[0]).curves if len(workdirs) == 1
                       else "curves.png")
  print(learning_curves.save_curves(workdirs, out))
  for path in workdirs:
    run = workdir_lib.Workdir(path)
    summaries = goodput.by_process(run.goodput)
    if summaries:
      print(f"{path}: {goodput.report(summaries)}")
      print(goodput.save_picture(run.goodput, run.goodput_picture))


if __name__ == "__main__":
  cli.run(main, arguments=True)
