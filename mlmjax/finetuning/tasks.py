"""Fine-tuning tasks: what the examples are, where they come from, and how they are scored.

  --task=kjv_testament | kjv_next_verse   offline, from the built-in corpus (kjv_tasks.py)
  --task=glue/NAME                        GLUE from tfds (a prepared array_record dataset under
                                          $TFDS_DATA_DIR, as for pretraining sources), or from
                                          --train_file/--dev_file with GLUE's fields and metrics
  --task=ANY_OTHER_NAME                   your own --train_file and --dev_file (.csv, .tsv with a
                                          header row, or .jsonl), --text_fields (one, or two for
                                          pairs), --label_field, --regression

The first metric of a task is its headline (GLUE's: Matthews correlation for CoLA, F1 for MRPC
and QQP, Pearson for STS-B, accuracy elsewhere). MNLI is scored on its matched dev set.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from mlmjax.errors import DataError
from mlmjax.finetuning import examples as examples_lib
from mlmjax.finetuning import glue_metrics
from mlmjax.finetuning import kjv_tasks
from mlmjax.finetuning.examples import Examples


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  text_fields: tuple[str, ...]  # one field: single-sentence task; two: sentence pairs
  metrics: tuple[str, ...]  # glue_metrics names; the first is the headline
  regression: bool = False
  label_field: str = "label"
  dev_split: str = "validation"  # tfds
  # Offline tasks: () -> (train, dev, label names).
  builtin: Callable[[], tuple[Examples, Examples, list[str]]] | None = None


_PAIR_CLASSIFICATION = ("accuracy", "f1", "matthews_corr")
TASKS = {t.name: t for t in (
    Task("kjv_testament", ("verse",), glue_metrics.CLASSIFICATION, builtin=kjv_tasks.testament),
    Task("kjv_next_verse", ("verse_a", "verse_b"), _PAIR_CLASSIFICATION,
         builtin=kjv_tasks.next_verse),
    Task("kjv_corrupted", ("verse",), glue_metrics.CLASSIFICATION, builtin=kjv_tasks.corrupted),
    Task("glue/cola", ("sentence",), ("matthews_corr", "accuracy")),
    Task("glue/sst2", ("sentence",), ("accuracy",)),
    Task("glue/mrpc", ("sentence1", "sentence2"), ("f1", "accuracy")),
    Task("glue/qqp", ("question1", "question2"), ("f1", "accuracy")),
    Task("glue/stsb", ("sentence1", "sentence2"), glue_metrics.REGRESSION, regression=True),
    Task("glue/mnli", ("premise", "hypothesis"), ("accuracy",), dev_split="validation_matched"),
    Task("glue/qnli", ("question", "sentence"), ("accuracy",)),
    Task("glue/rte", ("sentence1", "sentence2"), ("accuracy",)),
    Task("glue/wnli", ("sentence1", "sentence2"), ("accuracy",)),
)}


@dataclasses.dataclass
class TaskData:
  task: Task
  train: Examples
  dev: Examples
  label_names: list[str]  # class id -> name (empty for regression)

  @property
  def num_outputs(self) -> int:
    """Logits per example: one per class, or the single predicted score of regression."""
    return 1 if self.task.regression else len(self.label_names)


def load(name: str, train_file: str = "", dev_file: str = "", text_fields: str = "",
         label_field: str = "", regression: bool = False) -> TaskData:
  """The task `name` and its examples (see the module docstring for the sources)."""
  files = bool(train_file or dev_file)
  if files and not (train_file and dev_file):
    raise DataError("give both --train_file and --dev_file (or neither)")
  task = TASKS.get(name)
  if task is None:
    if not files:
      raise DataError(f"unknown --task={name!r}: use one of {', '.join(TASKS)}, or name your"
                      " own task and give its --train_file and --dev_file")
    metrics = glue_metrics.REGRESSION if regression else glue_metrics.CLASSIFICATION
    task = Task(name, ("text",), metrics, regression=regression)
  if text_fields or label_field:
    fields = tuple(f.strip() for f in text_fields.split(",")) if text_fields else task.text_fields
    if not 1 <= len(fields) <= 2 or not all(fields):
      raise DataError(f"--text_fields={text_fields!r}: name one field, or two for pairs")
    task = dataclasses.replace(task, text_fields=fields, label_field=label_field or "label")
  if task.builtin is not None and not files:
    return TaskData(task, *task.builtin())
  if files:
    train_raw = examples_lib.read_file(train_file, task.text_fields, task.label_field)
    dev_raw = examples_lib.read_file(dev_file, task.text_fields, task.label_field)
    names, context = [], train_file
  else:  # glue/NAME from tfds
    *train_raw, names = examples_lib.read_tfds(task.name, "train", task.text_fields,
                                               task.label_field)
    *dev_raw, _ = examples_lib.read_tfds(task.name, task.dev_split, task.text_fields,
                                         task.label_field)
    context = task.name
  if task.regression:
    train_y = examples_lib.regression_labels(train_raw[1], train_file or context)
    dev_y = examples_lib.regression_labels(dev_raw[1], dev_file or context)
    names = []
  else:
    train_y, dev_y, names = examples_lib.class_labels(train_raw[1], dev_raw[1], names, context)
    if len(names) > 2 and "f1" in task.metrics:  # binary F1 means nothing for more classes
      task = dataclasses.replace(task, metrics=tuple(m for m in task.metrics if m != "f1"))
  return TaskData(task, Examples(train_raw[0], train_y), Examples(dev_raw[0], dev_y), names)


def majority_accuracy(data: TaskData) -> float | None:
  """Dev accuracy of always predicting the training set's most frequent class: the bar."""
  if data.task.regression:
    return None
  most_frequent = np.bincount(data.train.labels).argmax()
  return float(np.mean(data.dev.labels == most_frequent))
