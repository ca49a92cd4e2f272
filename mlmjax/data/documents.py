"""Tokenized documents: what the row stream reads, from raw text or from prepared data.

Both kinds are split views (len, a stable repr) whose `sentences(i)` is the i-th document of
the split as int32 token ids per sentence, empty sentences dropped, and both pickle (grain
worker processes get a copy). `DocumentReader` tokenizes text on demand, every time it is asked;
prepared.PreparedSplit reads what `python -m mlmjax.prepare` stored: the same arrays, made by
the same `tokenize` below.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlmjax.data import sentences as sentences_lib
from mlmjax.data import tokenizer as tokenizer_lib


def tokenize(tok: tokenizer_lib.Tokenizer, text: str) -> list[np.ndarray]:
  """A document's sentences (sentences.py), tokenized in one batched call; empty ones dropped."""
  ids = tok.encode(sentences_lib.split_sentences(text))
  return [np.asarray(s, np.int32) for s in ids if s]


class DocumentReader:
  """Raw text -> tokenized sentences, on demand. Picklable: the tokenizer is rebuilt lazily
  from its bytes (`tok.to_bytes()`, any kind), so each grain worker process loads its own."""

  def __init__(self, source: Sequence[str], tokenizer_bytes: bytes):
    self.source = source
    self._tokenizer_bytes = tokenizer_bytes
    self._tok = None

  def __len__(self) -> int:
    return len(self.source)

  def sentences(self, index: int) -> list[np.ndarray]:
    if self._tok is None:
      self._tok = tokenizer_lib.from_bytes(self._tokenizer_bytes)
    return tokenize(self._tok, self.source[index])

  def __getstate__(self):
    return {**self.__dict__, "_tok": None}

  def __repr__(self) -> str:
    return repr(self.source)
