"""Text sources: the forms of config.data.source, the split, bad input, large input, tfds."""

import json
import pickle
import re
import shutil
import tracemalloc

import numpy as np
import pytest
import tensorflow_datasets as tfds

from mlmjax.data.corpora import sources
from mlmjax.data.corpora import text_files


def _load(path, eval_every=2, **kwargs):
  """All documents of a source, in source order."""
  train, evals = sources.load_splits(str(path), eval_every, **kwargs)
  docs = {split.source_index(i): split[i] for split in (train, evals) for i in range(len(split))}
  assert sorted(docs) == list(range(len(docs)))
  return [docs[i] for i in range(len(docs))]


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def _raises(message):
  return pytest.raises(sources.DataError, match=f"^{re.escape(message)}$")


# ---- forms and split -------------------------------------------------------------------------
def test_builtin_corpus_split_is_deterministic_and_disjoint(corpus):
  train, evals = corpus
  assert len(train) + len(evals) == 1189  # KJV chapters
  assert len(evals) == 24
  assert set(train).isdisjoint(evals)
  assert train[0].startswith("In the beginning God created the heaven and the earth.")
  again = sources.load_splits("builtin", 50)
  assert list(again[1]) == list(evals)
  assert repr(train) == "TextSource('builtin:train', 1165 documents)"
  assert repr(evals) == "TextSource('builtin:eval', 24 documents)"
  assert train.name == "builtin:train"


