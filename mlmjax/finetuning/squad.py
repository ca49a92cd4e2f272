"""SQuAD v1.1 / v2.0 questions: from the official JSON files or a prepared tfds dataset.

The JSON is {"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible"}]}]}]} (v1.1 has no is_impossible); tfds'
squad/v1.1 and squad/v2.0 hold one question a record, with its context and its answers as
{"text": [...], "answer_start": [...]} (v2.0 also is_impossible). An answer's answer_start is a
character offset in the context, checked: the answer's text must be there. Texts are stripped;
offsets move with the context's and the answer's stripped leading whitespace. A question without
answers must be is_impossible (its answers: []); ids are unique.
"""

from __future__ import annotations

import json
import os

from mlmjax.errors import DataError
from mlmjax.finetuning import examples as examples_lib
from mlmjax.finetuning.examples import as_text as _text
from mlmjax.finetuning.records import QAExamples

_FEATURES = ("id", "question", "context", "answers")


class _Questions:
  """QAExamples being read: each question checked, stripped and added in order."""

  def __init__(self, where: str):
    self.where, self.ids, self.questions, self.contexts, self.answers = where, [], [], [], []
    self._seen = set()

  def add(self, qid: str, question: str, context: str, answers: list[tuple[str, int]],
          is_impossible: bool | None):
    name = f"{self.where}: question {qid!r}"
    if qid in self._seen:
      raise DataError(f"{name} occurs twice; question ids must be unique")
    if is_impossible and answers:
      raise DataError(f"{name} is_impossible but has {len(answers)} answers")
    if not answers and not is_impossible:
      raise DataError(f"{name} has no answers and is not is_impossible (SQuAD 2.0's"
                      " unanswerable questions)")
    lead = len(context) - len(context.lstrip())
    stripped = []
    for text, start in answers:
      there = context[start:start + len(text)] if start >= 0 else ""
      if there != text:
        raise DataError(f"{name}: answer {text!r} is not at character {start} of its context"
                        f" (there: {there!r})")
      if not text.strip():
        raise DataError(f"{name}: an empty answer at character {start}")
      stripped.append((text.strip(), start + len(text) - len(text.lstrip()) - lead))
    self._seen.add(qid)
    self.ids.append(qid)
    self.questions.append(question.strip())
    self.contexts.append(context.strip())
    self.answers.append(stripped)

  def examples(self) -> QAExamples:
    if not self.ids:
      raise DataError(f"{self.where}: no questions")
    return QAExamples(self.ids, self.questions, self.contexts, self.answers)


def _get(obj: dict, name: str, where: str, kind: type):
  """obj[name], of type `kind` (int: not a bool); a DataError naming `where` otherwise."""
  if name not in obj:
    raise DataError(f"{where} has no field {name!r}")
  value = obj[name]
  if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
    kinds = {str: "a string", int: "an integer", bool: "true or false", list: "a list"}
    raise DataError(f"{where}: {name!r} is {json.dumps(value)[:40]}, not {kinds[kind]}")
  return value


def _objects(obj: dict, name: str, where: str, item: str):
  """(`item` N, object) of each object in the list obj[name] (`where` names obj)."""
  for n, value in enumerate(_get(obj, name, where, list), 1):
    if not isinstance(value, dict):
      raise DataError(f"{item} {n} is not an object")
    yield f"{item} {n}", value


def read_json(path: str) -> QAExamples:
  """The questions of an official SQuAD v1.1 or v2.0 JSON file, in the file's order."""
  if not os.path.isfile(path):
    raise DataError(f"{path}: no such file")
  try:
    with open(path, encoding="utf-8-sig") as f:
      content = f.read()
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
  if not content.strip():
    raise DataError(f"{path}: empty file; expected SQuAD's JSON")
  try:
    squad = json.loads(content)
  except ValueError as e:
    raise DataError(f"{path}: not JSON ({e})") from None
  if not isinstance(squad, dict):
    raise DataError(f"{path}: expected SQuAD's JSON, an object with a \"data\" list")
  questions = _Questions(path)
  for article_at, article in _objects(squad, "data", path, f"{path}: article"):
    for paragraph_at, paragraph in _objects(article, "paragraphs", article_at,
                                            f"{article_at} paragraph"):
      context = _get(paragraph, "context", paragraph_at, str)
      for qa_at, qa in _objects(paragraph, "qas", paragraph_at, f"{paragraph_at} question"):
        qid = _get(qa, "id", qa_at, str)
        where = f"{path}: question {qid!r}"
        question = _get(qa, "question", where, str)
        is_impossible = _get(qa, "is_impossible", where, bool) if "is_impossible" in qa else None
        answers = []
        if "answers" in qa or not is_impossible:  # v2.0 may leave out an impossible's []
          for answer_at, answer in _objects(qa, "answers", where, f"{where}: answer"):
            answers.append((_get(answer, "text", answer_at, str),
                            _get(answer, "answer_start", answer_at, int)))
        questions.add(qid, question, context, answers, is_impossible)
  return questions.examples()


def from_records(records, where: str) -> QAExamples:
  """The questions of tfds squad records (dicts of squad's features; bytes or str), in order."""
  questions = _Questions(where)
  for record in records:
    answers = record["answers"]
    texts, starts = list(answers["text"]), list(answers["answer_start"])
    is_impossible = record.get("is_impossible")
    questions.add(_text(record["id"]), _text(record["question"]), _text(record["context"]),
                  [(_text(t), int(s)) for t, s in zip(texts, starts)],
                  None if is_impossible is None else bool(is_impossible))
  return questions.examples()


def read_tfds(name: str, split: str) -> QAExamples:
  """The questions of a prepared tfds dataset's split: squad/v1.1 or squad/v2.0, or another
  with their features (id, question, context, answers; is_impossible optional)."""
  records, _ = examples_lib.tfds_records(name, split, name, _FEATURES, "SQuAD's")
  return from_records(records, f"{name}:{split}")
