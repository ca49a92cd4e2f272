"""The forms corpora come in: .txt/.jsonl, gzip- or zstd-compressed, parquet, datasets folders,
with `data.text_field`; all give the same documents, bad files fail in one line, and a bucket
holds them as well as a local disk does."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import storage_servers
from mlmjax import paths
from mlmjax.data.corpora import sources
from mlmjax.errors import DataError

DOCS = [f"Document {i} says something.\nIts second line, {i}." for i in range(7)] + [
    "Ünïcödé text: 日本語, and a long one " + "word " * 40]


def _write_all(root, field="text"):
  """The corpus DOCS in every form; returns {name: source}."""
  txt = "\n\n".join(DOCS).encode()
  jsonl = "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(DOCS)).encode()
  out = {}
  for name, data in (("a.txt", txt), ("a.jsonl", jsonl)):
    (root / name).write_bytes(data)
    (root / f"{name}.gz").write_bytes(gzip.compress(data))
    (root / f"{name}.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    out.update({name: name, f"{name}.gz": f"{name}.gz", f"{name}.zst": f"{name}.zst"})
  table = pa.table({"id": list(range(len(DOCS))), field: DOCS})
  pq.write_table(table, root / "a.parquet", row_group_size=3)
  out["a.parquet"] = "a.parquet"
  folder = root / "dataset"  # what datasets' save_to_disk writes for one split
  folder.mkdir()
  with pa.ipc.new_stream(folder / "data-00000-of-00001.arrow", table.schema) as w:
    for batch in table.to_batches(max_chunksize=3):
      w.write_batch(batch)
  (folder / "state.json").write_text(json.dumps(
      {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train"}))
  (folder / "dataset_info.json").write_text("{}")
  out["dataset"] = "dataset"
  return out


def _documents(source, **kw):
  train, held_out = sources.load_splits(source, 4, **kw)
  return list(train) + list(held_out)


def test_every_form_gives_the_same_documents(tmp_path):
  forms = _write_all(tmp_path)
  want = _documents(str(tmp_path / "a.txt"))
  assert sorted(want) == sorted(d.strip() for d in DOCS)
  for name in forms:
    assert _documents(str(tmp_path / name)) == want, name
  # Several forms at once, by glob and list: each file once, in order.
  both = _documents(f"{tmp_path}/a.jsonl.*,{tmp_path}/a.parquet")
  assert len(both) == 3 * len(DOCS)


def test_text_field_names_the_field_or_column(tmp_path):
  _write_all(tmp_path, field="content")
  want = sorted(d.strip() for d in DOCS)
  for name in ("a.jsonl.gz", "a.parquet", "dataset"):
    assert sorted(_documents(str(tmp_path / name), text_field="content")) == want
  with pytest.raises(DataError, match=r'a.jsonl.gz:1: expected an object with a string "text"'
                     r' field$'):
    _documents(str(tmp_path / "a.jsonl.gz"))
  with pytest.raises(DataError, match=r"a.parquet: no column 'text' \(it has id, content\);"
                     r" name the text column with data.text_field$"):
    _documents(str(tmp_path / "a.parquet"))
  with pytest.raises(DataError, match=r"dataset: column 'id' holds int64, not text"):
    _documents(str(tmp_path / "dataset"), text_field="id")


def test_bad_files_fail_in_one_line(tmp_path):
  data = gzip.compress("".join(f"line {i}\n\n" for i in range(5000)).encode())
  (tmp_path / "cut.txt.gz").write_bytes(data[:len(data) // 2])
  with pytest.raises(DataError, match=r"cut.txt.gz: not a valid gzip file, or cut short"):
    _documents(str(tmp_path / "cut.txt.gz"))
  (tmp_path / "fake.jsonl.zst").write_bytes(b"not zstd at all")
  with pytest.raises(DataError, match=r"fake.jsonl.zst: not a valid zstd file"):
    _documents(str(tmp_path / "fake.jsonl.zst"))
  (tmp_path / "fake.parquet").write_bytes(b"not parquet")
  with pytest.raises(DataError, match=r"fake.parquet: not a readable parquet file"):
    _documents(str(tmp_path / "fake.parquet"))
  (tmp_path / "bin.txt.gz").write_bytes(gzip.compress(bytes(range(256)) * 10))
  with pytest.raises(DataError, match=r"bin.txt.gz: looks like a binary file"):
    _documents(str(tmp_path / "bin.txt.gz"))
  (tmp_path / "d").mkdir()
  (tmp_path / "d" / "dataset_dict.json").write_text('{"splits": ["train"]}')
  with pytest.raises(DataError, match=r"d: a datasets DatasetDict; name one of its splits"):
    _documents(str(tmp_path / "d"))


@pytest.mark.slow
def test_sources_in_a_bucket(tmp_path):
  _write_all(tmp_path)
  want = _documents(str(tmp_path / "a.txt"))
  with storage_servers.fake_gcs() as gcs:
    bucket = gcs.make_bucket()
    paths.upload(str(tmp_path), f"{bucket}/corpus")
    assert _documents(f"{bucket}/corpus/a.jsonl.gz") == want
    assert _documents(f"{bucket}/corpus/a.txt") == want  # ranged reads, no copy
    assert _documents(f"{bucket}/corpus/dataset") == want
    assert len(_documents(f"{bucket}/corpus/*.parquet,{bucket}/corpus/**/*.zst")) == 3 * len(DOCS)
    with pytest.raises(DataError, match=r"corpus/nope\*.gz: no files match"):
      _documents(f"{bucket}/corpus/nope*.gz")
