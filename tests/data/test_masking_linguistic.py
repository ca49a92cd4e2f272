"""The strategies that read language: `entity` from spaCy's recogniser, `syntax` (POS and
dependency weights, noun chunks, subtrees), `semantic` (PMI-Masking's n-gram vocabulary) and
`contextual` (InforMask's informative relevance); test_masking_papers.py holds the last two
(and `entity`'s draw) to their sources' definitions. Their invariants (budget, determinism,
80/10/10, mixture, static, degenerate rows) are the every-strategy tests of
test_masking_strategies.py and test_masker.py."""

import numpy as np
import pytest

from masking_cases import NLP, P, _assert_all_or_nothing, _hash_of, _masker, _rows, _selected
from mlmjax.data.text import annotation
from mlmjax.data import pipeline
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import syntax
from mlmjax.data.masking import units

NAMES = ["Paul went to Rome with Barnabas.", "David loved Jonathan in Jerusalem.",
         "Then Peter spoke to John in Galilee.", "And Abraham journeyed toward Egypt."]


def _unit_ids(batch, code_of):
  """[R, T] id of each unit (-1 outside): a run of maskable pieces starting where `code_of`
  gives a B code and continued by I codes (annotation.py's BIO) in one sequence."""
  codes = code_of(batch["annotations"])
  seg = batch["segment_ids"]
  member = (codes > 0) & (batch["input_ids"] >= 5) & (seg > 0)
  before = np.pad(member, ((0, 0), (1, 0)))[:, :-1]
  start = member & ((codes % 2 == 1) | ~before | (seg != np.pad(seg, ((0, 0), (1, 0)))[:, :-1]))
  ids = np.cumsum(start.reshape(-1)).reshape(codes.shape) - 1
  return np.where(member, ids, -1)


