"""Sources, tokenizer, packing and the grain pipeline."""

import json

import grain
import numpy as np
import pytest

from mlmjax.data import formats
from mlmjax.data import pipeline
from mlmjax.data import sources
from mlmjax.data import tokenizer as tok_lib


def test_builtin_corpus_split_is_deterministic_and_disjoint(corpus):
  train, evals = corpus
  assert len(train) + len(evals) == 1189  # KJV chapters
  assert 20 <= len(evals) <= 30
  assert set(train.documents).isdisjoint(evals.documents)
  assert train.documents[0].startswith("In the beginning God created the heaven and the earth.")
  again = sources.load_splits("builtin", 50)
  assert again[1].documents == evals.documents


def test_local_txt_and_jsonl(tmp_path):
  (tmp_path / "a.txt").write_text("first doc line one\nline two\n\n\nsecond doc\n\n")
  with open(tmp_path / "b.jsonl", "w") as f:
    f.write(json.dumps({"text": "third doc"}) + "\n\n" + json.dumps({"text": "  "}) + "\n")
    f.write(json.dumps({"text": "fourth doc", "id": 3}) + "\n")
  train, evals = sources.load_splits(f"{tmp_path}/a.txt,{tmp_path}/*.jsonl", eval_every=2)
  docs = list(train.documents) + list(evals.documents)
  assert sorted(docs) == sorted(
      ["first doc line one\nline two", "second doc", "third doc", "fourth doc"])
  assert evals.documents == ("second doc", "fourth doc")  # indices 1 and 3


def test_source_errors_are_clear(tmp_path):
  with pytest.raises(sources.DataError, match="matches no files"):
    sources.load_splits(str(tmp_path / "nope*.txt"), 50)
  (tmp_path / "x.csv").write_text("a,b")
  with pytest.raises(sources.DataError, match="unsupported file type"):
    sources.load_splits(str(tmp_path / "x.csv"), 50)
  (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n')
  with pytest.raises(sources.DataError, match=r'bad.jsonl:2: expected an object with a string "text"'):
    sources.load_splits(str(tmp_path / "bad.jsonl"), 50)
  (tmp_path / "one.txt").write_text("just one document")
  with pytest.raises(sources.DataError, match="need at least 2"):
    sources.load_splits(str(tmp_path / "one.txt"), 50)


def test_tokenizer_special_ids_and_roundtrip(tokenizer_path, tmp_path):
  tok = tok_lib.Tokenizer.load(tokenizer_path)
  assert [tok.id_to_piece(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  ids = tok.encode(["And God said, Let there be light: and there was light."])[0]
  assert min(ids) >= tok_lib.NUM_SPECIAL
  assert tok.decode(ids) == "And God said, Let there be light: and there was light."
  # A literal "[MASK]" in text is not the control symbol.
  assert tok_lib.MASK_ID not in tok.encode(["a [MASK] b"])[0]
  bad = tmp_path / "bad.model"
  bad.write_bytes(b"not a model")
  with pytest.raises(tok_lib.TokenizerError, match="not a sentencepiece model"):
    tok_lib.Tokenizer.load(str(bad))


def _pack(docs, seq_len, bins=4):
  ds = grain.MapDataset.source([np.asarray(d, np.int32) for d in docs]).to_iter_dataset()
  return list(formats.pack_full_sentences(ds, seq_len, num_bins=bins, seed=0))


def test_packing_segments_positions_and_chunks():
  docs = [np.arange(10, 10 + n) for n in (5, 20, 3, 7, 9)]
  rows = _pack(docs, seq_len=12)
  seen = []
  for row in rows:
    ids, seg, pos = row["input_ids"], row["segment_ids"], row["positions"]
    assert ids.shape == seg.shape == pos.shape == (12,)
    assert np.all(ids[seg == 0] == tok_lib.PAD_ID)
    for s in range(1, seg.max() + 1):
      where = np.nonzero(seg == s)[0]
      assert np.all(np.diff(where) == 1)  # contiguous
      seq = ids[where]
      np.testing.assert_array_equal(pos[where], np.arange(len(where)))  # restart per sequence
      assert seq[0] == tok_lib.CLS_ID and seq[-1] == tok_lib.SEP_ID
      assert len(seq) <= 12
      seen.append(tuple(seq[1:-1]))
  # Every token of every document appears exactly once, in order, chunked at seq_len - 2.
  expected = []
  for d in docs:
    expected += [tuple(d[i:i + 10]) for i in range(0, len(d), 10)]
  assert sorted(seen) == sorted(expected)


def test_pipeline_batches_and_exact_restore(micro_config, corpus):
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  it = pipeline.make_train_iter(micro_config, tok, corpus[0])
  first = next(it)
  b = micro_config.train.batch_size
  assert first["input_ids"].shape == (b, 32)
  assert first["masked_positions"].shape == (b, 6)
  assert (first["segment_ids"] > 0).mean() > 0.8  # packing leaves little padding
  for _ in range(3):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(3)]
  again = pipeline.make_train_iter(micro_config, tok, corpus[0])
  again.set_state(state)
  for want in expected:
    got = next(again)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])


def test_eval_iter_is_fixed(micro_config, corpus):
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  a = list(pipeline.make_eval_iter(micro_config, tok, corpus[1]))
  b = list(pipeline.make_eval_iter(micro_config, tok, corpus[1]))
  assert len(a) == micro_config.train.eval_batches
  for x, y in zip(a, b):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
