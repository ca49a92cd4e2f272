"""Input formats: sentence splitting, packing, doc_sentences, NSP/SOP pairs."""

import grain
import numpy as np
import pytest

from mlmjax.data.rows import formats
from mlmjax.data.text import sentences
from mlmjax.data.text import tokenizer as tok
from mlmjax.models import special_ids

from conftest import eval_iter

NUM_DOCS = 40


def _token(doc, sentence, k):
  return special_ids.NUM_SPECIAL + 10_000 * doc + 100 * sentence + k


def _origin(ids):
  """token ids -> (doc, sentence) arrays (specials excluded by the caller)."""
  x = np.asarray(ids) - special_ids.NUM_SPECIAL
  return x // 10_000, (x % 10_000) // 100


def _docs(num_docs=NUM_DOCS, seed=0):
  """Documents whose token ids say where they come from; 1-12 sentences of 2-30 tokens."""
  rng = np.random.default_rng(seed)
  docs = []
  for d in range(num_docs):
    sents = [np.array([_token(d, s, k) for k in range(rng.integers(2, 31))], np.int32)
             for s in range(rng.integers(1, 13))]
    docs.append(formats.Document(d, 0, sents))
  return docs


def _rows(data_format, seq_len=48, num_rows=400, docs=None):
  docs = docs or _docs()

  def random_document(rng, not_index):
    j = int(rng.integers(len(docs) - 1))
    return docs[j + (j >= not_index)].sentences

  def occurrence(i, doc):  # each epoch draws new pairs
    return formats.Document(doc.index, i // len(docs), doc.sentences)

  ds = grain.MapDataset.source(docs).repeat(None).map_with_index(occurrence).to_iter_dataset()
  rows = formats.make_rows(ds, data_format, seq_len, seed=3, num_bins=8,
                           random_document=random_document)
  it = iter(rows)
  return [next(it) for _ in range(num_rows)]


def test_sentence_splitter():
  text = ('Mr. Smith met Dr. Jones at 3.30 p.m. in St. Louis. "Really?" she asked.\n'
          "It rained\nall day! J. R. R. Tolkien wrote e.g. books. the end? no.\n\nNew paragraph")
  assert sentences.split_sentences(text) == [
      "Mr. Smith met Dr. Jones at 3.30 p.m. in St. Louis.",
      '"Really?" she asked.',
      "It rained all day!",
      "J. R. R. Tolkien wrote e.g. books. the end? no.",
      "New paragraph",
  ]
  assert sentences.split_sentences("  \n\n ") == []


@pytest.mark.parametrize("data_format", ["full_sentences", "doc_sentences"])
def test_single_sequence_formats_keep_documents_apart(data_format):
  rows = _rows(data_format)
  docs_per_row = []
  for row in rows:
    ids, seg = row["input_ids"], row["segment_ids"]
    assert ids.shape == (48,) and row["token_type_ids"].max() == 0
    real = ids >= special_ids.NUM_SPECIAL
    for s in np.unique(seg[seg > 0]):
      in_seg = seg == s
      assert ids[in_seg][0] == special_ids.CLS_ID and ids[in_seg][-1] == special_ids.SEP_ID
      np.testing.assert_array_equal(row["positions"][in_seg], np.arange(in_seg.sum()))
      doc, sent = _origin(ids[in_seg & real])
      assert len(set(doc)) == 1  # a sequence never crosses a document
      assert np.all(np.diff(sent) >= 0)  # consecutive sentences, in order
    docs_per_row.append(len(set(_origin(ids[real])[0])))
  if data_format == "doc_sentences":
    assert max(docs_per_row) == 1  # never packed with another document
  else:
    assert max(docs_per_row) > 1  # packing puts several documents into a row


def test_full_sentences_chunks_are_whole_sentences():
  docs = _docs()
  for doc in docs:
    for chunk in formats.chunk_sentences(doc.sentences, 46):
      assert len(chunk) <= 46
      _, sent = _origin(chunk)
      # Every sentence in a chunk starts at k = 0 unless it is longer than the chunk.
      starts = np.flatnonzero(np.diff(sent, prepend=-1))
      for i in starts[1:]:
        assert (chunk[i] - special_ids.NUM_SPECIAL) % 100 == 0


@pytest.mark.parametrize("data_format", ["segment_pair", "sentence_pair"])
def test_nsp_labels_are_balanced_and_negatives_come_from_other_documents(data_format):
  rows = _rows(data_format, num_rows=2000)
  labels = np.array([int(r["nsp_labels"]) for r in rows])
  n = len(labels)
  assert abs(labels.mean() - 0.5) < 4 * np.sqrt(0.25 / n)
  for row, label in zip(rows, labels):
    ids, types = row["input_ids"], row["token_type_ids"]
    seps = np.flatnonzero(ids == special_ids.SEP_ID)
    assert ids[0] == special_ids.CLS_ID and len(seps) == 2
    assert np.all(types[:seps[0] + 1] == 0) and np.all(types[seps[0] + 1:seps[1] + 1] == 1)
    doc_a, sent_a = _origin(ids[1:seps[0]])
    doc_b, sent_b = _origin(ids[seps[0] + 1:seps[1]])
    assert len(set(doc_a)) == 1 and len(set(doc_b)) == 1
    if label == 1:
      assert doc_b[0] != doc_a[0]
    else:
      assert doc_b[0] == doc_a[0]
      assert sent_b.min() >= sent_a.max()  # B continues A (same sentence when one was cut)


def test_sop_swaps_half_the_time_within_one_document():
  rows = _rows("sop", num_rows=2000)
  labels = np.array([int(r["nsp_labels"]) for r in rows])
  assert abs(labels.mean() - 0.5) < 4 * np.sqrt(0.25 / len(labels))
  for row, label in zip(rows, labels):
    ids = row["input_ids"]
    seps = np.flatnonzero(ids == special_ids.SEP_ID)
    a = ids[1:seps[0]] - special_ids.NUM_SPECIAL
    b = ids[seps[0] + 1:seps[1]] - special_ids.NUM_SPECIAL
    assert len(set(_origin(np.concatenate([a, b]) + special_ids.NUM_SPECIAL)[0])) == 1
    # Token ids grow along a document: swapped means B's tokens come before A's.
    assert (b.max() < a.min()) if label == 1 else (a.max() < b.min())


@pytest.mark.parametrize("data_format", formats.FORMATS)
def test_rows_are_a_pure_function_of_the_data_position(data_format):
  a = _rows(data_format, num_rows=30)
  b = _rows(data_format, num_rows=30)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])


