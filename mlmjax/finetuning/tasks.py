"""Fine-tuning tasks: what the examples are, where they come from, and which kind of task
(kind.py) trains and scores them.

  offline, from the built-in corpus (kjv_tasks.py):
    kjv_testament, kjv_next_verse, kjv_corrupted    sequence classification
    kjv_entities                                    token classification (names, BIO tags)
    kjv_qa                                          extractive QA, SQuAD 2.0-style
    kjv_continuation                                multiple choice (the next verse of four)
    kjv_retrieval                                   sentence embeddings (verse -> next verse)
  from tfds (a prepared array_record dataset under $TFDS_DATA_DIR, as for pretraining sources):
    glue/NAME                                       GLUE (also from --train_file/--dev_file)
    squad/v1.1, squad/v2.0                          SQuAD (also the official JSON files)
    race/high, race/middle, race/all                RACE
  your own --train_file and --dev_file, with --kind:
    classification | regression   .csv, .tsv (header row) or .jsonl: --text_fields (one, or two
                                  for pairs), --label_field
    token_classification          CoNLL-style files (token ... tag per line), or .jsonl/.parquet
                                  with `tokens` and `ner_tags` (--tag_names for numeric tags)
    question_answering            SQuAD's JSON layout
    multiple_choice               SWAG's .csv (sent1, sent2, ending0..3, label) or .jsonl
                                  {"context", "question", "options", "label"}
    embedding                     pairs, .csv/.tsv/.jsonl: --text_fields=anchor,positive

The first metric of a classification task is its headline (GLUE's: Matthews correlation for
CoLA, F1 for MRPC and QQP, Pearson for STS-B, accuracy elsewhere); the other kinds' headlines
are entity F1, SQuAD F1, accuracy and MRR. MNLI is scored on its matched dev set.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from mlmjax.errors import CommandLineError
from mlmjax.errors import DataError
from mlmjax.finetuning import choices
from mlmjax.finetuning import classification
from mlmjax.finetuning import conll
from mlmjax.finetuning import embeddings
from mlmjax.finetuning import examples as examples_lib
from mlmjax.finetuning import glue_metrics
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning import kjv_tasks
from mlmjax.finetuning import multiple_choice
from mlmjax.finetuning import pairs
from mlmjax.finetuning import question_answering
from mlmjax.finetuning import records
from mlmjax.finetuning import squad
from mlmjax.finetuning import token_classification

KINDS = ("classification", "regression", "token_classification", "question_answering",
         "multiple_choice", "embedding")


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  kind: str = "classification"  # one of KINDS
  text_fields: tuple[str, ...] = ("text",)  # classification: one field, or two for pairs
  metrics: tuple[str, ...] = glue_metrics.CLASSIFICATION  # classification's; the headline first
  label_field: str = "label"
  dev_split: str = "validation"  # tfds
  # Offline tasks: () -> (train, dev, label names).
  builtin: Callable[[], tuple] | None = None

  @property
  def regression(self) -> bool:
    return self.kind == "regression"


_PAIR_CLASSIFICATION = ("accuracy", "f1", "matthews_corr")
TASKS = {t.name: t for t in (
    Task("kjv_testament", text_fields=("verse",), builtin=kjv_tasks.testament),
    Task("kjv_next_verse", text_fields=("verse_a", "verse_b"), metrics=_PAIR_CLASSIFICATION,
         builtin=kjv_tasks.next_verse),
    Task("kjv_corrupted", text_fields=("verse",), builtin=kjv_tasks.corrupted),
    Task("kjv_entities", "token_classification", builtin=kjv_tasks.entities),
    Task("kjv_qa", "question_answering", builtin=kjv_tasks.qa),
    Task("kjv_continuation", "multiple_choice", builtin=kjv_tasks.continuation),
    Task("kjv_retrieval", "embedding", builtin=kjv_tasks.retrieval),
    Task("glue/cola", text_fields=("sentence",), metrics=("matthews_corr", "accuracy")),
    Task("glue/sst2", text_fields=("sentence",), metrics=("accuracy",)),
    Task("glue/mrpc", text_fields=("sentence1", "sentence2"), metrics=("f1", "accuracy")),
    Task("glue/qqp", text_fields=("question1", "question2"), metrics=("f1", "accuracy")),
    Task("glue/stsb", "regression", ("sentence1", "sentence2"), glue_metrics.REGRESSION),
    Task("glue/mnli", text_fields=("premise", "hypothesis"), metrics=("accuracy",),
         dev_split="validation_matched"),
    Task("glue/qnli", text_fields=("question", "sentence"), metrics=("accuracy",)),
    Task("glue/rte", text_fields=("sentence1", "sentence2"), metrics=("accuracy",)),
    Task("glue/wnli", text_fields=("sentence1", "sentence2"), metrics=("accuracy",)),
    Task("squad/v1.1", "question_answering"),
    Task("squad/v2.0", "question_answering"),
    Task("race/high", "multiple_choice", dev_split="dev"),
    Task("race/middle", "multiple_choice", dev_split="dev"),
    Task("race/all", "multiple_choice", dev_split="dev"),  # high, then middle
)}


@dataclasses.dataclass
class TaskData:
  task: Task
  train: records.Records
  dev: records.Records
  label_names: list[str]  # class id (or tag id) -> name; empty where the kind has none

  def kind(self, settings) -> kind_lib.Kind:
    """The task's kind, with the fine-tuning `settings` (finetuning/settings.py) it reads."""
    unanswerable = self.task.kind == "question_answering" and any(
        not a for a in self.train.answers + self.dev.answers)
    return make_kind(self.task.kind, settings, self.label_names, self.task.metrics,
                     unanswerable)


