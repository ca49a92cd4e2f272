"""A fine-tuning run's settings: mlmjax/finetuning/config.py's keys, typed and checked once
(`FinetuneSettings.from_config`), and the rules that need the pretrained run
(`check_against`)."""

from __future__ import annotations

import dataclasses

import ml_collections

from mlmjax import typed_settings
from mlmjax.errors import ConfigError
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel.settings import MeshSettings
from mlmjax.training import config_check
from mlmjax.training import settings as training_settings
from mlmjax.training.core.optimizer import OptimizerSettings

# Muon's split of the parameters is the pretraining encoder's: fine-tuning's heads are untried.
OPTIMIZERS = ("adamw", "lamb")
POOLINGS = ("auto", "cls", "mean")


@dataclasses.dataclass(frozen=True)
class FinetuneData(typed_settings.Section):
  """config.data of fine-tuning."""

  KEY = "data"

  seq_len: int
  max_train_examples: int

  def __post_init__(self):
    if self.max_train_examples < 0:
      raise ConfigError(f"data.max_train_examples={self.max_train_examples} must be >= 0"
                        " (0: all)")


@dataclasses.dataclass(frozen=True)
class FinetuneModel(typed_settings.Section):
  """config.model of fine-tuning: what it changes of the pretrained model, and the pooling."""

  KEY = "model"

  dropout_rate: float
  attention_dropout_rate: float
  pooling: str

  def __post_init__(self):
    for key in ("dropout_rate", "attention_dropout_rate"):
      if not 0.0 <= getattr(self, key) < 1.0:
        raise ConfigError(f"model.{key}={getattr(self, key)} must be in [0, 1)")
    typed_settings.one_of("model.pooling", self.pooling, POOLINGS)

  def pooling_for(self, kind: str) -> str:
    """The pooling of a task kind: 'auto' is 'mean' for embeddings, 'cls' elsewhere."""
    if self.pooling != "auto":
      return self.pooling
    return "mean" if kind == "embedding" else "cls"


@dataclasses.dataclass(frozen=True)
class FinetuneTrain(typed_settings.Section):
  """config.train of fine-tuning."""

  KEY = "train"

  epochs: float
  batch_size: int
  nonfinite_policy: str
  max_consecutive_skips: int
  log_every_steps: int
  checkpoint_every_steps: int
  max_checkpoints_to_keep: int
  compilation_cache: str

  def __post_init__(self):
    if not self.epochs > 0:
      raise ConfigError(f"train.epochs={self.epochs} must be > 0")
    if self.log_every_steps < 1 or self.checkpoint_every_steps < 1 or (
        self.max_checkpoints_to_keep < 1):
      raise ConfigError("train.log_every_steps, train.checkpoint_every_steps and"
                        " train.max_checkpoints_to_keep must be >= 1")
    training_settings.check_nonfinite_policy(self.nonfinite_policy, self.max_consecutive_skips)
    typed_settings.check_positive("train.batch_size", self.batch_size)


@dataclasses.dataclass(frozen=True)
class QASettings(typed_settings.Section):
  """config.qa: question answering's windows and decoding."""

  KEY = "qa"

  max_query_length: int
  doc_stride: int
  max_answer_length: int
  n_best_size: int

  def __post_init__(self):
    for key in ("max_query_length", "doc_stride", "max_answer_length", "n_best_size"):
      if getattr(self, key) < 1:
        raise ConfigError(f"qa.{key}={getattr(self, key)} must be >= 1")


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings(typed_settings.Section):
  """config.embedding: the contrastive loss of sentence embeddings."""

  KEY = "embedding"

  temperature: float

  def __post_init__(self):
    if not self.temperature > 0:
      raise ConfigError(f"embedding.temperature={self.temperature} must be > 0")


@dataclasses.dataclass(frozen=True)
class FinetuneMesh(typed_settings.Section):
  """config.mesh of fine-tuning: the shape only (the rules are the pretrained run's)."""

  KEY = "mesh"

  shape: tuple

  def __post_init__(self):
    MeshSettings(self.shape, ())  # pretraining's rules for a shape


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
  """Every section of a fine-tuning config, typed."""

  seed: int
  data: FinetuneData
  model: FinetuneModel
  train: FinetuneTrain
  optimizer: OptimizerSettings
  qa: QASettings
  embedding: EmbeddingSettings
  mesh: FinetuneMesh

  def __post_init__(self):
    typed_settings.one_of("optimizer.kind", self.optimizer.kind, OPTIMIZERS)

  @classmethod
  def from_config(cls, config) -> "FinetuneSettings":
    return cls(seed=int(config.seed), data=FinetuneData.from_config(config.data),
               model=FinetuneModel.from_config(config.model),
               train=FinetuneTrain.from_config(config.train),
               optimizer=OptimizerSettings.from_config(config.optimizer),
               qa=QASettings.from_config(config.qa),
               embedding=EmbeddingSettings.from_config(config.embedding),
               mesh=FinetuneMesh.from_config(config.mesh))

  def to_config_dict(self, **records) -> ml_collections.ConfigDict:
    """The config these settings were made from, and `records` (config.json's keys: the
    trainer adds `run`, what was fine-tuned from what)."""
    return ml_collections.ConfigDict({**dataclasses.asdict(self), **records})

  def check_against(self, pretrained: ModelSettings, kind: str = "",
                    num_devices: int | None = None, num_processes: int | None = None) -> None:
    """The rules that need the pretrained run and the task `kind`: the positions, the room
    for a context after a question, and the batch on this mesh."""
    limit = pretrained.max_position_embeddings
    if not 5 <= self.data.seq_len <= limit:
      raise ConfigError(f"data.seq_len={self.data.seq_len} must be between 5 and the pretrained"
                        f" model's max_position_embeddings={limit}")
    if kind == "question_answering" and self.data.seq_len < self.qa.max_query_length + 8:
      raise ConfigError(f"data.seq_len={self.data.seq_len} leaves too little room for a context"
                        f" after qa.max_query_length={self.qa.max_query_length} tokens: make it"
                        " at least 8 more")
    config_check.check_batch_on_mesh(self.mesh.shape, self.train.batch_size, num_devices,
                                     num_processes)