@pytest.mark.parametrize("every", [2, 3, 5, 50])
def test_split_is_every_nth_document_as_an_index_view(every):
  for n in list(range(2, 40)) + [101, 1189]:
    docs = [str(i) for i in range(n)]
    train = sources.TextSource("t", docs, every, held_out=False)
    evals = sources.TextSource("e", docs, every, held_out=True)
    want_eval = [i for i in range(n) if i % every == every // 2] or [n - 1]
    assert [int(d) for d in evals] == want_eval, n
    assert [int(d) for d in train] == [i for i in range(n) if i not in want_eval], n
    assert train[-1] == list(train)[-1] and train[1:3] == list(train)[1:3]
    with pytest.raises(IndexError):
      train[len(train)]  # pylint: disable=pointless-statement


def test_local_txt_and_jsonl(tmp_path):
  (tmp_path / "a.txt").write_text("first doc line one\r\nline two\n \n\t\nsecond doc\n\n")
  with open(tmp_path / "b.jsonl", "w") as f:
    f.write(json.dumps({"text": "third doc"}) + "\n\n")
    f.write(json.dumps({"text": "fourth doc", "id": 3}) + "\n")
  # a.txt is named twice; it is read once (else its documents could land in both splits).
  train, evals = sources.load_splits(f"{tmp_path}/a.txt, {tmp_path}/*.jsonl,{tmp_path}/a.txt", 2)
  assert list(train) == ["first doc line one\nline two", "third doc"]
  assert list(evals) == ["second doc", "fourth doc"]  # indices 1 and 3
  # Views read files on demand and survive pickling (grain workers).
  assert list(pickle.loads(pickle.dumps(evals))) == ["second doc", "fourth doc"]


def test_byte_order_mark_is_not_text(tmp_path):
  (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfone\n\ntwo\n")
  (tmp_path / "b.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "three"}\n{"text": "four"}\n')
  assert _load(tmp_path / "a.txt") == ["one", "two"]
  assert _load(tmp_path / "b.jsonl") == ["three", "four"]


def test_jsonl_lone_surrogates_become_encodable(tmp_path):
  (tmp_path / "s.jsonl").write_text(
      '{"text": "cut emoji \\ud83d here"}\n{"text": "ok \\ud83d\\ude42"}\n')
  docs = _load(tmp_path / "s.jsonl")
  assert docs == ["cut emoji ? here", "ok \U0001f642"]
  for d in docs:
    d.encode("utf-8")  # what sentencepiece does; a lone surrogate would raise here


# ---- bad input: one-line errors, or warnings and go on ------------------------------------
_FORMS = ("config.data.source takes 'builtin', a .txt/.jsonl(.gz/.zst)/.parquet file or a"
          " datasets folder, a glob such as"
          " 'corpus/*.txt', a comma-separated list of these, tfds:NAME[:SPLIT[:FEATURE]], or"
          " prepared:DIR (made by python -m mlmjax.prepare)")


def test_missing_paths_and_file_types(tmp_path):
  (tmp_path / "a.txt").write_text("one\n\ntwo\n")
  with _raises(f"{tmp_path}/nope.txt: no such file; {_FORMS}"):
    sources.load_splits(f"{tmp_path}/nope.txt", 50)
  with _raises(f"{tmp_path}/nope*.txt: no files match; {_FORMS}"):
    sources.load_splits(f"{tmp_path}/nope*.txt", 50)
  with _raises(f"{tmp_path}/x*.txt: no files match; {_FORMS}"):  # every part must match
    sources.load_splits(f"{tmp_path}/a.txt,{tmp_path}/x*.txt", 50)
  with _raises(f"{tmp_path}: is a directory; give a glob such as '{tmp_path}/*.txt'"):
    sources.load_splits(str(tmp_path), 50)
  (tmp_path / "x.csv").write_text("a,b")
  with _raises(f"{tmp_path}/x.csv: unsupported file type; use .txt or .jsonl (also .gz or .zst"
               " compressed), .parquet, or a datasets folder"):
    sources.load_splits(f"{tmp_path}/*", 50)


def test_empty_files_and_too_few_documents(tmp_path, caplog):
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "blank.txt").write_text("\n  \n\n")
  (tmp_path / "empty.jsonl").write_text('{"text": ""}\n\n{"text": " \\n "}\n')
  with _raises(f"{tmp_path}/empty.txt: no text in 1 file (empty, or only blank lines or empty"
               ' documents); give .txt documents separated by blank lines or .jsonl lines with'
               ' a "text" field'):
    sources.load_splits(f"{tmp_path}/empty.txt", 50)
  with _raises(f"config.data.source='{tmp_path}/*': no text in 3 files (empty, or only blank"
               ' lines or empty documents); give .txt documents separated by blank lines or'
               ' .jsonl lines with a "text" field'):
    sources.load_splits(f"{tmp_path}/*", 50)
  (tmp_path / "one.txt").write_text("just one document\n")
  with _raises(f"config.data.source='{tmp_path}/one.txt' has 1 non-empty document(s); need at"
               " least 2 (one to train on, one held out): add text, or separate .txt documents"
               " by blank lines"):
    sources.load_splits(f"{tmp_path}/one.txt", 50)
  # An empty file among others is skipped with a warning.
  (tmp_path / "two.txt").write_text("second document\n")
  caplog.clear()
  assert _load(f"{tmp_path}/*.txt") == ["just one document", "second document"]
  assert _warnings(caplog) == [
      f"{tmp_path}/blank.txt: no text (empty, or only blank lines or empty documents); skipped",
      f"{tmp_path}/empty.txt: no text (empty, or only blank lines or empty documents); skipped"]


def test_bad_jsonl_records(tmp_path):
  (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n')
  with _raises(f'{tmp_path}/bad.jsonl:2: expected an object with a string "text" field'):
    sources.load_splits(str(tmp_path / "bad.jsonl"), 50)
  (tmp_path / "bad2.jsonl").write_text('{"text": "ok"}\n\n{"text": "cut')
  with _raises(f"{tmp_path}/bad2.jsonl:3: not valid JSON (Unterminated string starting at)"):
    sources.load_splits(str(tmp_path / "bad2.jsonl"), 50)


def test_empty_documents_are_skipped_and_counted(tmp_path, caplog):
  records = ["a", "", "b", "  \n ", "c", ""]
  (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in records))
  assert _load(tmp_path / "d.jsonl") == ["a", "b", "c"]
  assert _warnings(caplog) == [f"{tmp_path}/d.jsonl: 3 empty documents skipped"]


def test_invalid_utf8_is_replaced_and_counted_exactly(tmp_path, caplog, monkeypatch):
  # Tiny read blocks: "é" (2 bytes) and "€" (3 bytes) straddle reads and must not count.
  monkeypatch.setattr(text_files, "_READ_BLOCK", 3)
  data = ("café € \ufffd ok\n\n").encode() + b"bad \xff here, \xe2\x82 cut\n\nend \xc3"
  (tmp_path / "c.txt").write_bytes(data)
  assert _load(tmp_path / "c.txt") == ["café € \ufffd ok", "bad \ufffd here, \ufffd cut",
                                       "end \ufffd"]
  # The real U+FFFD in the first document is text, not a replacement: 3 were replaced.
  assert _warnings(caplog) == [f"{tmp_path}/c.txt: 3 invalid UTF-8 sequences replaced with U+FFFD"]
  caplog.clear()
  (tmp_path / "c.jsonl").write_bytes(b'{"text": "x \xff y"}\n{"text": "z"}\n')
  assert _load(tmp_path / "c.jsonl") == ["x \ufffd y", "z"]
  assert _warnings(caplog) == [f"{tmp_path}/c.jsonl: 1 invalid UTF-8 sequence replaced with U+FFFD"]


def test_binary_files_are_refused_but_any_script_is_text(tmp_path, caplog):
  (tmp_path / "nul.txt").write_bytes(b"PK\x03\x04\x00\x00 zip-like")
  with _raises(f"{tmp_path}/nul.txt: looks like a binary file (it contains NUL bytes); give UTF-8"
               " .txt or .jsonl text"):
    sources.load_splits(str(tmp_path / "nul.txt"), 50)
  noise = np.random.default_rng(0).integers(1, 256, 20_000, dtype=np.uint8).tobytes()
  (tmp_path / "noise.jsonl").write_bytes(noise)
  with pytest.raises(sources.DataError, match=re.escape(f"{tmp_path}/noise.jsonl: looks like a")
                     + r" binary file \(\d\d% of its first 8,192 bytes are not UTF-8 text\); give"
                     r" UTF-8 \.txt or \.jsonl text$"):
    sources.load_splits(str(tmp_path / "noise.jsonl"), 50)
  # Non-Latin scripts are plain UTF-8; the 8 KB sample ends inside a character here.
  scripts = ["中文文本的一个段落。", "Русский текст, абзац.", "نص عربي في فقرة.", "ελληνικά 🙂"]
  text = "\n\n".join(s * 60 for s in scripts * 8)
  assert len(text.encode()) > 3 * 8192
  (tmp_path / "scripts.txt").write_text(text)
  assert len(_load(tmp_path / "scripts.txt")) == 32
  # Latin-1 text is mostly ASCII: it is read, with a warning that counts the replacements.
  latin1 = "Voilà un été très chaud.\n\nÀ bientôt.\n".encode("latin-1")
  (tmp_path / "latin1.txt").write_bytes(latin1)
  assert _load(tmp_path / "latin1.txt") == ["Voil\ufffd un \ufffdt\ufffd tr\ufffds chaud.",
                                            "\ufffd bient\ufffdt."]
  assert _warnings(caplog) == [
      f"{tmp_path}/latin1.txt: 6 invalid UTF-8 sequences replaced with U+FFFD"]


# ---- enormous documents --------------------------------------------------------------------
def test_enormous_line_is_split_at_whitespace_in_bounded_memory(tmp_path, caplog):
  words = np.random.default_rng(0).choice(["lorem", "ipsum", "dolor", "sit", "amet"], 4_000_000)
  text = " ".join(words)  # ~20 MB, no newline at all
  (tmp_path / "huge.txt").write_text("small doc\n\n" + text)
  tracemalloc.start()
  train, evals = sources.load_splits(str(tmp_path / "huge.txt"), 50)
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  assert peak < 8 << 20  # the index and a block or two, not the 20 MB line
  assert len(train) + len(evals) > 200
  caplog.clear()
  docs = _load(tmp_path / "huge.txt")
  assert docs[0] == "small doc"
  pieces = docs[1:]
  assert all(len(p.encode()) <= sources.MAX_DOCUMENT_CHARS for p in pieces)
  assert " ".join(pieces) == text
  n = len(pieces)
  assert n == pytest.approx(len(text) / sources.MAX_DOCUMENT_CHARS, rel=0.01)
  assert _warnings(caplog) == [f"{tmp_path}/huge.txt: 1 document longer than 100,000 characters"
                               f" split into {n} pieces"]


def test_split_without_whitespace_keeps_characters_whole(tmp_path, caplog):
  text = "é" * 25 + "ab" * 10  # 70 UTF-8 bytes, no whitespace
  (tmp_path / "w.txt").write_text(text + "\n\nnext\n")
  docs = _load(tmp_path / "w.txt", max_document_chars=21)
  assert docs == ["é" * 10, "é" * 10, "é" * 5 + "ab" * 5 + "a", "b" + "ab" * 4, "next"]
  assert not any("invalid" in w for w in _warnings(caplog))


def test_enormous_jsonl_record_is_split(tmp_path, caplog):
  text = " ".join(f"w{i}" for i in range(60_000))  # ~400k characters
  with open(tmp_path / "big.jsonl", "w") as f:
    f.write(json.dumps({"text": "small"}) + "\n" + json.dumps({"text": text}) + "\n")
  docs = _load(tmp_path / "big.jsonl")
  assert len(docs) == 6
  assert docs[0] == "small"
  assert " ".join(docs[1:]) == text
  assert all(len(d) <= sources.MAX_DOCUMENT_CHARS for d in docs)
  assert _warnings(caplog) == [
      f"{tmp_path}/big.jsonl: 1 document longer than 100,000 characters split into 5 pieces"]


# ---- tfds --------------------------------------------------------------------------------------
class MlmjaxTinyText(tfds.core.GeneratorBasedBuilder):
  """A few dozen documents, to read through tfds' array_record data source."""

  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "text": tfds.features.Text(),
        "raw": tfds.features.Tensor(shape=(), dtype=np.object_),
        "n": np.int32}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(40), "validation": self._generate_examples(4)}

  def _generate_examples(self, n):
    for i in range(n):
      yield i, {"text": f"  document {i}: some text\n", "raw": b"raw \xff %d" % i, "n": i}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  data_dir = tmp_path_factory.mktemp("tfds")
  MlmjaxTinyText(data_dir=str(data_dir), file_format="array_record").download_and_prepare()
  return data_dir


