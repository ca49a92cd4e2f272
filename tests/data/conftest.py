"""Fixtures of the masking tests: the session tokenizer's tables and rows of the built-in
corpus made by the real row builder, once per session."""

import pytest

from masking_cases import NLP, PHRASES, _made_up_words, _planted_corpus, _rows, _words
from mlmjax.data.text import annotation
from mlmjax.data import pipeline
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.data.text import vocab_stats
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import entities

@pytest.fixture(scope="session")
def tok(tokenizer_path):
  return tok_lib.Tokenizer.load(tokenizer_path)


@pytest.fixture(scope="session")
def stats(tok, corpus):
  return vocab_stats.compute(tok, corpus[0], 300)


@pytest.fixture(scope="session")
def packed(tok, corpus):
  """Packed rows of several verse-long sequences (many boundaries), their words annotated by
  spaCy (the 600 verses that fill them: annotating is the slow part)."""
  verses = [v for d in corpus[0][100:400] for v in d.split("\n")][:600]
  return _rows(tok, verses, annotator=annotation.Annotator(NLP))


@pytest.fixture(scope="session")
def cooc(tok, stats, corpus):
  """The word co-occurrence tables (semantic, contextual) of 200 documents of the corpus."""
  return cooccurrence.compute(pipeline.tokenized(corpus[0], tok), stats, 200, 2000, 3)


@pytest.fixture(scope="session")
def long_rows(tok, corpus):
  """Rows of one document each, up to 126 tokens of a chapter's whole sentences."""
  return _rows(tok, corpus[0][400:700], "doc_sentences")


@pytest.fixture(scope="session")
def words(tok, packed):
  return _words(tok, packed)


@pytest.fixture(scope="session")
def gazetteer(tok, tmp_path_factory):
  path = tmp_path_factory.mktemp("gaz") / "entities.txt"
  path.write_text("\n\n".join(PHRASES), encoding="utf-8")  # blank lines are skipped
  return entities.load_gazetteer(str(path), tok)


@pytest.fixture(scope="module")
def at_min_count(tok, stats):
  """Words a b c d e f g, made up. Documents "a b" and "c d e" 3 times each, "f g" twice, each a
  run of its own; counted with a minimum count of 3, so "a b", "c d", "d e" and "c d e" (and the
  pairs (a, b), (c, d), (d, e), (c, e)) are seen exactly the minimum, "f g" (and (f, g)) once
  fewer. -> (the words, the table)."""
  a, b, c, d, e, f, g = words = _made_up_words(7)
  docs = [f"{a} {b}"] * 3 + [f"{c} {d} {e}"] * 3 + [f"{f} {g}"] * 2
  return words, cooccurrence.compute(pipeline.tokenized(docs, tok), stats, len(docs), 8, 3,
                                     (0.5, 0.25, 0.125, 0.125))


@pytest.fixture(scope="module")
def planted(tok, stats):
  docs, grams, frequent = _planted_corpus()
  table = cooccurrence.compute(pipeline.tokenized(docs, tok), stats, 200, 8, 11,
                               (0.5, 0.25, 0.125, 0.125))
  return docs, grams, frequent, table
