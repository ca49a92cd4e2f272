"""Pairs of texts that belong together (a query and its document), for sentence embeddings.

Read from a .csv / .tsv file with a header row or a .jsonl file of objects: one pair a record,
its two texts in two named fields (by default `anchor` and `positive`).
"""

from __future__ import annotations

from mlmjax.errors import DataError
from mlmjax.finetuning.examples import read_records, text_field
from mlmjax.finetuning.records import PairExamples

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
