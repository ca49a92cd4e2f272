"""Word annotations (mlmjax/data/text/annotation.py): spaCy's words aligned to the pieces of a
sentencepiece and a WordPiece tokenizer by character offsets, carried through packing and
prepared data, and the one-line errors without spaCy or its pipeline."""

import sys

import numpy as np
import pytest

from masking_cases import NLP
from mlmjax.data.text import annotation
from mlmjax.data.text import documents
from mlmjax.data.rows import formats
from mlmjax.data.prepared import reader
from mlmjax.data.text import sentences as sentences_lib
from mlmjax.models import special_ids

# Punctuation glued to words, curly quotes, accents, a ligature, an en dash, digits.
TEXT = ("And Moses said: \u201cBehold,\u201d caf\u00e9 na\u00efve \u00c6sop! unto the LORD in"
        " Egypt \u2013 3 days. David loved Jonathan.")


@pytest.fixture(scope="module")
def annotator():
  return annotation.Annotator(NLP)


def _words_of_pieces(tok, annotator, text):
  """(the spaCy words, the text each annotated word's pieces cover, features [n, F])."""
  sentences = sentences_lib.split_sentences(text)
  joined = annotator.text(sentences)
  doc = annotator.nlp(joined)
  out = documents.annotated(tok, annotator, sentences, doc)
  spans, base = [], 0
  for sentence, (_, starts, ends) in zip(sentences, tok.encode_offsets(sentences)):
    spans += [(base + a, base + b) for a, b in zip(starts, ends)]
    base += len(sentence) + 1
  features = np.concatenate(out)[:, 1:]
  word = np.cumsum(features[:, annotation.WORD]) - 1
  covered = ["".join(joined[a:b] for (a, b), w in zip(spans, word) if w == k).strip()
             for k in range(word.max() + 1)]
  return [t.text for t in doc], covered, features


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_pieces_get_the_features_of_the_word_that_holds_them(kind, annotator, tok, wordpiece):
  tokenizer = tok if kind == "sentencepiece" else wordpiece
  words, covered, features = _words_of_pieces(tokenizer, annotator, TEXT)
  # Grouped by their word flags, the pieces cover exactly spaCy's words, in order (these
  # words are never split differently by the two tokenizers).
  assert covered == words
  doc = annotator.nlp(annotator.text(sentences_lib.split_sentences(TEXT)))
  first = np.flatnonzero(features[:, annotation.WORD])
  upos = [annotation.UPOS[p - 1] for p in features[first, annotation.POS]]
  assert upos == [t.pos_ for t in doc]
  # Heads: each word's offset leads to its head word's first piece; 0 at the roots.
  heads = first.tolist()
  for k, t in enumerate(doc):
    offset = features[first[k], annotation.HEAD]
    assert (heads.index(first[k] + offset) if offset else k) == t.head.i
  # Entities: B at the first piece of each, I after; GPE "Egypt", PERSON "David", "Jonathan".
  ent = features[first, annotation.ENTITY]
  label = {t.text: annotation.ENTITY_LABELS[(e - 1) // 2] for t, e in zip(doc, ent) if e}
  assert label["Egypt"] == "GPE" and label["David"] == label["Jonathan"] == "PERSON"
  assert all(e % 2 == 1 for t, e in zip(doc, ent) if t.ent_iob_ == "B")
  inner = features[:, annotation.ENTITY][features[:, annotation.WORD] == 0]
  assert np.all((inner == 0) | (inner % 2 == 0))  # later pieces of a word are never B
  # Noun chunks: 1 at a chunk's first piece, 2 inside it.
  chunk_starts = [doc[c.start].text for c in doc.noun_chunks]
  assert [w for w, c in zip(words, features[first, annotation.CHUNK]) if c == 1] == chunk_starts


def test_pipe_and_one_document_at_a_time_agree(annotator, tok, corpus):
  """prepare parses with nlp.pipe, the input workers one document at a time: the same
  features (exact resume across the raw and prepared forms of a corpus)."""
  docs = corpus[0][:3]
  one = [documents.tokenize(tok, d, annotator) for d in docs]
  split = [sentences_lib.split_sentences(d) for d in docs]
  piped = [documents.annotated(tok, annotator, s, doc) for s, doc in
           zip(split, annotator.nlp.pipe([annotator.text(s) for s in split], batch_size=2))]
  for a, b in zip(one, piped):
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
  plain = [documents.tokenize(tok, d) for d in docs]
  for a, p in zip(one, plain):  # the ids are those of the unannotated tokenization
    assert all(np.array_equal(annotation.ids_of(x), y) for x, y in zip(a, p))


def test_annotations_survive_packing_and_prepared_records(annotator, tok):
  sentences = documents.tokenize(tok, TEXT, annotator)
  record = reader.encode_record(sentences, "uint16")
  back = reader.decode_record(record, "uint16", len(annotation.FEATURES))
  assert all(np.array_equal(a, b) for a, b in zip(sentences, back))
  rows = list(formats.make_rows([formats.Document(0, 0, sentences)], "full_sentences", 64,
                                seed=0, num_bins=2))
  ids = np.concatenate([r["input_ids"][r["segment_ids"] > 0] for r in rows])
  ann = np.concatenate([r["annotations"][r["segment_ids"] > 0] for r in rows])
  real = (ids != special_ids.CLS_ID) & (ids != special_ids.SEP_ID)  # these get zeros
  assert not ann[~real].any()
  np.testing.assert_array_equal(ann[real], np.concatenate(sentences)[:, 1:])


def test_without_spacy_or_its_pipeline_one_line_says_what_to_install(monkeypatch):
  with pytest.raises(annotation.AnnotatorError) as e:
    annotation.load_pipeline("no_such_pipeline", parse=True, ner=False)
  assert str(e.value) == ("masking.nlp_pipeline='no_such_pipeline': no spaCy pipeline of that"
                          f" name or path is installed: {annotation.INSTALL}")
  monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy -> ImportError
  monkeypatch.setattr(annotation, "_LOADED", {})  # as in a process that loaded none yet
  with pytest.raises(annotation.AnnotatorError) as e:
    annotation.load_pipeline(NLP, parse=True, ner=False)
  assert str(e.value) == ("masking.nlp_pipeline: this masking strategy annotates words with"
                          f" spaCy, which is not installed: {annotation.INSTALL}")


def test_only_the_components_needed_run(annotator):
  # The default name loads the official package, or the registry's copy of it ([nlp] extra).
  assert "ner" in annotation.load_pipeline("en_core_web_sm", parse=True, ner=True).pipe_names
  nlp = annotation.load_pipeline(NLP, parse=False, ner=True)
  assert set(nlp.pipe_names) == {"tok2vec", "ner"}
  nlp = annotation.load_pipeline(NLP, parse=True, ner=False)
  assert "ner" not in nlp.pipe_names and "parser" in nlp.pipe_names
