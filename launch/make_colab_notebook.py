"""Writes launch/colab_tpu.ipynb from the cells below (outputs cleared); edit here, then run

    python launch/make_colab_notebook.py

tests/project/test_notebook.py checks that the committed notebook is what this writes, and runs it.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOK = os.path.join(HERE, "colab_tpu.ipynb")

CELLS = [
    ("markdown", "intro", """\
# mlmjax on a Colab TPU

Pretrains a small BERT with masked language modeling on mlmjax's built-in corpus (the King
James Bible), plots its loss curve and asks it to fill in a `[MASK]`.

For a TPU: *Runtime > Change runtime type*, then a TPU: Colab's TPU runtimes are v5e-1 and
v6e-1 (one TPU chip each). It runs on any runtime, a CPU one too, only slower.

The first cell holds the settings; each can also come from an environment variable (the tests
run this notebook on CPU with a few steps that way)."""),
    ("code", "settings", """\
import os

# Training steps: 2000 is configs/tiny.py's run (see the README for what it learns).
STEPS = int(os.environ.get("MLMJAX_NOTEBOOK_STEPS", 2000))
# Checkpoints, tokenizer and metrics.jsonl. On Colab, a folder on a mounted Google Drive
# survives a lost runtime: running the notebook again then resumes from it.
WORKDIR = os.environ.get("MLMJAX_NOTEBOOK_WORKDIR", "runs/colab_tiny")
# Where mlmjax comes from when this notebook does not run inside a checkout of it (as on
# Colab): set REPO_URL to the git URL of the mlmjax repository you use (yours, or a fork you
# can reach), and REPO_REF to a branch, tag or commit. Inside a checkout both are unused.
REPO_URL = os.environ.get("MLMJAX_NOTEBOOK_REPO_URL", "")
REPO_REF = os.environ.get("MLMJAX_NOTEBOOK_REPO_REF", "main")"""),
    ("markdown", "install-md", """\
## 1. Install

Installs mlmjax with pip, editable, adding its `[tpu]` extra (libtpu) on a TPU runtime. From
the checkout this notebook runs in, when it does (opened in Jupyter from the repository, or set
by `MLMJAX_NOTEBOOK_REPO_DIR`); otherwise, as on Colab, from a clone of `REPO_URL`, which you set
in the first cell. If pip changed a package Colab had already loaded, Colab asks to restart the
session: do, then run all cells again. With `MLMJAX_NOTEBOOK_SKIP_INSTALL=1` this step uses the
mlmjax already installed (and the source tree of that checkout, default the current
directory)."""),
    ("code", "install", """\
import glob
import subprocess
import sys


def on_tpu():
    \"\"\"TPU VMs expose their chips as /dev/accel* (v2-v4) or /dev/vfio/N (v5e and later).\"\"\"
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def find_checkout(folder):
    \"\"\"The root of the mlmjax checkout that holds `folder`, or None. (Jupyter starts the
    kernel in the notebook's folder: launch/ of the checkout.)\"\"\"
    folder = os.path.abspath(folder)
    while True:
        if (os.path.isfile(os.path.join(folder, "setup.py"))
                and os.path.isfile(os.path.join(folder, "mlmjax", "main.py"))
                and os.path.isdir(os.path.join(folder, "configs"))):
            return folder
        if os.path.dirname(folder) == folder:
            return None
        folder = os.path.dirname(folder)


REPO_DIR = os.environ.get("MLMJAX_NOTEBOOK_REPO_DIR") or find_checkout(os.getcwd())
if os.environ.get("MLMJAX_NOTEBOOK_SKIP_INSTALL") == "1":
    REPO_DIR = os.path.abspath(REPO_DIR or ".")
    print(f"MLMJAX_NOTEBOOK_SKIP_INSTALL=1: using the installed mlmjax and {REPO_DIR}")
else:
    if REPO_DIR:
        REPO_DIR = os.path.abspath(REPO_DIR)
        print(f"installing the checkout this notebook runs in: {REPO_DIR}")
    else:
        REPO_DIR = os.path.abspath("mlmjax")
        if not os.path.isdir(REPO_DIR):
            if not REPO_URL:
                raise ValueError("This notebook does not run inside a checkout of mlmjax: set "
                                 "REPO_URL in the first cell to the git repository to install from")
            subprocess.run(["git", "clone", "--quiet", REPO_URL, REPO_DIR], check=True)
        subprocess.run(["git", "-C", REPO_DIR, "checkout", "--quiet", REPO_REF], check=True)
        print(f"installing {REPO_URL or 'the clone'} at {REPO_REF}: {REPO_DIR}")
    target = REPO_DIR + "[tpu]" if on_tpu() else REPO_DIR  # [tpu]: the libtpu of mlmjax's jax
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", target], check=True)
# This running kernel does not see a fresh editable install: mlmjax (its presets too, in
# mlmjax/configs) is imported from the source tree.
sys.path.insert(0, REPO_DIR)"""),
    ("markdown", "devices-md", """\
## 2. Devices