def test_entity_from_the_recogniser_masks_whole_entities_single_words_included(tok, stats):
  batch = _rows(tok, NAMES * 16, rows=None, annotator=annotation.Annotator(NLP))
  ex = np.arange(len(batch["input_ids"]))
  m = _masker(stats, strategy="entity", entity_ner=True, entity_heuristic=False,
              mask_rate=0.3)
  entity = _unit_ids(batch, lambda a: a[..., annotation.ENTITY])
  masked_names = set()
  for step in range(20):
    out = m(batch, seed=0, step=step, example_ids=ex)
    sel = _selected(out, batch["input_ids"].shape)
    _assert_all_or_nothing(entity, sel)  # an entity is masked whole or not at all
    masked_names |= {tok.decode(batch["input_ids"][entity == e]).strip()
                     for e in np.unique(entity[sel & (entity >= 0)])}
  # Single-word names of people and places, which the capitalisation heuristic misses.
  assert {"Paul", "Rome", "David", "Jonathan", "Peter", "Egypt"} <= masked_names
  # Only the labels asked for: PERSON names are then no longer masked as units.
  only_places = _masker(stats, strategy="entity", entity_ner=True,
                        entity_heuristic=False, entity_labels="GPE", mask_rate=0.3)
  person = batch["annotations"][..., annotation.ENTITY]
  person = (person > 0) & ((person - 1) // 2 == annotation.ENTITY_LABELS.index("PERSON"))
  sel = _selected(only_places(batch, seed=0, step=0, example_ids=ex), person.shape)
  gpe = _unit_ids(batch, lambda a: np.where(
      (a[..., annotation.ENTITY] - 1) // 2 == annotation.ENTITY_LABELS.index("GPE"),
      a[..., annotation.ENTITY], 0))
  _assert_all_or_nothing(gpe, sel)
  assert (sel & (gpe >= 0)).sum() > (sel & person).sum()


def _pos_share(batch, sel, tag):
  """Share of the selected words whose POS is `tag`."""
  first = sel & (batch["annotations"][..., annotation.WORD] == 1)
  return np.mean(batch["annotations"][..., annotation.POS][first]
                 == 1 + annotation.UPOS.index(tag))


def test_syntax_weights_move_selection_their_way(stats, packed):
  """Counted over 256 rows x 4 steps: a heavier NOUN weight masks more nouns, a lighter one
  fewer, than the corpus share; weight 0 never masks punctuation."""
  ann = packed["annotations"]
  words = (ann[..., annotation.WORD] == 1) & (packed["input_ids"] >= 5)
  corpus_share = np.mean(ann[..., annotation.POS][words] == 1 + annotation.UPOS.index("NOUN"))
  share = {}
  for weight in ("0.2", "1", "5"):
    m = _masker(stats, strategy="syntax", syntax_weights=f"NOUN={weight},PUNCT=0")
    sel = np.zeros(packed["input_ids"].shape, bool)
    got = []
    for step in range(4):
      sel = _selected(m(packed, seed=0, step=step, example_ids=np.arange(256)), sel.shape)
      got.append(_pos_share(packed, sel, "NOUN"))
      assert not (sel & (ann[..., annotation.POS] == 1 + annotation.UPOS.index("PUNCT"))).any()
    share[weight] = np.mean(got)
  assert share["0.2"] < corpus_share - 0.05 and share["5"] > corpus_share + 0.15
  assert abs(share["1"] - corpus_share) < 0.05, (share, corpus_share)


@pytest.mark.parametrize("unit", ["word", "noun_chunk", "subtree"])
def test_syntax_units_are_masked_whole(unit, stats, packed):
  m = _masker(stats, strategy="syntax", syntax_unit=unit, phrase_max_words=3)
  out = m(packed, seed=0, step=0, example_ids=np.arange(256))
  sel = _selected(out, packed["input_ids"].shape)
  ann, seg = packed["annotations"], packed["segment_ids"]
  maskable = (packed["input_ids"] >= 5) & (seg > 0)
  starts = syntax.word_starts(ann, seg, maskable)
  word = np.cumsum(starts.reshape(-1)).reshape(starts.shape) - 1
  _assert_all_or_nothing(np.where(maskable, word, -1), sel)  # words always whole
  budget = out["masked_weights"].sum()
  assert budget >= 0.95 * np.minimum(np.floor(maskable.sum(1) * 0.15 + 0.5), P).sum()
  if unit == "noun_chunk":
    chunk = _unit_ids(packed, lambda a: a[..., annotation.CHUNK])  # 1 begins, 2 continues
    sizes = _assert_all_or_nothing(chunk, sel)
    assert (sizes > 2).any()  # multi-piece chunks were masked whole
  if unit == "subtree":  # whole subtrees of up to 3 words, some of several words
    heads, _ = syntax.units_and_weights(ann, seg, maskable, unit, 3, np.ones(18),
                                        np.ones(1 + len(annotation.DEPS)))
    head_col = units.head_cols(heads)
    unit_id = np.where(maskable & (head_col >= 0), np.arange(256)[:, None] * 128 + head_col, -1)
    _assert_all_or_nothing(unit_id, sel)
    words_per_unit = units.unit_sizes(head_col, starts)[heads]
    assert words_per_unit.max() == 3 and (words_per_unit >= 2).mean() > 0.1


def test_the_pmi_vocabulary_recovers_planted_collocations(tok, stats):
  """A corpus of random words with three planted collocations (2, 3 and 4 words): the top 10
  n-grams by PMI-Masking's measure, 6 bigrams, 3 trigrams and a 4-gram, are exactly them and
  their sub-n-grams."""
  rng = np.random.default_rng(0)
  letters = list("abcdefghijklmnoprstuvw")
  vocab = sorted({"".join(rng.choice(letters, 5)) for _ in range(300)})[:200]
  planted = ["kwoth zorbal", "vex kylin jabot", "fuzzy wuzzy was abear"]
  docs = []
  for _ in range(200):
    words = list(rng.choice(vocab, 60))
    for p in planted:
      words.insert(int(rng.integers(len(words))), p)
    docs.append(" ".join(words) + ".")
  table = cooccurrence.compute(pipeline.tokenized(docs, tok), stats, 200, 10, 3,
                               (0.6, 0.3, 0.1, 0.0))
  expected = set()
  for p in planted:
    w = p.split()
    expected |= {" ".join(w[a:b]) for a in range(len(w)) for b in range(a + 2, len(w) + 1)}
  assert len(expected) == 10
  assert set(table.ngrams.tolist()) == {int(_hash_of(tok, stats, e)) for e in expected}


@pytest.mark.parametrize("text", ["", "alpha", "alpha beta", "alpha beta gamma"])
def test_pmi_units_of_a_batch_with_fewer_words_than_an_ngram(tok, stats, text):
  """A batch of 0 to 3 words (fewer than the longest n-gram, 5): the pair is still found."""
  ids = np.asarray([tok.encode([text])[0] + [0] * 4], np.int32)
  seg = (ids > 0).astype(np.int32)
  maskable = ids >= 5
  starts, hashes = cooccurrence.word_hashes(ids, seg, maskable, stats)
  table = cooccurrence.Cooccurrence(np.array([_hash_of(tok, stats, "alpha beta")], np.uint64),
                                    np.zeros(0, np.uint64), np.zeros(0, np.float32))
  heads, inside = cooccurrence.ngram_units(starts, hashes, seg, maskable, table)
  pair = "alpha beta" in text
  assert inside.any() == pair
  assert heads.sum() == starts.sum() - (1 if pair else 0)  # words, the pair's two one unit


def test_the_counts_stop_at_a_bounded_sample(tok, stats, corpus, monkeypatch):
  """Memory is bounded: past MAX_WORDS words no more documents are read."""
  reader = pipeline.tokenized(corpus[0], tok)
  read = []

  class Counting:
    def __len__(self):
      return len(reader)

    def sentences(self, i):
      read.append(i)
      return reader.sentences(i)

  monkeypatch.setattr(cooccurrence, "MAX_WORDS", 2000)
  cooccurrence.compute(Counting(), stats, 1000, 10, 2)
  assert 1 <= len(read) <= 5  # a chapter has about 800 words
  assert max(read) > 100  # spread over the corpus, not its first documents
