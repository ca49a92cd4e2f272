"""A fine-tuned model loaded back from its output folder, for export (hf/heads.py) and
`python -m mlmjax.embed`: the settings it was trained with, its task kind and labels, the
pretrained run's tokenizer, and one checkpoint's parameters on one device.

The folder's config.json holds the fine-tuning settings and `run` (task, kind, labels, the
pretrained run's folder); the encoder's shape and tokenizer are the pretrained run's, so that
folder must still be where config.json says (by default the fine-tuning run lives inside it).
"""

from __future__ import annotations

import dataclasses
import functools
import json

import jax
import ml_collections
import numpy as np
from flax import nnx

from mlmjax import errors
from mlmjax import paths
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning import records
from mlmjax.finetuning import tasks
from mlmjax.finetuning import trainer
from mlmjax.finetuning.settings import FinetuneMesh, FinetuneSettings
from mlmjax.hf import exporter
from mlmjax.parallel import sharding
from mlmjax.training.core import train_state
from mlmjax.training import objectives
from mlmjax.training.run import checkpoint as checkpoint_lib
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training.run_settings import RunSettings


# The other parts of the sample an export is verified on (FinetunedModel.sample).
SAMPLE_QUESTION = "Who jumps over the dog?"
SAMPLE_OPTIONS = ["The fox jumps.", "The dog sleeps all day."]


@dataclasses.dataclass
class FinetunedModel:
  settings: FinetuneSettings
  record: dict  # config.json's `run`: task, kind, label names, the pretrained run
  pretrained: RunSettings
  tokenizer: tokenizer_lib.Tokenizer
  kind: kind_lib.Kind
  step: int
  params: dict  # the fine-tuning model's parameters (the encoder's under "encoder")
  setup: train_state.MeshSetup

  @property
  def hf_model_type(self) -> str | None:
    """The transformers model type of the pretrained run's objective (hf/convert.py)."""
    return objectives.get(self.pretrained.objective.kind).hf_model_type

  @functools.cached_property
  def _apply(self):
    graphdef = self.setup.graphdef
    return jax.jit(lambda params, batch: nnx.merge(graphdef, params)(batch))

  def outputs(self, rows: dict[str, np.ndarray]) -> np.ndarray:
    """The model's outputs (the kind's: logits, scores or embeddings) on encoded rows."""
    return np.asarray(self._apply(self.params, rows))

  def encode(self, examples) -> kind_lib.Encoded:
    return self.kind.encode(examples, self.tokenizer, self.settings.data.seq_len, "input")

  def sample(self) -> records.Records:
    """One example of the model's kind built on exporter.SAMPLE_TEXT: what an export is
    verified on (hf/heads.py)."""
    text, kind = exporter.SAMPLE_TEXT, self.kind.name
    if kind in ("classification", "regression"):
      return records.TextExamples([(text,)], np.zeros(1, np.int32))
    if kind == "token_classification":
      words = text.split()
      return records.TaggedExamples([words], [[self.kind.tag_names[0]] * len(words)])
    if kind == "question_answering":
      return records.QAExamples(["sample"], [SAMPLE_QUESTION], [text], [[]])
    if kind == "multiple_choice":
      return records.ChoiceExamples([text], [SAMPLE_OPTIONS], np.zeros(1, np.int32))
    return records.PairExamples([text], [SAMPLE_OPTIONS[0]])


def _settings(saved: dict) -> FinetuneSettings:
  """The saved fine-tuning settings, read onto today's defaults (a run saved by an earlier
  mlmjax lacks the keys added since)."""
  config = finetune_config.get_config()
  for section, values in saved.items():
    if section in config and isinstance(values, dict):
      config[section].update({k: tuple(v) if isinstance(v, list) else v
                              for k, v in values.items() if k in config[section]})
    elif section in config:
      config[section] = values
  return FinetuneSettings.from_config(ml_collections.ConfigDict(config))


def is_finetuning_run(path: str) -> bool:
  """Whether `path` holds a fine-tuning run (its config.json records what was fine-tuned)."""
  out = workdir_lib.Workdir(path)
  return out.has_config() and "run" in out.saved_record()


def saved_record(path: str) -> dict:
  """The run record (task, kind, labels, the pretrained run) of the fine-tuning run in `path`,
  or a one-line error when there is none."""
  out = workdir_lib.Workdir(path)
  if not out.has_config():
    raise errors.UserError(f"{path} holds no fine-tuning run (no {out.config})")
  saved = out.saved_record()
  if "run" not in saved:
    raise errors.UserError(f"{path} holds a pretraining run, not a fine-tuning run")
  return _with_labels(out, saved["run"])


def _with_labels(out: workdir_lib.Workdir, record: dict) -> dict:
  """The run record with its kind and labels. A run fine-tuned before mlmjax had task kinds
  (sequence classification or regression only) recorded them in results.json alone."""
  if "kind" in record:
    return record
  if not paths.exists(out.results):
    raise errors.UserError(f"{out.path}: a fine-tuning run of an earlier mlmjax without its"
                           " results.json; finish it (run the same finetune command) first")
  finished = json.loads(paths.read_text(out.results))
  regression = "pearson" in finished.get("dev", {})
  return {**record, "kind": "regression" if regression else "classification",
          "label_names": finished.get("label_names", [])}


def load(path: str, step: int | None = None) -> FinetunedModel:
  """Checkpoint `step` (default: the latest) of the fine-tuning run in `path`."""
  out = workdir_lib.Workdir(path)
  record = saved_record(path)
  saved = out.saved_record()
  settings = _settings({k: v for k, v in saved.items() if k != "run"})
  pre = workdir_lib.Workdir(record["pretrained_workdir"])
  pre_run = pre.load_run()
  tok = tokenizer_lib.load(pre.saved_tokenizer())
  kind = tasks.make_kind(record["kind"], settings, record.get("label_names", []))
  mesh = sharding.make_mesh(FinetuneMesh((1, 1, 1)), devices=jax.devices()[:1])
  setup = trainer.model_setup(settings, pre_run, kind, tok.vocab_size, mesh, total_steps=1)
  ckpt = checkpoint_lib.Checkpointer(out.checkpoints, out.corrupt_checkpoints,
                                     settings.train.max_checkpoints_to_keep)
  try:
    step = ckpt.latest_step() if step is None else step
    if step is None or step not in ckpt.all_steps():
      raise errors.UserError(f"{path} has no checkpoint" +
                             ("" if step is None else f" of step {step}"))
    state = ckpt.restore(step, setup.abstract_state).state
  finally:
    ckpt.close()
  return FinetunedModel(settings, record, pre_run.settings, tok, kind, step, state["params"],
                        setup)
