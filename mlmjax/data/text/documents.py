"""Tokenized documents: what the row stream reads, from raw text or from prepared data.

Both kinds are split views (len, a stable repr) whose `sentences(i)` is the i-th document of
the split as int32 token ids per sentence, empty sentences dropped, and both pickle (grain
worker processes get a copy). `DocumentReader` tokenizes text on demand, every time it is asked;
reader.PreparedSplit (data/prepared/) reads what `python -m mlmjax.prepare` stored: the same
arrays, made by the same `tokenize` below. With word annotations (annotation.py: the syntax and NER-entity
masking strategies), each sentence is an [n, 1 + F] array: ids, then features.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlmjax.data.text import annotation
from mlmjax.data.text import sentences as sentences_lib
from mlmjax.data.text import tokenizer as tokenizer_lib


def tokenize(tok: tokenizer_lib.Tokenizer, text: str,
             annotator: annotation.Annotator | None = None) -> list[np.ndarray]:
  """A document's sentences (sentences.py), tokenized in one batched call, empty ones dropped;
  with `annotator`, each sentence's pieces with their word features (annotation.py)."""
  sentences = sentences_lib.split_sentences(text)
  if annotator is None:
    return [np.asarray(s, np.int32) for s in tok.encode(sentences) if s]
  return annotated(tok, annotator, sentences, annotator.nlp(annotator.text(sentences)))


def annotated(tok: tokenizer_lib.Tokenizer, annotator: annotation.Annotator,
              sentences: list[str], doc) -> list[np.ndarray]:
  """Sentences and spaCy's parse of them (`doc`) -> [n, 1 + F] arrays, empty ones dropped."""
  encoded = tok.encode_offsets(sentences)
  features = annotator.features(doc, sentences, [(a, b) for _, a, b in encoded])
  return [s for s in annotation.with_features([ids for ids, _, _ in encoded], features)
          if len(s)]


class DocumentReader:
  """Raw text -> tokenized sentences, on demand. Picklable: the tokenizer is rebuilt lazily
  from its bytes (`tok.to_bytes()`, any kind), so each grain worker process loads its own."""

  def __init__(self, source: Sequence[str], tokenizer_bytes: bytes,
               annotator: annotation.Annotator | None = None):
    self.source = source
    self._tokenizer_bytes = tokenizer_bytes
    self.annotator = annotator
    self._tok = None

  def __len__(self) -> int:
    return len(self.source)

  @property
  def annotated(self) -> bool:
    return self.annotator is not None

  def sentences(self, index: int) -> list[np.ndarray]:
    if self._tok is None:
      self._tok = tokenizer_lib.from_bytes(self._tokenizer_bytes)
    return tokenize(self._tok, self.source[index], self.annotator)

  def __getstate__(self):
    return {**self.__dict__, "_tok": None}

  def __repr__(self) -> str:
    return repr(self.source)
