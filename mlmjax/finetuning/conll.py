"""Sentences of words and their NER tags: CoNLL-style text files, or HF datasets' .jsonl/.parquet.

Text files (.conll, .txt, .iob, .tsv; no header) hold one token a line, the token in the first
column and its tag in the last (CoNLL-2003's POS and chunk columns between are ignored); a blank
line ends a sentence and `-DOCSTART-` lines are skipped. A .jsonl or .parquet file holds one
sentence a record (HF datasets' layout): `tokens` and `ner_tags`, the tags either strings or
class ids mapped through `tag_names` (a .parquet file written by HF datasets names them in its
metadata, used when no tag_names are given). Every tag is O or B-, I-, E-, S-TYPE (the BIO and
IOBES schemes); empty sentences are skipped.
"""

from __future__ import annotations

import json
import os
import re

from mlmjax.data.corpora import streamed
from mlmjax.errors import DataError
from mlmjax.finetuning import examples as examples_lib
from mlmjax.finetuning.records import TaggedExamples

TEXT_SUFFIXES = (".conll", ".txt", ".iob", ".tsv")
_TAG = re.compile(r"O|[BIES]-.+")


def _check_tag(tag: str, where: str) -> str:
  if not _TAG.fullmatch(tag):
    raise DataError(f"{where}: tag {tag!r} is not O or B-, I-, E-, S-TYPE (the BIO and IOBES"
                    " schemes)")
  return tag


def _read_text(path: str) -> TaggedExamples:
  words, tags, sentence, sentence_tags = [], [], [], []
  def end_sentence():
    if sentence:
      words.append(list(sentence))
      tags.append(list(sentence_tags))
      sentence.clear()
      sentence_tags.clear()
  try:
    with open(path, encoding="utf-8-sig") as f:
      for n, line in enumerate(f, 1):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
          end_sentence()
          continue
        if len(columns) == 1:
          raise DataError(f"{path}:{n}: one column ({line.strip()!r}); expected a token and its"
                          " tag in the last column")
        sentence.append(columns[0])
        sentence_tags.append(_check_tag(columns[-1], f"{path}:{n}"))
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
  end_sentence()
  return TaggedExamples(words, tags)


def _hf_tag_names(schema) -> list[str] | None:
  """The names of `ner_tags`' class ids that HF datasets writes in a parquet file's metadata."""
  try:
    info = json.loads((schema.metadata or {})[b"huggingface"])
    return list(info["info"]["features"]["ner_tags"]["feature"]["names"])
  except (KeyError, TypeError, ValueError):
    return None


def _read_parquet(path: str) -> tuple[list[dict], list[str] | None]:
  """(records of tokens and ner_tags, tag names from the file's metadata or None)."""
  pyarrow = streamed.pyarrow_for(path)  # one line when pyarrow is missing
  try:
    table = pyarrow.parquet.read_table(path)
  except (OSError, pyarrow.ArrowException) as e:
    raise DataError(f"{path}: not a Parquet file ({e})") from None
  for name in ("tokens", "ner_tags"):
    if name not in table.column_names:
      raise DataError(f"{path}: no column {name!r} (it has {', '.join(table.column_names)})")
  records = table.select(["tokens", "ner_tags"]).to_pylist()
  return records, _hf_tag_names(table.schema)


def _from_records(records, tag_names: list[str] | None, path: str) -> TaggedExamples:
  words, tags = [], []
  for i, record in enumerate(records):
    where = f"{path}: record {i + 1}"
    tokens, ner_tags = (examples_lib.field(record, name, where) for name in ("tokens", "ner_tags"))
    for name, value in (("tokens", tokens), ("ner_tags", ner_tags)):
      if not isinstance(value, list):
        raise DataError(f"{where}: {name!r} is not a list")
    if len(tokens) != len(ner_tags):
      raise DataError(f"{where}: tokens and ner_tags differ in length ({len(tokens)} and"
                      f" {len(ner_tags)})")
    if not tokens:
      continue
    sentence_tags = []
    for tag in ner_tags:
      if isinstance(tag, int) and not isinstance(tag, bool):
        if tag_names is None:
          raise DataError(f"{where}: ner_tags are class ids ({tag}) and no tag names were given"
                          " to map them")
        if not 0 <= tag < len(tag_names):
          raise DataError(f"{where}: tag id {tag} is out of range ({len(tag_names)} tag names)")
        tag = tag_names[tag]
      sentence_tags.append(_check_tag(str(tag).strip(), where))
    words.append([str(t).strip() for t in tokens])
    tags.append(sentence_tags)
  return TaggedExamples(words, tags)


def read(path: str, tag_names: list[str] | None = None) -> TaggedExamples:
  """The sentences of a CoNLL-style text file, or of a .jsonl / .parquet file (see above)."""
  if not path.endswith((*TEXT_SUFFIXES, ".jsonl", ".parquet")):
    raise DataError(f"{path}: expected a CoNLL text file ({', '.join(TEXT_SUFFIXES)}), a .jsonl"
                    " or a .parquet file")
  if not os.path.isfile(path):
    raise DataError(f"{path}: no such file")
  if path.endswith(TEXT_SUFFIXES):
    examples = _read_text(path)
  elif path.endswith(".jsonl"):
    examples = _from_records(examples_lib.read_records(path), tag_names, path)
  else:
    records, names = _read_parquet(path)
    examples = _from_records(records, tag_names if tag_names is not None else names, path)
  if not len(examples):
    raise DataError(f"{path}: no sentences")
  return examples


def check_tags(train: TaggedExamples, dev: TaggedExamples, context: str) -> list[str]:
  """The tag vocabulary: "O", then the training set's other tags in sorted order. A dev tag the
  training set never has is a DataError."""
  names = ["O"] + sorted({t for tags in train.tags for t in tags} - {"O"})
  known = set(names)
  for i, tags in enumerate(dev.tags):
    for tag in tags:
      if tag not in known:
        raise DataError(f"{context}: dev tag {tag!r} (sentence {i + 1}) never occurs in the"
                        f" training set (its tags: {', '.join(names)})")
  return names
