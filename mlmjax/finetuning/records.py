"""What one example of each fine-tuning task kind is, before tokenization.

Every class is a set of N examples held column-wise (each field a list or array of N), so that
`take` (a subset, e.g. data.max_train_examples) and `len` work the same for every kind. Readers
(examples.py, squad.py, conll.py, choices.py, kjv_tasks.py) build them; each kind's module
(classification.py, token_classification.py, question_answering.py, multiple_choice.py,
embeddings.py) encodes them into rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Records:
  """N examples, column-wise."""

  def __len__(self) -> int:
    return len(getattr(self, dataclasses.fields(self)[0].name))

  def take(self, indices) -> "Records":
    """The examples at `indices`, in that order."""
    indices = np.asarray(indices, np.int64)
    def pick(column):
      return column[indices] if isinstance(column, np.ndarray) else [column[i] for i in indices]
    return type(self)(**{f.name: pick(getattr(self, f.name))
                         for f in dataclasses.fields(self)})


@dataclasses.dataclass
class TextExamples(Records):
  """Sequence classification and regression: one text, or two for pairs, and a label."""

  texts: list[tuple[str, ...]]  # per example, its one or two texts
  labels: np.ndarray  # [N] int32 class ids, or float32 targets for regression


@dataclasses.dataclass
class TaggedExamples(Records):
  """Token classification (NER): words and one BIO tag per word."""

  words: list[list[str]]
  tags: list[list[str]]  # e.g. ["B-PER", "I-PER", "O"]; len(tags[i]) == len(words[i])


@dataclasses.dataclass
class QAExamples(Records):
  """Extractive question answering (SQuAD): an answer is a span of the context."""

  ids: list[str]  # the question's id (SQuAD's "id")
  questions: list[str]
  contexts: list[str]
  # Per question, its gold answers as (text, character offset in the context); the first
  # one is trained on. [] : the question has no answer in its context (SQuAD 2.0).
  answers: list[list[tuple[str, int]]]


@dataclasses.dataclass
class ChoiceExamples(Records):
  """Multiple choice (RACE, SWAG): a context and K options, one of them right."""

  contexts: list[str]  # the passage (RACE's article, SWAG's first sentence)
  options: list[list[str]]  # per example K texts, each the question joined with one option
  labels: np.ndarray  # [N] int32: the right option's index


@dataclasses.dataclass
class PairExamples(Records):
  """Sentence embeddings: pairs of texts that belong together (a query and its document)."""

  anchors: list[str]
  positives: list[str]