def test_tfds_source(tfds_dir, monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", str(tfds_dir))
  train, evals = sources.load_splits("tfds:mlmjax_tiny_text", 10)
  assert (len(train), len(evals)) == (36, 4)
  assert repr(evals) == "TextSource('tfds:mlmjax_tiny_text:eval', 4 documents)"
  docs = [train[i] for i in range(len(train))] + list(evals)
  assert sorted(docs) == sorted(f"document {i}: some text" for i in range(40))
  assert list(pickle.loads(pickle.dumps(evals))) == list(evals)
  # Version, split slice and feature; bytes are decoded with replacement.
  train, evals = sources.load_splits("tfds:mlmjax_tiny_text:1.0.0:train[:10]:raw", 10)
  assert len(train) + len(evals) == 10
  assert all(re.fullmatch("raw \ufffd \\d+", d) for d in list(train) + list(evals))
  _, evals = sources.load_splits("tfds:mlmjax_tiny_text:validation", 2)
  assert len(evals) == 2


def test_tfds_errors(tfds_dir, tmp_path, monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", str(tfds_dir))
  with _raises("tfds:mlmjax_tiny_text:train:body: dataset 'mlmjax_tiny_text' has no feature"
               " 'body' (it has text, raw, n); name the text feature:"
               " tfds:mlmjax_tiny_text:train:FEATURE"):
    sources.load_splits("tfds:mlmjax_tiny_text:train:body", 10)
  with pytest.raises(sources.DataError, match=re.escape(
      "tfds:mlmjax_tiny_text:test: Unknown split 'test'.")):
    sources.load_splits("tfds:mlmjax_tiny_text:test", 10)
  with _raises("config.data.source='tfds:': expected tfds:NAME[:SPLIT[:FEATURE]], e.g."
               " 'tfds:wikipedia/20230601.en:train:text'"):
    sources.load_splits("tfds:", 10)
  with _raises(f"tfds:no_such_dataset_x: no dataset 'no_such_dataset_x' in {tfds_dir} or in the"
               " tfds catalog; prepare it with `tfds build no_such_dataset_x"
               f" --file_format=array_record --data_dir={tfds_dir}`, or set TFDS_DATA_DIR to"
               " where it is"):
    sources.load_splits("tfds:no_such_dataset_x", 10)
  monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
  with _raises(f"tfds:mlmjax_tiny_text: dataset 'mlmjax_tiny_text' is not prepared in {tmp_path};"
               " prepare it with `tfds build mlmjax_tiny_text --file_format=array_record"
               f" --data_dir={tmp_path}`, or set TFDS_DATA_DIR to where it is"):
    sources.load_splits("tfds:mlmjax_tiny_text", 10)
  # A TFRecord build (the format of the public wikipedia/c4 builds) has no random access.
  shutil.copytree(tfds_dir / "mlmjax_tiny_text", tmp_path / "mlmjax_tiny_text")
  info_path = tmp_path / "mlmjax_tiny_text" / "1.0.0" / "dataset_info.json"
  info = json.loads(info_path.read_text())
  info["fileFormat"] = "tfrecord"
  info_path.write_text(json.dumps(info))
  with _raises(f"tfds:mlmjax_tiny_text: {tmp_path}/mlmjax_tiny_text/1.0.0 holds tfrecord files;"
               " random access needs array_record: rebuild it with --file_format=array_record or"
               " convert it with `tfds convert_format`"):
    sources.load_splits("tfds:mlmjax_tiny_text", 10)


def test_pieces_of_a_split_document_stay_on_one_side(tmp_path, caplog):
  """A document cut into pieces for length is held out, or trained on, as a whole: every
  piece of document 2 (the held-out one of every 4) is in the eval split, none in training."""
  docs = [f"doc {i} " + " ".join(f"w{i}x{k}" for k in range(40 if i == 2 else 3))
          for i in range(8)]
  (tmp_path / "c.txt").write_text("\n\n".join(docs), encoding="utf-8")
  train, evals = sources.load_splits(str(tmp_path / "c.txt"), 4, max_document_chars=60)
  assert "longer than 60 characters split into" in caplog.text
  held = [d for d in evals if "w2x" in d or d.startswith("doc 2")]
  assert len(held) > 3 and len(held) == len(evals) - 1  # doc 6 is the other held-out one
  assert not [d for d in train if "w2x" in d or d.startswith("doc 2")]
  assert " ".join(held).split() == docs[2].split()  # every piece, in order
  assert sorted(d.split()[1] for d in train) == ["0", "1", "3", "4", "5", "7"]
