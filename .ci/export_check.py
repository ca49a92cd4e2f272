"""CI: a run trained and exported at the newest end of setup.py's ranges loads in transformers.

The newest environment (.ci/newest_jax) has no torch (on Python 3.13 PyPI's is a CUDA build of
several GB), so its export is loaded by the first pass's environment, which has torch:

  NEWEST_PYTHON .ci/export_check.py export DIR   trains a tiny run in DIR/run, exports DIR/hf
  python .ci/export_check.py load DIR            transformers loads DIR/hf; its MLM logits must
                                                 equal mlmjax's of DIR/run (exporter.verify)

Prints what it checked; exits non-zero with the command's output when a step fails.
"""

import os
import subprocess
import sys

from mlmjax.parallel import plugins  # first, before anything imports jax (mlmjax/cli.py)
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import importlib.metadata

TRAIN = ["--config=tiny", "--config.model.num_layers=1", "--config.train.steps=4",
         "--config.train.eval_every_steps=4", "--config.train.eval_batches=1"]


def _run(*command: str) -> None:
  proc = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True,
                        check=False)
  if proc.returncode != 0:
    sys.exit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def _versions() -> str:
  return ", ".join(f"{n} {importlib.metadata.version(n)}" for n in ("jax", "transformers"))


def export(folder: str) -> None:
  run, out = os.path.join(folder, "run"), os.path.join(folder, "hf")
  _run("mlmjax.main", f"--workdir={run}", *TRAIN)
  _run("mlmjax.export", f"--workdir={run}", f"--out={out}", "--verify=false")
  print(f"export_check: trained and exported with {_versions()} -> {out}")


def load(folder: str) -> None:
  from mlmjax.hf import exporter  # pylint: disable=g-import-not-at-top
  from mlmjax.training import finished_run  # pylint: disable=g-import-not-at-top
  run = finished_run.load(os.path.join(folder, "run"))
  diff = exporter.verify(run, os.path.join(folder, "hf"))  # raises past its tolerance
  print(f"export_check: loaded with {_versions()}; max |logit difference| {diff:.2e}")


if __name__ == "__main__":
  {"export": export, "load": load}[sys.argv[1]](sys.argv[2])