def test_packing_keeps_every_sequence_exactly_once():
  docs = _docs(num_docs=12)
  ds = grain.MapDataset.source(docs).to_iter_dataset()  # one epoch, no repeat
  rows = list(formats.make_rows(ds, "full_sentences", 48, seed=0, num_bins=4))
  seen = []
  for row in rows:
    ids, seg = row["input_ids"], row["segment_ids"]
    assert np.all(ids[seg == 0] == special_ids.PAD_ID)
    for s in np.unique(seg[seg > 0]):
      where = np.flatnonzero(seg == s)
      assert np.all(np.diff(where) == 1)  # contiguous
      seen.append(tuple(ids[where][1:-1]))
  expected = [tuple(c) for d in docs for c in formats.chunk_sentences(d.sentences, 46)]
  assert sorted(seen) == sorted(expected)


@pytest.mark.parametrize("data_format", ["segment_pair", "sop"])
def test_single_sentences_are_cut_at_word_starts(data_format, tokenizer_path, corpus,
                                                 vocab_stats_for_tests):
  """A one-sentence chunk is cut in two for a pair; cutting inside a word would let a swapped
  SOP pair start mid-word (a label cue). Every A and B begins at a word start."""
  tokenizer = tok.Tokenizer.load(tokenizer_path)
  word_start = vocab_stats_for_tests.word_start
  # Long KJV verses as one-sentence documents: every pair comes from a cut.
  verses = [v for d in corpus[0][:60] for v in d.split("\n") if len(v) > 120 and "." not in v]
  docs = [formats.Document(i, 0, [np.asarray(tokenizer.encode([v])[0], np.int32)])
          for i, v in enumerate(verses)]
  ds = grain.MapDataset.source(docs).to_iter_dataset()
  rows = list(formats.make_rows(ds, data_format, 128, seed=0, num_bins=1,
                                random_document=lambda rng, i: docs[(i + 1) % len(docs)].sentences,
                                word_start=word_start))
  # (NSP negatives are left out: a random B of another document may be trimmed from the front
  # by BERT's truncate_seq_pair.)
  cut = [r for r in rows if data_format == "sop" or r["nsp_labels"] == 0]
  assert len(cut) > 50
  for row in cut:
    ids = row["input_ids"]
    seps = np.flatnonzero(ids == special_ids.SEP_ID)
    assert word_start[ids[1]] and word_start[ids[seps[0] + 1]]


def test_a_one_document_split_makes_pairs(tokenizer_path, corpus, micro_config, make_masker):
  """A corpus under ~75 documents holds out one: NSP negatives then come from elsewhere in that
  document instead of crashing at the first eval."""
  from mlmjax.data.corpora import sources  # pylint: disable=g-import-not-at-top
  tokenizer = tok.Tokenizer.load(tokenizer_path)
  one = sources.TextSource("one", list(corpus[0][:30]), 50, held_out=True)
  assert len(one) == 1
  for data_format in formats.PAIR_FORMATS:
    micro_config.data.format = data_format
    batches = list(eval_iter(micro_config, tokenizer, one, make_masker(micro_config)))
    assert len(batches) == micro_config.train.eval_batches
    labels = np.concatenate([b["nsp_labels"] for b in batches])
    assert 0 < labels.mean() < 1
