"""The run folder: where everything of a run lives, and loading a finished run back.

    WORKDIR/
      config.json          the resolved config of the run
      tokenizer.model      the sentencepiece model (trained or copied), or
      tokenizer_hf/        a Hugging Face tokenizer's files (runs started from such a model)
      tokenizer_stats.npz  per-piece tables (word starts, capitals, corpus counts) for masking
      checkpoints/N/       orbax: state (params + optimizer + step), data (every shard's grain
                           position, JSON), host (the train loop's own state and that of its
                           participants, e.g. adaptive masking's loss table)
      corrupt_checkpoints/ damaged checkpoints set aside at restore (only if there were any)
      metrics.jsonl        one JSON object per logged step
      tensorboard/         event files
      curves.png           loss, accuracy, learning rate and tokens/s over the steps (plot.py)
      lock                 who is training in this workdir (workdir_lock.py)
      finetune/TASK/       a fine-tuning run (mlmjax/finetuning/; TASK.random_init/ its
                           baseline): the same layout (its own config.json, checkpoints,
                           metrics, curves, lock) plus
        results.json       its dev-set metrics after the last step

Only this module knows these names; every other module is handed the paths it writes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import jax
import ml_collections
from flax import nnx

from mlmjax.training import checkpoint as checkpoint_lib
from mlmjax import errors
from mlmjax.parallel import sharding
from mlmjax.training import steps
from mlmjax.data import tokenizer as tokenizer_lib


def _write_atomic(path: str, text: str) -> None:
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(path + ".tmp", path)  # atomic: never half a file


@dataclasses.dataclass(frozen=True)
class Workdir:
  path: str

  def _join(self, name: str) -> str:
    return os.path.join(self.path, name)

  config = property(lambda self: self._join("config.json"))
  tokenizer = property(lambda self: self._join("tokenizer.model"))
  hf_tokenizer = property(lambda self: self._join("tokenizer_hf"))
  # Where each kind of tokenizer is kept; a run has one of them.
  tokenizers = property(lambda self: {"sentencepiece": self.tokenizer,
                                      "huggingface": self.hf_tokenizer})

  def saved_tokenizer(self) -> str:
    """The tokenizer the run saved, whichever kind (none yet: the sentencepiece path, so that
    loading it names the missing file)."""
    return next((p for p in self.tokenizers.values() if os.path.exists(p)), self.tokenizer)

  vocab_stats = property(lambda self: self._join("tokenizer_stats.npz"))
  checkpoints = property(lambda self: os.path.join(os.path.abspath(self.path), "checkpoints"))
  corrupt_checkpoints = property(
      lambda self: os.path.join(os.path.abspath(self.path), "corrupt_checkpoints"))
  metrics = property(lambda self: self._join("metrics.jsonl"))
  tensorboard = property(lambda self: self._join("tensorboard"))
  curves = property(lambda self: self._join("curves.png"))
  lock = property(lambda self: self._join("lock"))
  results = property(lambda self: self._join("results.json"))

  def finetune(self, task: str, random_init: bool = False) -> "Workdir":
    """The default folder of a fine-tuning run of this (pretraining) run on `task` (of the
    same model from random initialisation: its baseline)."""
    name = task.replace("/", "_") + (".random_init" if random_init else "")
    return Workdir(os.path.join(self.path, "finetune", name))

  def make_writable(self) -> None:
    """Creates the folder and fails now, with the reason, rather than at the first save."""
    try:
      os.makedirs(self.path, exist_ok=True)
      probe = self._join(f".write_test.{os.getpid()}")
      with open(probe, "w", encoding="utf-8") as f:
        f.write("ok")
      os.remove(probe)
    except OSError as e:
      raise errors.UserError(f"cannot write to --workdir={self.path}: {e.strerror}") from None

  def save_config(self, config) -> None:
    if jax.process_index() == 0:
      _write_atomic(self.config, config.to_json_best_effort(indent=2, sort_keys=True))

  def save_json(self, path: str, value) -> None:
    """`value` as JSON at `path` (one of this folder's files), from process 0."""
    if jax.process_index() == 0:
      _write_atomic(path, json.dumps(value, indent=2) + "\n")

  def load_config(self) -> ml_collections.ConfigDict:
    if not os.path.isfile(self.config):
      raise errors.UserError(f"{self.path} holds no training run (no {self.config})")
    with open(self.config, encoding="utf-8") as f:
      return ml_collections.ConfigDict(json.load(f))


@dataclasses.dataclass
class FinishedRun:
  """A run's config, tokenizer and the state of one checkpoint, on one device."""

  config: ml_collections.ConfigDict
  tokenizer: tokenizer_lib.Tokenizer  # or hf_tokenizer.HFTokenizer: the same methods
  step: int
  state: steps.State  # {"step", "params", "opt_state"}
  setup: steps.Setup  # the mesh, shardings and graph it was restored onto

  @property
  def graphdef(self) -> nnx.GraphDef:
    return self.setup.graphdef

  def model(self):
    """The NNX model holding the checkpoint's parameters."""
    return nnx.merge(self.graphdef, self.state["params"])

  @functools.cached_property
  def _apply(self):
    graphdef = self.graphdef
    return jax.jit(lambda params, batch: nnx.merge(graphdef, params)(batch))

  def forward(self, batch: dict) -> dict:
    """The model's outputs on a host batch, compiled once per batch shape (op-by-op dispatch
    of the NNX module is several times slower, even for one text)."""
    return self._apply(self.state["params"], batch)


def load_run(path: str, step: int | None = None,
             mesh: jax.sharding.Mesh | None = None) -> FinishedRun:
  """Checkpoint `step` (default: the latest) of the run in `path`, rebuilt from the run's own
  config.json and tokenizer, whatever mesh trained it: on `mesh` (sharded by the run's
  mesh.rules), by default on the first device."""
  run = Workdir(path)
  config = run.load_config()
  tok = tokenizer_lib.load(run.saved_tokenizer())
  if mesh is None:
    config.mesh.shape = (1, 1, 1)
    mesh = sharding.make_mesh(config.mesh, devices=jax.devices()[:1])
  setup = steps.make_setup(config, tok.vocab_size, mesh)
  ckpt = checkpoint_lib.Checkpointer(run.checkpoints, run.corrupt_checkpoints,
                                     config.train.max_checkpoints_to_keep)
  try:
    step = ckpt.latest_step() if step is None else step
    if step is None:
      raise errors.UserError(f"{path} has no checkpoint yet")
    if step not in ckpt.all_steps():
      raise errors.UserError(f"{path} has no checkpoint of step {step} (it has"
                             f" {', '.join(map(str, ckpt.all_steps()))})")
    state = ckpt.restore(step, setup.abstract_state).state
  finally:
    ckpt.close()
  return FinishedRun(config, tok, step, state, setup)