def make_kind(name: str, settings, label_names: list[str],
              metrics: tuple[str, ...] = glue_metrics.CLASSIFICATION,
              unanswerable: bool = False) -> kind_lib.Kind:
  """The kind `name` (one of KINDS) of a task with these labels; `unanswerable`: a QA task
  with questions that have no answer (SQuAD 2.0)."""
  if name in ("classification", "regression"):
    return classification.Classification(metrics, label_names, name == "regression")
  if name == "token_classification":
    return token_classification.TokenClassification(label_names)
  if name == "question_answering":
    return question_answering.QuestionAnswering(settings.qa, unanswerable)
  if name == "multiple_choice":
    return multiple_choice.MultipleChoice()
  return embeddings.Embedding(settings.embedding.temperature)


def load(name: str, train_file: str = "", dev_file: str = "", text_fields: str = "",
         label_field: str = "", regression: bool = False, kind: str = "",
         tag_names: str = "") -> TaskData:
  """The task `name` and its examples (see the module docstring for the sources)."""
  files = bool(train_file or dev_file)
  if files and not (train_file and dev_file):
    raise CommandLineError("give both --train_file and --dev_file (or neither)")
  if kind and kind not in KINDS:
    raise DataError(f"unknown --kind={kind!r}: use one of {', '.join(KINDS)}")
  task = TASKS.get(name)
  if task is None:
    if not files:
      raise CommandLineError(f"unknown --task={name!r}: use one of {', '.join(TASKS)}, or name"
                             " your own task and give its --train_file and --dev_file (and"
                             " --kind)")
    kind = kind or ("regression" if regression else "classification")
    task = Task(name, kind, metrics=glue_metrics.REGRESSION if kind == "regression" else
                glue_metrics.CLASSIFICATION)
  elif kind and kind != task.kind:
    raise DataError(f"--task={name} is a {task.kind} task, not {kind}")
  if regression and task.kind != "regression":
    raise DataError(f"--regression: --task={name} is a {task.kind} task")
  if (text_fields or label_field) and task.kind not in ("classification", "regression",
                                                        "embedding"):
    raise DataError("--text_fields and --label_field name the fields of classification and"
                    f" embedding files; a {task.kind} file's fields are fixed")
  if task.builtin is not None and not files:
    return TaskData(task, *task.builtin())
  if task.kind in ("classification", "regression"):
    return _load_classification(task, train_file, dev_file, text_fields, label_field)
  train, dev, names = _read(task, train_file, dev_file, text_fields, tag_names)
  return TaskData(task, train, dev, names)


def _read(task: Task, train_file: str, dev_file: str, text_fields: str, tag_names: str
          ) -> tuple[records.Records, records.Records, list[str]]:
  """(train, dev, label names) of a task of the other kinds, from files or tfds."""
  if not train_file:  # a named tfds task
    reader = {"question_answering": squad.read_tfds,
              "multiple_choice": choices.read_race_tfds}.get(task.kind)
    if reader is None:
      raise DataError(f"--task={task.name}: give its --train_file and --dev_file")
    return reader(task.name, "train"), reader(task.name, task.dev_split), []
  if task.kind == "token_classification":
    names = [t.strip() for t in tag_names.split(",")] if tag_names else None
    train, dev = conll.read(train_file, names), conll.read(dev_file, names)
    return train, dev, conll.check_tags(train, dev, dev_file)
  if task.kind == "question_answering":
    return squad.read_json(train_file), squad.read_json(dev_file), []
  if task.kind == "multiple_choice":
    return choices.read_file(train_file), choices.read_file(dev_file), []
  fields = tuple(f.strip() for f in text_fields.split(",")) if text_fields else (
      "anchor", "positive")
  if len(fields) != 2:
    raise DataError(f"--text_fields={text_fields!r}: name the two fields of a pair")
  return pairs.read_file(train_file, fields), pairs.read_file(dev_file, fields), []


def _load_classification(task: Task, train_file: str, dev_file: str, text_fields: str,
                         label_field: str) -> TaskData:
  if text_fields or label_field:
    fields = tuple(f.strip() for f in text_fields.split(",")) if text_fields else task.text_fields
    if not 1 <= len(fields) <= 2 or not all(fields):
      raise DataError(f"--text_fields={text_fields!r}: name one field, or two for pairs")
    task = dataclasses.replace(task, text_fields=fields, label_field=label_field or "label")
  if train_file:
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
  return TaskData(task, records.TextExamples(train_raw[0], train_y),
                  records.TextExamples(dev_raw[0], dev_y), names)
