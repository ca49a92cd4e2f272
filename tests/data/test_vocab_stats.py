"""Per-piece tables and corpus counts for masking (mlmjax/data/text/vocab_stats.py)."""

import os

import numpy as np
import pytest

from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.data.text import vocab_stats
from mlmjax.models import special_ids

NS = special_ids.NUM_SPECIAL


def test_piece_tables():
  pieces = ["[PAD]", "\u2581the", "ed", ",", "\u2581", "\u2581LORD", "God", ".\u201d", "s.",
            "\u2581(", "?)", "'", "\u2581Mr.", "\u00e9t\u00e9", "\u2581\u00c9cole", "\u2581...",
            "$"]
  t = vocab_stats.piece_tables(pieces, [True] + [False] * (len(pieces) - 1))
  got = {k: [p for p, f in zip(pieces, v) if f] for k, v in t.items()}
  assert got["punctuation"] == [",", ".\u201d", "\u2581(", "?)", "'", "\u2581...", "$"]
  assert got["word_start"] == ["\u2581the", ",", "\u2581", "\u2581LORD", ".\u201d", "\u2581(",
                               "?)", "'", "\u2581Mr.", "\u2581\u00c9cole", "\u2581...", "$"]
  assert got["capitalized"] == ["\u2581LORD", "God", "\u2581Mr.", "\u2581\u00c9cole"]
  assert got["sentence_end"] == [".\u201d", "s.", "?)", "\u2581Mr.", "\u2581..."]
  assert got["space_only"] == ["\u2581"]


def test_compute_save_load(tokenizer_path, corpus, tmp_path, monkeypatch):
  tok = tok_lib.Tokenizer.load(tokenizer_path)
  docs = corpus[0][:50]
  path = str(tmp_path / "stats.npz")
  stats = vocab_stats.get_vocab_stats(tok, docs, path, max_documents=20)
  assert os.listdir(tmp_path) == ["stats.npz"]
  assert stats.counts.dtype == np.int64 and len(stats.counts) == len(tok)
  assert np.all(stats.counts[:NS] == 0) and stats.counts.sum() > 10_000
  # An evenly spaced sample of 20 of the 50 documents was counted.
  sample = [docs[i * 50 // 20] for i in range(20)]
  expected = np.bincount(np.concatenate(tok.encode([d.replace("\n", " ") for d in sample])),
                         minlength=len(tok))
  expected[:NS] = 0
  np.testing.assert_array_equal(stats.counts, expected)
  assert stats.word_start[tok.sp.piece_to_id("\u2581the")]
  assert stats.punctuation[tok.sp.piece_to_id(",")] and stats.sentence_end[tok.sp.piece_to_id(".")]
  # Reused, not recomputed, on the next call ("stored with the tokenizer").
  monkeypatch.setattr(vocab_stats, "compute", lambda *a: pytest.fail("recomputed"))
  again = vocab_stats.get_vocab_stats(tok, docs, path, max_documents=20)
  for f in ("word_start", "punctuation", "capitalized", "sentence_end", "counts", "space_only"):
    np.testing.assert_array_equal(getattr(stats, f), getattr(again, f))
  other = tok_lib.train_tokenizer(docs, 300, "unigram", 10_000)
  with pytest.raises(vocab_stats.VocabStatsError, match="belongs to another tokenizer"):
    vocab_stats.get_vocab_stats(other, docs, path, max_documents=20)