mlmjax shards the batch over every device it sees (data parallel by default): 1 TPU chip on
Colab's v5e-1 and v6e-1 runtimes, 1 CPU device otherwise."""),
    ("code", "devices", """\
from mlmjax.parallel import plugins

plugins.hide()  # before jax's first import: its CUDA plugin and libtpu only where used
import jax

print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} devices:")
for device in jax.devices():
    print(" ", device)"""),
    ("markdown", "config-md", """\
## 3. Config

`configs/tiny.py`: a 4-layer, 128-wide BERT and a 4,096-piece sentencepiece tokenizer that
mlmjax trains on the corpus first (a few seconds). Change any key here, as with
`--config.train.steps=...` on the command line; `configs/base.py` explains them all."""),
    ("code", "config", """\
import importlib

config = importlib.import_module("mlmjax.configs.tiny").get_config()
config.train.steps = STEPS
config.train.log_every_steps = max(1, STEPS // 24)  # about 24 points on the loss curve
config.train.eval_every_steps = min(config.train.eval_every_steps, STEPS)
print(config.model)
print(config.train)"""),
    ("markdown", "train-md", """\
## 4. Train

`train_and_evaluate(config, WORKDIR)` trains, evaluates on held-out chapters and saves
checkpoints (model and data iterator) in `WORKDIR`. Colab disconnects long or idle sessions:
set `STOP_AFTER` to train in chunks (it saves a checkpoint and returns at that step), and run
this cell again to continue. A run that finds a checkpoint in `WORKDIR` resumes from it, and
the result is bit-identical to an uninterrupted run."""),
    ("code", "train", """\
from absl import flags
from absl import logging

from mlmjax.training.run import metrics
from mlmjax.training import train

flags.FLAGS.mark_as_parsed()  # no command line here: absl's flags keep their defaults
logging.use_absl_handler()
logging.set_verbosity(logging.INFO)  # the progress and eval lines...
metrics.quiet_library_logs()  # ...without the libraries' chatter

STOP_AFTER = None  # e.g. 1200: stop at that step (with a checkpoint); run again to go on
eval_metrics = train.train_and_evaluate(config, WORKDIR, stop_after=STOP_AFTER)
eval_metrics"""),
    ("markdown", "plot-md", """\
## 5. Loss curve

Every logged step is a line of `WORKDIR/metrics.jsonl`; held-out metrics have an `eval/`
prefix. The figure is also saved as `WORKDIR/loss.png`."""),
    ("code", "plot", """\
import json

import matplotlib.pyplot as plt

with open(os.path.join(WORKDIR, "metrics.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
train_rows = [r for r in rows if "loss" in r]
eval_rows = [r for r in rows if "eval/loss" in r]

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="training")
ax.plot([r["step"] for r in eval_rows], [r["eval/loss"] for r in eval_rows], "o-",
        label="held-out")
ax.set(xlabel="step", ylabel="MLM loss (cross-entropy)", title="configs/tiny.py, built-in corpus")
ax.grid(alpha=0.3)
ax.legend()
PLOT = os.path.join(WORKDIR, "loss.png")
fig.savefig(PLOT, dpi=100, bbox_inches="tight")
print(f"saved {PLOT}")
plt.show()"""),
    ("markdown", "predict-md", """\
## 6. Fill-mask

`Predictor` loads the latest checkpoint of `WORKDIR` on one device. Each `[MASK]` is one
sentencepiece piece; the top 5 and their probabilities are shown. A short run mostly
predicts frequent tokens (`the , of and .`); it takes longer training to get content words."""),
    ("code", "predict", """\
from mlmjax.inference.fill_mask import Predictor

predictor = Predictor(WORKDIR)
text = "In the beginning God created the [MASK] and the earth."
print(f"checkpoint step {predictor.step} of {WORKDIR}")
print(text)
for i, fills in enumerate(predictor.fill_mask(text, top_k=5)):
    print(f"  [MASK] {i + 1}: " + "  ".join(f"{piece} ({p:.3f})" for piece, p in fills))"""),
    ("markdown", "next-md", """\
## Next

The same run from a shell: `python -m mlmjax.main --config=configs/tiny.py --workdir=runs/tiny`.
Larger presets (`configs/bert.py:base`, `configs/roberta.py:base`, ...), your own text
(`--config.data.source='corpus/*.txt'`) and TPU pod slices or GPU clusters (`launch/`) are
described in the README and `docs/tpu.md`."""),
]


def notebook() -> dict:
  cells = []
  for kind, cell_id, source in CELLS:
    cell = {"cell_type": kind, "id": cell_id, "metadata": {},
            "source": source.splitlines(keepends=True)}
    if kind == "code":
      cell.update(execution_count=None, outputs=[])
    cells.append(cell)
  return {
      "cells": cells,
      "metadata": {
          "accelerator": "TPU",
          "colab": {"name": "mlmjax on a Colab TPU", "provenance": []},
          "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
          "language_info": {"name": "python"},
      },
      "nbformat": 4,
      "nbformat_minor": 5,
  }


def render() -> str:
  return json.dumps(notebook(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
  with open(NOTEBOOK, "w", encoding="utf-8") as f:
    f.write(render())
  print(f"wrote {NOTEBOOK}")
