"""Labelled examples of a fine-tuning task read from tfds, CSV/TSV or JSONL; and the reading of
table files (`read_records`, `field`, `text_field`) every reader shares.

An example is one text (single-sentence tasks) or two (sentence-pair tasks) and a label: a class
id, or a number for regression (kind.py's `encode_texts` makes its row). Fine-tuning sets are
small (GLUE's largest, MNLI, has 393k examples): they are read and encoded once, in memory.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np

from mlmjax.data.corpora import sources
from mlmjax.errors import DataError
from mlmjax.finetuning import records


# The examples this module reads and encodes (records.py).
Examples = records.TextExamples


# ---- reading -----------------------------------------------------------------------------------
def as_text(value) -> str:
  """A record's value as text (tfds gives bytes; numbers as written)."""
  return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def from_records(records, text_fields, label_field: str, context: str) -> tuple[list, list]:
  """(texts, raw labels) of dict-like records; a missing field is a DataError naming it."""
  texts, labels = [], []
  for i, record in enumerate(records):
    missing = [f for f in (*text_fields, label_field) if f not in record]
    if missing:
      raise DataError(f"{context}: record {i + 1} has no field {missing[0]!r} (it has"
                      f" {', '.join(map(str, record))}); name the fields with --text_fields and"
                      " --label_field")
    where = f"{context}: record {i + 1}"  # a short .csv row or a null: no value
    texts.append(tuple(text_field(record, f, where) for f in text_fields))
    labels.append(field(record, label_field, where))
  if not texts:
    raise DataError(f"{context}: no examples")
  return texts, labels


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
  return as_text(value).strip()


def read_file(path: str, text_fields, label_field: str) -> tuple[list, list]:
  """A .csv / .tsv file with a header row, or a .jsonl file of objects."""
  return from_records(read_records(path), text_fields, label_field, path)


def tfds_records(name: str, split: str, task: str, required, whose: str):
  """(the records, the info) of a prepared tfds dataset's split; a one-line error when it
  lacks one of the `required` features (`whose`: e.g. "SQuAD's")."""
  data_source, info = sources.tfds_split(name, split, f"--task={task}")
  features = list(info.features.keys())
  missing = [f for f in required if f not in features]
  if missing:
    raise DataError(f"--task={task}: dataset {name!r} has no feature {missing[0]!r} (it has"
                    f" {', '.join(features)}); expected {whose} features")
  return (data_source[i] for i in range(len(data_source))), info


def read_tfds(name: str, split: str, text_fields, label_field: str) -> tuple[list, list, list]:
  """(texts, labels, label names) of a prepared tfds dataset's split (e.g. glue/mrpc)."""
  data_source, info = sources.tfds_split(name, split, f"--task={name}")
  feature = info.features[label_field]
  names = list(getattr(feature, "names", None) or [])
  texts, labels = from_records((data_source[i] for i in range(len(data_source))), text_fields,
                               label_field, f"{name}:{split}")
  return texts, labels, names


def class_labels(train_raw, dev_raw, names: list[str], context: str
                 ) -> tuple[np.ndarray, np.ndarray, list[str]]:
  """Class ids of both splits: integers 0..K-1 as they are, anything else (strings) numbered
  in sorted order of the training split's values. Returns (train, dev, label names)."""
  def as_int(v):
    try:
      return int(v) if float(v) == int(float(v)) and int(float(v)) >= 0 else None
    except (TypeError, ValueError):
      return None
  ints = [as_int(v) for v in train_raw + dev_raw]
  if all(i is not None for i in ints):
    ids = np.asarray(ints, np.int32)
    k = max(len(names), int(ids.max()) + 1)
    names = names or [str(i) for i in range(k)]
  else:
    names = sorted({str(v) for v in train_raw})
    index = {n: i for i, n in enumerate(names)}
    unknown = sorted({str(v) for v in dev_raw} - set(index))
    if unknown:
      raise DataError(f"{context}: dev label {unknown[0]!r} never occurs in the training set"
                      f" (its labels: {', '.join(names[:10])})")
    ids = np.asarray([index[str(v)] for v in train_raw + dev_raw], np.int32)
  if len(names) < 2:
    raise DataError(f"{context}: a classification task needs at least 2 labels; the training"
                    f" set has only {names}")
  return ids[:len(train_raw)], ids[len(train_raw):], names


def regression_labels(raw, context: str) -> np.ndarray:
  values = []
  for v in raw:
    try:
      values.append(float(v))
    except (TypeError, ValueError):
      raise DataError(f"{context}: label {v!r} is not a number (a regression task)") from None
  if not np.all(np.isfinite(values)):
    raise DataError(f"{context}: a label is NaN or infinite")
  return np.asarray(values, np.float32)
