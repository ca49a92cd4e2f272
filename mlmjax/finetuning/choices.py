"""Multiple-choice examples (SWAG, RACE): a context, K options and the right one's index.

  .csv     SWAG's columns (HF swag): sent1 (the context), sent2, ending0 .. ending{K-1}, label;
           option k is `sent2 ending_k`
  .jsonl   {"context", "question" (optional), "options": [...], "label": int}; an option's text
           is `question option`, or, where the question holds a blank "_", the question with
           the option in the blank (as fairseq prepares RACE)
  tfds     race/high, race/middle (and race/all: both): one record an article, with its
           questions, options and answers (letters A, B, ...); each question is one example

Every example has the same number of options, at least 2. Texts are stripped.
"""

from __future__ import annotations

import numpy as np

from mlmjax.errors import DataError
from mlmjax.finetuning import examples as examples_lib
from mlmjax.finetuning.records import ChoiceExamples

_RACE_FEATURES = ("article", "questions", "options", "answers")


def _text(value) -> str:
  return examples_lib.as_text(value).strip()


def option_text(question: str, option: str) -> str:
  """An option as the model reads it: in the question's blank "_", else after the question."""
  question, option = question.strip(), option.strip()
  if "_" in question:
    return question.replace("_", option).strip()
  return f"{question} {option}".strip()


class _Choices:
  """ChoiceExamples being read: each example's options counted and its label checked."""

  def __init__(self, what: str):
    self.what, self.contexts, self.options, self.labels = what, [], [], []

  def add(self, where: str, context: str, options: list[str], label):
    if len(options) < 2:
      raise DataError(f"{where} has {len(options)} options; a multiple-choice example needs at"
                      " least 2")
    if self.options and len(options) != len(self.options[0]):
      raise DataError(f"{where} has {len(options)} options, the first example"
                      f" {len(self.options[0])}; every example needs the same number")
    try:
      index = int(label) if not isinstance(label, (bool, float)) else None
    except (TypeError, ValueError):
      index = None
    if index is None or not 0 <= index < len(options):
      raise DataError(f"{where}: label {label!r} is not an option's index, 0 to"
                      f" {len(options) - 1}")
    self.contexts.append(context)
    self.options.append(options)
    self.labels.append(index)

  def examples(self) -> ChoiceExamples:
    if not self.contexts:
      raise DataError(f"{self.what}: no examples")
    return ChoiceExamples(self.contexts, self.options, np.asarray(self.labels, np.int32))


def read_file(path: str) -> ChoiceExamples:
  """The examples of a SWAG-style .csv file or a .jsonl file (see above), in the file's order."""
  if not path.endswith((".csv", ".jsonl")):
    raise DataError(f"{path}: expected a .csv (SWAG's columns) or .jsonl file")
  choices = _Choices(path)
  for i, record in enumerate(examples_lib.read_records(path)):
    where = f"{path}: record {i + 1}"
    if path.endswith(".csv"):
      context = examples_lib.text_field(record, "sent1", where)
      sent2 = examples_lib.text_field(record, "sent2", where)
      endings = []
      while f"ending{len(endings)}" in record or len(endings) < 2:
        endings.append(examples_lib.text_field(record, f"ending{len(endings)}", where))
      options = [f"{sent2} {ending}".strip() for ending in endings]
    else:
      context = examples_lib.text_field(record, "context", where)
      question = (examples_lib.text_field(record, "question", where) if "question" in record
                  else "")
      raw = examples_lib.field(record, "options", where)
      if not isinstance(raw, list):
        raise DataError(f"{where}: 'options' is not a list")
      options = [option_text(question, _text(option)) for option in raw]
    choices.add(where, context, options, examples_lib.field(record, "label", where))
  return choices.examples()


def _race_names(name: str) -> list[str]:
  """race/all[:VERSION] is race/high and race/middle (as HF's race/all); others as they are."""
  dataset, colon, version = name.partition(":")
  base, slash, config = dataset.rpartition("/")
  if slash and config == "all":
    return [f"{base}/{c}{colon}{version}" for c in ("high", "middle")]
  return [name]


def _add_race_records(choices: _Choices, records, where: str):
  """Adds each question of tfds race records (dicts of race's features) as one example."""
  for i, record in enumerate(records):
    article_id = _text(record.get("example_id") or "")
    article = f"{where}: article {article_id!r}" if article_id else f"{where}: record {i + 1}"
    questions, options, answers = (list(record[f]) for f in ("questions", "options", "answers"))
    if not len(questions) == len(options) == len(answers):
      raise DataError(f"{article} has {len(questions)} questions, {len(options)} option lists"
                      f" and {len(answers)} answers")
    context = _text(record["article"])
    for q, (question, question_options, answer) in enumerate(zip(questions, options, answers)):
      question_options = [_text(o) for o in question_options]
      letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:len(question_options)]
      answer = _text(answer)
      if len(answer) != 1 or answer not in letters:
        raise DataError(f"{article} question {q + 1}: answer {answer!r} is not an option's"
                        f" letter, {letters[:1]} to {letters[-1:]}")
      choices.add(f"{article} question {q + 1}", context,
                  [option_text(_text(question), o) for o in question_options],
                  letters.index(answer))


def read_race_tfds(name: str, split: str) -> ChoiceExamples:
  """The questions of a prepared tfds RACE dataset's split (race/high, race/middle, race/all),
  or of another with its features: article, questions, options, answers."""
  choices = _Choices(f"{name}:{split}")
  for part in _race_names(name):
    records, _ = examples_lib.tfds_records(part, split, name, _RACE_FEATURES, "RACE's")
    _add_race_records(choices, records, f"{part}:{split}")
  return choices.examples()
