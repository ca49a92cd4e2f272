"""Small input files for the readers' tests (test_readers.py, test_table_readers.py), and the
one-line error they expect."""

import json
import re

import pytest

from mlmjax.errors import DataError


def raises(message):
  """The DataError whose message holds `message` exactly (no pattern)."""
  return pytest.raises(DataError, match=re.escape(message))


def write(tmp_path, name: str, text: str) -> str:
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


def jsonl(tmp_path, name: str, records) -> str:
  return write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in records))
