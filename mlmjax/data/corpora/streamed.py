"""Text files that cannot be read at a byte offset, made readable so: compressed text
(`.txt.gz`, `.jsonl.gz`, `.txt.zst`, `.jsonl.zst`), parquet files and Hugging Face `datasets`
folders (`save_to_disk`).

Each is streamed once, in bounded blocks (never loaded whole), into a local plain file that
text_files.py indexes and reads like any other: compressed text is decompressed as it is (so
.jsonl line numbers in errors stay true), a table's `data.text_field` column is written as
.jsonl lines {"text": ...}. The copies live in one temporary folder per process ($TMPDIR),
removed when the process exits; they cost disk, not memory. For a large corpus, prepare it
once (`python -m mlmjax.prepare`), which streams it the same way and keeps only tokens.

A `datasets` folder is read with pyarrow alone (its data-*.arrow files are Arrow IPC streams),
so the heavy `datasets` package is not needed.
"""

from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import tempfile
import zlib

from mlmjax import paths
from mlmjax.errors import DataError

COMPRESSED = (".gz", ".zst")
TEXT = (".txt", ".jsonl")
PARQUET = ".parquet"
SUFFIXES = tuple(t + c for t in TEXT for c in ("",) + COMPRESSED) + (PARQUET,)
_BLOCK = 1 << 20
_ROWS = 1024  # table rows converted at a time
_cache: list[str] = []  # this process's folder of copies, made on first use


def is_datasets_folder(path: str) -> bool:
  """A folder written by `datasets.Dataset.save_to_disk` (one split)."""
  return paths.isfile(paths.join(path, "state.json"))


def is_datasets_dict(path: str) -> bool:
  return paths.isfile(paths.join(path, "dataset_dict.json"))


def needs_copy(path: str) -> bool:
  return path.endswith(COMPRESSED + (PARQUET,)) or is_datasets_folder(path)


def _cache_dir() -> str:
  if not _cache:
    _cache.append(tempfile.mkdtemp(prefix="mlmjax-text-"))
    atexit.register(shutil.rmtree, _cache[0], ignore_errors=True)
  return _cache[0]


def readable(path: str, text_field: str, index: int) -> tuple[str, str]:
  """(a local plain file with the documents of `path`, its kind '.txt' or '.jsonl'); `index`
  keeps the copies of same-named files apart."""
  base = paths.basename(path.rstrip("/"))
  if path.endswith(COMPRESSED):
    kind = os.path.splitext(base[:-len(os.path.splitext(base)[1])])[1]
    out = os.path.join(_cache_dir(), f"{index:06d}-{base}{kind}")
    _decompress(path, out)
    return out, kind
  out = os.path.join(_cache_dir(), f"{index:06d}-{base}.jsonl")
  if path.endswith(PARQUET):
    _table_to_jsonl(path, _parquet_batches(path, text_field), text_field, out)
  else:
    _table_to_jsonl(path, _arrow_batches(path, text_field), text_field, out)
  return out, ".jsonl"


def _decompress(path: str, out: str) -> None:
  try:
    with paths.open(path, "rb") as raw, open(out, "wb") as dst:
      if path.endswith(".gz"):
        src = gzip.GzipFile(fileobj=raw)
      else:
        try:
          import zstandard  # pylint: disable=g-import-not-at-top
        except ImportError:
          raise DataError(f"{path}: reading .zst files needs the zstandard package: pip install"
                          " zstandard (or mlmjax's [formats] extra)") from None
        src = zstandard.ZstdDecompressor().stream_reader(raw, read_size=_BLOCK)
      for block in iter(lambda: src.read(_BLOCK), b""):
        dst.write(block)
  except DataError:
    raise
  except (OSError, EOFError, zlib.error) as e:
    kind = "gzip" if path.endswith(".gz") else "zstd"
    raise DataError(f"{path}: not a valid {kind} file, or cut short ({e})") from None
  except Exception as e:  # pylint: disable=broad-except  # zstandard.ZstdError
    if type(e).__name__ != "ZstdError":
      raise
    raise DataError(f"{path}: not a valid zstd file, or cut short ({e})") from None


def pyarrow_for(path: str):
  """pyarrow (with .parquet and .ipc), or a one-line DataError naming `path` and the extra."""
  try:
    import pyarrow  # pylint: disable=g-import-not-at-top
    import pyarrow.ipc  # pylint: disable=g-import-not-at-top,unused-import
    import pyarrow.parquet  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise DataError(f"{path}: reading parquet and datasets folders needs pyarrow: pip install"
                    " pyarrow (or mlmjax's [formats] extra)") from None
  return pyarrow


def _check_column(path: str, schema, text_field: str) -> None:
  pa = pyarrow_for(path)
  if text_field not in schema.names:
    raise DataError(f"{path}: no column {text_field!r} (it has {', '.join(schema.names)});"
                    " name the text column with data.text_field")
  kind = schema.field(text_field).type
  if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
    raise DataError(f"{path}: column {text_field!r} holds {kind}, not text; name the text"
                    " column with data.text_field")


def _parquet_batches(path: str, text_field: str):
  pa = pyarrow_for(path)
  try:
    with paths.open(path, "rb") as f:
      table = pa.parquet.ParquetFile(f)
      _check_column(path, table.schema_arrow, text_field)
      for batch in table.iter_batches(batch_size=_ROWS, columns=[text_field]):
        yield batch.column(0).to_pylist()
  except (pa.ArrowInvalid, OSError) as e:
    raise DataError(f"{path}: not a readable parquet file ({e})") from None


def _arrow_batches(path: str, text_field: str):
  pa = pyarrow_for(path)
  try:
    state = json.loads(paths.read_text(paths.join(path, "state.json")))
    files = [paths.join(path, f["filename"]) for f in state["_data_files"]]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise DataError(f"{path}: not a readable datasets folder (state.json: {e})") from None
  for name in files:
    try:
      with paths.open(name, "rb") as f:
        reader = pa.ipc.open_stream(f)
        _check_column(path, reader.schema, text_field)
        for batch in reader:
          yield batch.column(text_field).to_pylist()
    except (pa.ArrowInvalid, OSError) as e:
      raise DataError(f"{name}: not a readable Arrow file of a datasets folder ({e})") from None


def _table_to_jsonl(path: str, batches, text_field: str, out: str) -> None:
  del path, text_field  # checked by the batch readers
  with open(out, "w", encoding="utf-8") as dst:
    for texts in batches:
      # A null text is an empty document (skipped and counted, as in .jsonl).
      dst.writelines(json.dumps({"text": t or ""}, ensure_ascii=False) + "\n" for t in texts)
