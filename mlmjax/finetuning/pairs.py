"""Pairs of texts that belong together (a query and its document), for sentence embeddings.

Read from a .csv / .tsv file with a header row or a .jsonl file of objects: one pair a record,
its two texts in two named fields (by default `anchor` and `positive`). Also the record reading
the other readers of tables share (choices.py, conll.py): `read_records`, `text_field`.
"""

from __future__ import annotations

import csv
import json
import os

from mlmjax.errors import DataError
from mlmjax.finetuning.records import PairExamples

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl")


def read_records(path: str) -> list[dict]:
  """The records of a .csv / .tsv file with a header row, or of a .jsonl file of objects.

  A .tsv file's fields are separated by tabs alone (quotes are text, as in GLUE's files); a
  .csv row shorter than the header has None for its missing fields."""
  if not path.endswith(TABLE_SUFFIXES):
    raise DataError(f"{path}: expected a .csv, .tsv or .jsonl file")
  if not os.path.isfile(path):
    raise DataError(f"{path}: no such file")
  try:
    with open(path, encoding="utf-8-sig", newline="") as f:
      if path.endswith(".jsonl"):
        records = []
        for n, line in enumerate(f, 1):
          if line.strip():
            try:
              record = json.loads(line)
            except ValueError:
              record = None
            if not isinstance(record, dict):
              raise DataError(f"{path}:{n}: not a JSON object")
            records.append(record)
        return records
      tsv = dict(delimiter="\t", quoting=csv.QUOTE_NONE) if path.endswith(".tsv") else {}
      return list(csv.DictReader(f, **tsv))
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def field(record: dict, name: str, where: str):
  """record[name]; a DataError starting with `where` when the record lacks it (a JSON null or a
  short .csv row's missing value included)."""
  if name not in record:
    raise DataError(f"{where} has no field {name!r} (it has {', '.join(map(str, record))})")
  if record[name] is None:
    raise DataError(f"{where} has no value for {name!r}")
  return record[name]


def text_field(record: dict, name: str, where: str) -> str:
  """record[name] as text, stripped (numbers as written); a list or an object is a DataError."""
  value = field(record, name, where)
  if isinstance(value, (list, dict)):
    raise DataError(f"{where}: {name!r} is a {'list' if isinstance(value, list) else 'object'},"
                    " not text")
  if isinstance(value, bytes):
    value = value.decode("utf-8", "replace")
  return str(value).strip()


def read_file(path: str, fields=("anchor", "positive")) -> PairExamples:
  """The pairs of a .csv / .tsv file with a header row or a .jsonl file: per record the texts
  of `fields` (anchor, positive), both non-empty."""
  fields = tuple(fields)
  if len(fields) != 2:
    raise DataError(f"{path}: name two fields, the anchor's and the positive's (not {fields})")
  anchors, positives = [], []
  for i, record in enumerate(read_records(path)):
    where = f"{path}: record {i + 1}"
    anchor, positive = (text_field(record, name, where) for name in fields)
    for name, text in zip(fields, (anchor, positive)):
      if not text:
        raise DataError(f"{where} has an empty {name!r}")
    anchors.append(anchor)
    positives.append(positive)
  if not anchors:
    raise DataError(f"{path}: no pairs")
  return PairExamples(anchors, positives)
