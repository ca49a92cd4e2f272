"""The run folder: where everything of a run lives (loading a finished run: finished_run.py).

    WORKDIR/
      config.json          the resolved config of the run, with its format version
                           (saved_config.py: read back onto today's defaults)
      tokenizer.model      the sentencepiece model (trained or copied), or
      tokenizer_hf/        a Hugging Face tokenizer's files (runs started from such a model)
      tokenizer_stats.npz  per-piece tables (word starts, capitals, corpus counts) for masking
      tokenizer_stats_cooccurrence.npz  word n-grams and pairs (semantic, contextual masking;
                           its name follows the stats file's: masking/cooccurrence.py)
      checkpoints/N/       orbax: state (params + optimizer + step), data (every shard's grain
                           position, JSON), host (the train loop's own state and that of its
                           participants, e.g. adaptive masking's loss table)
      corrupt_checkpoints/ damaged checkpoints set aside at restore (only if there were any)
      metrics.jsonl        one JSON object per logged step
      tensorboard/         event files
      curves.png           loss, accuracy, learning rate and tokens/s over the steps (plot.py)
      goodput.png          the attempts on the run's timeline, by segment (plot.py)
      lock                 who is training in this workdir (workdir_lock.py)
      goodput/             each process's clock of each attempt: where its time went
                           (goodput.py; `python -m mlmjax.plot` sums them up)
      watchdog/            stacks of a process the watchdog stopped, start-up records of a
                           run of several processes (watchdog.py)
      compile_cache/       compiled train and eval steps, loaded by a resume instead of
                           compiling again (compile_cache.py; train.compilation_cache)
      finetune/TASK/       a fine-tuning run (mlmjax/finetuning/; TASK.random_init/ its
                           baseline): the same layout (its own config.json, checkpoints,
                           metrics, curves, lock) plus
        results.json       its dev-set metrics after the last step

Only this module knows these names; every other module is handed the paths it writes.
WORKDIR may be a bucket folder (`gs://bucket/run`, `s3://bucket/run`): every path here goes
through the one path layer (mlmjax/paths.py), and the lock becomes a lease object.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax

from mlmjax import errors
from mlmjax import paths
from mlmjax.training import saved_config


def _write_atomic(path: str, text: str) -> None:
  paths.write_atomic(path, text)  # never half a file


@dataclasses.dataclass(frozen=True)
class Workdir:
  path: str

  def _join(self, name: str) -> str:
    return paths.join(self.path, name)

  config = property(lambda self: self._join("config.json"))
  goodput = property(lambda self: self._join("goodput"))
  goodput_picture = property(lambda self: self._join("goodput.png"))
  tokenizer = property(lambda self: self._join("tokenizer.model"))
  hf_tokenizer = property(lambda self: self._join("tokenizer_hf"))
  # Where each kind of tokenizer is kept; a run has one of them.
  tokenizers = property(lambda self: {"sentencepiece": self.tokenizer,
                                      "huggingface": self.hf_tokenizer})

  def saved_tokenizer(self) -> str:
    """The tokenizer the run saved, whichever kind (none yet: the sentencepiece path, so that
    loading it names the missing file)."""
    return next((p for p in self.tokenizers.values() if paths.exists(p)), self.tokenizer)

  vocab_stats = property(lambda self: self._join("tokenizer_stats.npz"))
  checkpoints = property(lambda self: paths.join(paths.abspath(self.path), "checkpoints"))
  corrupt_checkpoints = property(
      lambda self: paths.join(paths.abspath(self.path), "corrupt_checkpoints"))
  metrics = property(lambda self: self._join("metrics.jsonl"))
  tensorboard = property(lambda self: self._join("tensorboard"))
  curves = property(lambda self: self._join("curves.png"))
  fit = property(lambda self: self._join("fit.json"))  # train.fit='auto': the choice made
  lock = property(lambda self: self._join("lock"))
  compile_cache = property(lambda self: paths.join(paths.abspath(self.path), "compile_cache"))
  results = property(lambda self: self._join("results.json"))

  def finetune(self, task: str, random_init: bool = False) -> "Workdir":
    """The default folder of a fine-tuning run of this (pretraining) run on `task` (of the
    same model from random initialisation: its baseline)."""
    name = task.replace("/", "_") + (".random_init" if random_init else "")
    return Workdir(paths.join(self.path, "finetune", name))

  def make_writable(self) -> None:
    """Creates the folder and fails now, with the reason, rather than at the first save."""
    if self.path.startswith("s3://"):  # all else works there (tests/training/test_buckets.py)
      raise errors.UserError(
          f"--workdir={self.path}: orbax-checkpoint 0.12 writes checkpoints only to local (or"
          " mounted) folders and gs://; use one of those for a training run's workdir")
    try:
      paths.makedirs(self.path)
      probe = self._join(f".write_test.{os.getpid()}")
      with paths.open(probe, "w") as f:
        f.write("ok")
      paths.remove(probe)
    except OSError as e:
      raise errors.UserError(f"cannot write to --workdir={self.path}:"
                             f" {e.strerror or e}") from None

  def save_config(self, config) -> None:
    """config.json: `config`, a ConfigDict (settings' `to_config_dict()`)."""
    if jax.process_index() == 0:
      _write_atomic(self.config, saved_config.dumps(config))

  def save_json(self, path: str, value) -> None:
    """`value` as JSON at `path` (one of this folder's files), from process 0."""
    if jax.process_index() == 0:
      _write_atomic(path, json.dumps(value, indent=2) + "\n")

  def has_config(self) -> bool:
    return paths.isfile(self.config)

  def load_run(self):
    """The pretraining run's settings and plan (training/assembly.py's Assembly), read onto
    today's defaults (runs saved by an earlier mlmjax lack the keys added since)."""
    if not self.has_config():
      raise errors.UserError(f"{self.path} holds no training run (no {self.config})")
    return saved_config.load(self.config)

  def load_config(self):
    """The pretraining run's settings (RunSettings), as load_run reads them."""
    return self.load_run().settings

  def saved_record(self) -> dict:
    """config.json as saved, without defaults (a fine-tuning run's, whose keys are not a
    pretraining run's)."""
    return saved_config.read(self.config)
