"""`semantic`, `contextual` and `entity` held to their sources' definitions, each computed here by
hand on a corpus made so that the right definition and the usual wrong ones disagree:

  semantic    PMI-Masking (Levine et al., ICLR 2021; github.com/AI21Labs/pmi-masking): PMI_n, the
              vocabulary ranked per length in shares, n-grams seen more than 10 times; its
              occurrences masked whole (the longer of two nested ones, one of two overlapping at
              random), other words whole, 80/10/10 decided per unit.
  contextual  InforMask (Sadeq et al., EMNLP 2022): informative relevance; the best-scored of
              several random masks.
  entity      each entity masked whole with masking.entity_probability at a step, the rest of
              the budget in whole words.
"""

import collections
import itertools
import logging
import math

import numpy as np
import pytest

from masking_cases import (ROWS, _assert_all_or_nothing, _entities, _entity_units, _hash_of,
                           _masker, _selected)
from mlmjax.data import pipeline
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import units
from mlmjax.models import special_ids

SHARES = (0.5, 0.25, 0.125, 0.125)


def _word(rng, used: set) -> str:
  """A made-up lowercase word of 6 letters, new to `used` (a word the masker sees whole)."""
  while True:
    w = "".join(rng.choice(list("bcdfghjklmnprstvwz"), 3)) + "".join(rng.choice(list("aeiou"), 3))
    w = w[0] + w[3] + w[1] + w[4] + w[2] + w[5]
    if w not in used:
      used.add(w)
      return w


def _planted_corpus():
  """200 documents of 30 filler words (60 of them, drawn at random: no n-gram of them is seen
  11 times) with planted n-grams of words found nowhere else, each planted n-gram seen a
  distinct number of times, and a frequent bigram of two frequent words.

  A tight n-gram seen c times out of N words has PMI_n = log(N / c): the rarer, the higher, so
  ranking by count puts them in the opposite order, and the frequent bigram (seen most of all)
  first; the vocabulary's top 8 with the paper's shares is the 4 rarest planted bigrams, the 2
  rarest trigrams, the rarest 4-gram and the rarest 5-gram."""
  rng = np.random.default_rng(0)
  used: set = set()
  filler = [_word(rng, used) for _ in range(60)]
  frequent = (_word(rng, used), _word(rng, used))
  planted = {}  # n-gram -> times planted
  for n, counts in ((2, (12, 13, 14, 15, 16)), (3, (20, 21, 22)), (4, (30, 31)), (5, (40, 41)),
                    (2, (9,))):  # a tight bigram seen 9 times: under the minimum count
    for c in counts:
      planted[tuple(_word(rng, used) for _ in range(n))] = c
  docs = [list(rng.choice(filler, 30)) for _ in range(200)]
  for gram, c in [*planted.items(), (frequent, 45)]:
    for _ in range(c):
      doc = docs[int(rng.integers(len(docs)))]
      doc.insert(int(rng.integers(len(doc) + 1)), " ".join(gram))
  for _ in range(300):  # the frequent words also alone, often
    doc = docs[int(rng.integers(len(docs)))]
    doc.insert(int(rng.integers(len(doc) + 1)), frequent[int(rng.integers(2))])
  return [" ".join(d) for d in docs], planted, frequent


def _vocabulary_by_hand(docs, num_ngrams, min_count):
  """PMI-Masking's vocabulary from the paper's definitions: PMI_n(w) = log p(w) - max over the
  segmentations of w into 2 or more contiguous parts of sum log p(part); per length, the top
  share x num_ngrams of the n-grams seen at least min_count times. -> ({n-gram}, scores)."""
  words = [d.split() for d in docs]
  total = sum(len(w) for w in words)
  counts = collections.Counter(tuple(w[i:i + n]) for w in words for n in range(1, 6)
                               for i in range(len(w) - n + 1))
  log_p = lambda g: math.log(counts[g] / total)
  scores = {}
  for gram, c in counts.items():
    n = len(gram)
    if n < 2 or c < min_count:
      continue
    best = max(sum(log_p(gram[a:b]) for a, b in zip((0,) + cuts, cuts + (n,)))
               for k in range(1, n) for cuts in itertools.combinations(range(1, n), k))
    scores[gram] = log_p(gram) - best
  vocabulary = set()
  for n, share in zip(range(2, 6), SHARES):
    ranked = sorted((g for g in scores if len(g) == n), key=lambda g: -scores[g])
    k = round(share * num_ngrams)
    assert scores[ranked[k - 1]] > scores[ranked[k]]  # no tie at the cut: one right answer
    vocabulary |= set(ranked[:k])
  return vocabulary, scores


@pytest.fixture(scope="module")
def planted(tok, stats):
  docs, grams, frequent = _planted_corpus()
  table = cooccurrence.compute(pipeline.tokenized(docs, tok), stats, 200, 8, 11, SHARES)
  return docs, grams, frequent, table


def test_the_pmi_vocabulary_is_the_papers_computed_by_hand(tok, stats, planted):
  docs, grams, frequent, table = planted
  expected, scores = _vocabulary_by_hand(docs, 8, 11)
  assert expected == {g for g, c in grams.items() if c in (12, 13, 14, 15, 20, 21, 30, 40)}
  # Counts and PMI disagree: the most frequent bigram ranks last of the bigrams by PMI.
  assert scores[frequent] < min(s for g, s in scores.items() if len(g) == 2 and g != frequent)
  assert set(table.ngrams.tolist()) == {_hash_of(tok, stats, " ".join(g)) for g in expected}


def _made_up_words(count, seed=1):
  rng, used = np.random.default_rng(seed), set()
  return [_word(rng, used) for _ in range(count)]


@pytest.fixture(scope="module")
def at_min_count(tok, stats):
  """Words a b c d e f g, made up. Documents "a b" and "c d e" 3 times each, "f g" twice, each a
  run of its own; counted with a minimum count of 3, so "a b", "c d", "d e" and "c d e" (and the
  pairs (a, b), (c, d), (d, e), (c, e)) are seen exactly the minimum, "f g" (and (f, g)) once
  fewer. -> (the words, the table)."""
  a, b, c, d, e, f, g = words = _made_up_words(7)
  docs = [f"{a} {b}"] * 3 + [f"{c} {d} {e}"] * 3 + [f"{f} {g}"] * 2
  return words, cooccurrence.compute(pipeline.tokenized(docs, tok), stats, len(docs), 8, 3,
                                     SHARES)


def test_an_ngram_seen_exactly_the_minimum_count_is_in_the_vocabulary(tok, stats,
                                                                       at_min_count):
  """`masking.pmi_min_count` is the least count an n-gram may have ("seen at least"): the
  n-grams seen exactly that often are ranked (a vocabulary of 8 n-grams has room for them all),
  one seen once fewer is not. Comparing with > instead of >= drops them all."""
  (a, b, c, d, e, f, g), table = at_min_count
  expected = [f"{a} {b}", f"{c} {d}", f"{d} {e}", f"{c} {d} {e}"]
  assert set(table.ngrams.tolist()) == {_hash_of(tok, stats, t) for t in expected}
  assert _hash_of(tok, stats, f"{f} {g}") not in set(table.ngrams.tolist())


def test_pmi_n_is_over_every_segmentation_not_only_two_way_splits(tok, stats):
  """PMI_n (Levine et al. 2021, eq. 2) subtracts the best of ALL segmentations of an n-gram
  into contiguous parts, of 3 parts too. 400 words: "a b c" twice, a, b and c 38 times more
  each alone; "x y z" 57 times (x, y, z nowhere else); a filler word alone 109 times.

  "a b c": log p = log(2/400); its best segmentation is a|b|c, 3 log(40/400) = -6.908, above
  a|bc and ab|c, log(40/400) + log(2/400) = -7.601 (its bigrams are rarer than chance), so
  PMI_3 = log(2/400) + 6.908 = log 5 = 1.609. "x y z" is tight: its best is two parts,
  2 log(57/400), so PMI_3 = log(400/57) = 1.948. With the vocabulary's one trigram, the paper
  takes "x y z"; two-way splits only would give "a b c" log 10 = 2.303 and take it instead."""
  a, b, c, x, y, z, filler = _made_up_words(7)
  docs = ([f"{a} {b} {c}"] * 2 + [a] * 38 + [b] * 38 + [c] * 38 + [f"{x} {y} {z}"] * 57
          + [filler] * 109)
  log_p = lambda count: math.log(count / 400)
  abc = log_p(2) - max(3 * log_p(40), log_p(40) + log_p(2))
  abc_two_way = log_p(2) - (log_p(40) + log_p(2))
  xyz = log_p(57) - max(3 * log_p(57), 2 * log_p(57))
  assert abc == pytest.approx(math.log(5)) and abc_two_way == pytest.approx(math.log(10))
  assert xyz == pytest.approx(math.log(400 / 57)) and abc < xyz < abc_two_way
  table = cooccurrence.compute(pipeline.tokenized(docs, tok), stats, len(docs), 1, 2,
                               (0.0, 1.0, 0.0, 0.0))
  assert table.ngrams.tolist() == [_hash_of(tok, stats, f"{x} {y} {z}")]


@pytest.fixture(scope="module")
def sized(tok, stats):
  """Made-up words in 252 of them: "a b" 20 times (a, b nowhere else), "c d" 4 times and c 4
  times alone, "f g" 12 times and f, g 88 times each alone; each a document of its own. Seen at
  least 3 times: ab, PMI log(252/20) = 2.53 (and 'p2', PMI + log p, log(20^2/(20 x 20)) = 0);
  cd, PMI log(252 x 4/(8 x 4)) = 3.45 ('p2' log(16/32) = -0.69); fg, more rarely together than
  apart: PMI log(252 x 12/(100 x 100)) < 0. cd covers 8 of the words, ab 40, both 48.
  -> (a function of compute's sizing arguments giving the vocabulary's texts, coverage)."""
  a, b, c, d, f, g = _made_up_words(6, seed=7)
  docs = ([f"{a} {b}"] * 20 + [f"{c} {d}"] * 4 + [c] * 4 + [f"{f} {g}"] * 12 + [f] * 88
          + [g] * 88)
  texts = {_hash_of(tok, stats, t): t for t in (f"{a} {b}", f"{c} {d}", f"{f} {g}")}
  names = {f"{a} {b}": "ab", f"{c} {d}": "cd", f"{f} {g}": "fg"}

  def vocabulary(num_ngrams, shares, coverage, score="pmi"):
    table = cooccurrence.compute(pipeline.tokenized(docs, tok), stats, len(docs), num_ngrams, 3,
                                 shares, coverage, score)
    return {names[texts[h]] for h in table.ngrams.tolist()}, table.coverage
  return vocabulary


def test_the_pmi_vocabulary_is_sized_by_coverage_and_keeps_no_pmi_below_zero(sized, caplog):
  """PMI-Masking's vocabulary holds n-grams more likely together than apart (PMI_n > 0), as
  many of the best as it takes for `coverage` of the words to lie inside one; the p^2 score
  ranks the frequent first; a coverage out of reach and a length's share that cannot be filled
  each say so."""
  bigrams = (1.0, 0.0, 0.0, 0.0)
  assert sized(0, bigrams, 0.03) == ({"cd"}, pytest.approx(8 / 252))
  assert sized(0, bigrams, 0.1) == ({"cd", "ab"}, pytest.approx(48 / 252))
  assert sized(0, bigrams, 0.1, "p2") == ({"ab"}, pytest.approx(40 / 252))
  with caplog.at_level(logging.WARNING):
    assert sized(0, bigrams, 0.5) == ({"cd", "ab"}, pytest.approx(48 / 252))  # never fg
  assert [r.getMessage() for r in caplog.records] == [
      "masking.pmi_coverage=0.5 is out of reach: every n-gram with PMI_n > 0 seen"
      " masking.pmi_min_count times covers 19.0% of the words"]
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    assert sized(4, (0.5, 0.5, 0.0, 0.0), 0.5)[0] == {"cd", "ab"}
  assert [r.getMessage() for r in caplog.records] == [
      "masking.pmi_length_shares: 3-grams are 2 of a vocabulary of 4, but only 0 have PMI_n > 0"
      " and masking.pmi_min_count occurrences"]


def _ids(tok, text):
  return np.asarray([[special_ids.CLS_ID] + tok.encode([text])[0] + [special_ids.SEP_ID]],
                    np.int32)


def _table(tok, stats, *texts):
  return cooccurrence.Cooccurrence(np.sort(np.asarray([_hash_of(tok, stats, t) for t in texts],
                                                      np.uint64)),
                                   np.zeros(0, np.uint64), np.zeros(0, np.float32))


def _unit_words(tok, stats, text, table, priority=None):
  """The units of `text` as lists of its words."""
  ids = _ids(tok, text)
  seg, maskable = np.ones_like(ids), ids >= special_ids.NUM_SPECIAL
  starts, hashes = cooccurrence.word_hashes(ids, seg, maskable, stats)
  if priority is not None:  # by word: put each word's priority at its first piece
    col = np.zeros(ids.shape)
    col[starts] = priority
    priority = col
  heads, _ = cooccurrence.ngram_units(starts, hashes, seg, maskable, table, priority)
  word_of = np.cumsum(starts[0]) - 1
  head_col = units.head_cols(heads)[0]
  out = collections.defaultdict(list)
  for c in np.flatnonzero(starts[0]):
    out[head_col[c]].append(text.split()[word_of[c]])
  return list(out.values())


def test_a_collocation_is_never_split_by_a_weaker_overlapping_ngram(tok, stats):
  """Made-up words in 40: "a b c" 5 times, "a b" 10 times, c 5 times alone. By hand: a, b 15
  times, c 10, "a b" 15, "b c" 5; PMI(a b) = log(15 x 40/(15 x 15)) = log(8/3), PMI(b c) =
  log(5 x 40/(15 x 10)) = log(4/3), both above zero and in the vocabulary. In "a b c" the two
  overlap: "a b" is kept whole, whatever the random priorities (at random, "b c" would win
  about half the time)."""
  a, b, c = _made_up_words(3, seed=11)
  docs = [f"{a} {b} {c}"] * 5 + [f"{a} {b}"] * 10 + [c] * 5
  table = cooccurrence.compute(pipeline.tokenized(docs, tok), stats, len(docs), 2, 3,
                               (1.0, 0.0, 0.0, 0.0))
  pmi = dict(zip(table.ngrams.tolist(), table.ngram_pmi.tolist()))
  assert pmi == {_hash_of(tok, stats, f"{a} {b}"): pytest.approx(math.log(8 / 3)),
                 _hash_of(tok, stats, f"{b} {c}"): pytest.approx(math.log(4 / 3))}
  rng = np.random.default_rng(0)
  for _ in range(20):
    assert _unit_words(tok, stats, f"{a} {b} {c}", table, rng.random(3)) == [[a, b], [c]]


def test_nested_ngrams_give_way_to_the_longer_and_overlapping_ones_to_chance(tok, stats):
  """The repository's own examples: "the united states air force" holds "the united states"
  and "air force": one unit; "by the way out" with "by the way" and "the way out": either one,
  the other words alone."""
  table = _table(tok, stats, "the united states", "air force", "the united states air force")
  assert _unit_words(tok, stats, "the united states air force went", table) == [
      ["the", "united", "states", "air", "force"], ["went"]]
  table = _table(tok, stats, "by the way", "the way out")
  text = "by the way out"
  assert _unit_words(tok, stats, text, table, [1, 0, 0, 0]) == [["by", "the", "way"], ["out"]]
  assert _unit_words(tok, stats, text, table, [0, 1, 0, 0]) == [["by"], ["the", "way", "out"]]
  assert _unit_words(tok, stats, text, table) == [["by", "the", "way"], ["out"]]  # the earlier


def test_of_two_overlapping_ngrams_each_wins_half_the_time(tok, stats):
  """Through the masker: words a b c d (one token each) hold the vocabulary's "a b c" and
  "b c d", which overlap; at each step of each example one of them is a unit, at random, the
  other's remaining word a unit alone (the code: each occurrence draws a uniform priority at
  its first piece and the higher wins), so "a b c" wins with probability 1/2.

  A budget of 3 of the 4 tokens then masks the 3-word unit or the 1-word one, whichever comes
  first in the units' random order: {a, b, c} or {d} when "a b c" won, {b, c, d} or {a} when
  "b c d" did. Of the masks holding b (about 2,000 of 4,000: 1,000 examples, 2 seeds, 2 steps),
  "a b c" won a share of 1/2 within 5 standard errors; a fixed rule (the earlier wins) gives 1."""
  words = _one_piece_words(tok, 4)
  ids = _ids(tok, " ".join(words))
  table = _table(tok, stats, " ".join(words[:3]), " ".join(words[1:]))
  rows = 1000
  batch = {"input_ids": np.repeat(ids, rows, 0), "segment_ids": np.ones((rows, ids.shape[1]),
                                                                          np.int32)}
  m = _masker(stats, strategy="semantic", cooccurrence=table, mask_rate=0.75)
  masks = []
  for seed, step in itertools.product((0, 1), (0, 1)):
    masks.append(_selected(m(batch, seed=seed, step=step, example_ids=np.arange(rows)),
                           batch["input_ids"].shape)[:, 1:5])  # [CLS] first
  masks = np.concatenate(masks)
  allowed = {(1, 1, 1, 0), (0, 0, 0, 1), (0, 1, 1, 1), (1, 0, 0, 0)}
  assert {tuple(map(int, mask)) for mask in masks} <= allowed
  with_b = masks[masks[:, 1]]
  share = with_b[:, 0].mean()  # a masked with b: "a b c" won
  assert len(with_b) > 1500
  assert abs(share - 0.5) < 5 * math.sqrt(0.25 / len(with_b)), share


def test_semantic_masks_its_ngrams_whole_other_words_whole_and_replaces_by_unit(tok, stats,
                                                                                planted):
  """Rows of the planted corpus: every vocabulary n-gram and every other word is masked whole
  or not at all; n-grams are masked (not just their words); and a unit's masked tokens are all
  [MASK] or none is (one 80/10/10 decision per unit: [MASK] for 80% of the units)."""
  docs, _, _, table = planted
  texts = [" ".join(d.split()[:24]) for d in docs[:64]]
  ids = np.zeros((len(texts), 96), np.int32)
  for r, t in enumerate(texts):
    row = _ids(tok, t)[0][:96]
    ids[r, :len(row)] = row
  seg = (ids != special_ids.PAD_ID).astype(np.int32)
  maskable = (ids >= special_ids.NUM_SPECIAL) & (seg > 0)
  starts, hashes = cooccurrence.word_hashes(ids, seg, maskable, stats)
  heads, inside = cooccurrence.ngram_units(starts, hashes, seg, maskable, table)
  assert inside.sum() > 100  # the planted n-grams do not overlap: these are the units
  unit = np.where(maskable, np.arange(len(ids))[:, None] * 96 + units.head_cols(heads), -1)
  word = np.where(maskable, np.arange(len(ids))[:, None] * 96 + units.head_cols(starts), -1)
  m = _masker(stats, strategy="semantic", cooccurrence=table, mask_rate=0.3,
              max_predictions_per_seq=32)
  ngram_units_masked = all_mask = 0
  decisions = []
  for step in range(20):
    out = m({"input_ids": ids, "segment_ids": seg}, seed=0, step=step,
            example_ids=np.arange(len(ids)))
    sel = _selected(out, ids.shape)
    _assert_all_or_nothing(unit, sel)
    _assert_all_or_nothing(word, sel)
    ngram_units_masked += len(np.unique(unit[sel & inside]))
    is_mask = out["input_ids"] == special_ids.MASK_ID
    for u in np.unique(unit[sel]):
      members = (unit == u) & sel
      if members.sum() > 1:
        decisions.append(is_mask[members].all() or not is_mask[members].any())
        all_mask += is_mask[members].all()
  assert ngram_units_masked > 40  # n-grams are masked, whole (87 here)
  assert all(decisions) and len(decisions) > 500
  assert abs(all_mask / len(decisions) - 0.8) < 5 * math.sqrt(0.16 / len(decisions))


# -------------------------------------------------------------------------------- contextual

def _one_piece_words(tok, count):
  """`count` common words the tokenizer keeps in one piece each (so each is its own unit of
  one token, and a budget of one token is one word)."""
  common = ("and the said unto him his people king land house son day thou thy they them all"
            " shall lord god").split()
  words = [w for w in common if len(tok.encode([w])[0]) == 1][:count]
  assert len(words) == count
  return words


def _pair_table(word_hashes, pairs):
  """A table of word pairs (by index into word_hashes) and their PMI."""
  keys = cooccurrence._pair_keys(  # pylint: disable=protected-access
      word_hashes[[a for a, _, _ in pairs]], word_hashes[[b for _, b, _ in pairs]])
  order = np.argsort(keys)
  return cooccurrence.Cooccurrence(np.zeros(0, np.uint64), keys[order],
                                   np.asarray([p for _, _, p in pairs], np.float32)[order])


def test_informative_relevance_and_sample_and_score_computed_by_hand(tok, stats):
  """Words a b c d e f g h, one token each; PMI(a, b) = 2, PMI(a, c) = 1, PMI(a, h) = 5 (7 words
  apart: beyond WINDOW = 5, never counted). A mask's relevance sums the PMI of each masked word
  with each unmasked one: {a} 3, {b} 2, {c} 1, {h} 0, {a, b} 1 (what a and b share is lost).

  Masking one word with N = 10 uniform candidates, sample-and-score keeps a when a is among them
  (1 - (7/8)^10 = 0.737), else b when b is ((7/8)^10 - (6/8)^10 = 0.207), else c (0.047), else
  the first candidate (0.009 for the other five together)."""
  words = _one_piece_words(tok, 8)
  ids = _ids(tok, " ".join(words))
  seg, maskable = np.ones_like(ids), ids >= special_ids.NUM_SPECIAL
  starts, hashes = cooccurrence.word_hashes(ids, seg, maskable, stats)
  table = _pair_table(hashes[starts], [(0, 1, 2.0), (0, 2, 1.0), (0, 7, 5.0)])
  pairs = cooccurrence.word_pairs(starts, hashes, seg, table)
  for masked, relevance in [({0}, 3), ({1}, 2), ({2}, 1), ({7}, 0), ({0, 1}, 1)]:
    flags = np.isin(np.arange(8), list(masked))
    assert cooccurrence.informative_relevance(pairs, flags, 1) == [relevance], masked
  rows = 4000
  batch = {"input_ids": np.repeat(ids, rows, 0), "segment_ids": np.repeat(seg, rows, 0)}
  m = _masker(stats, strategy="contextual", contextual_candidates=10, mask_rate=0.1,
              cooccurrence=table)
  out = m(batch, seed=0, step=0, example_ids=np.arange(rows))
  assert (out["masked_weights"].sum(1) == 1).all()
  word = out["masked_positions"][:, 0] - 1  # [CLS] first
  share = np.bincount(word, minlength=8) / rows
  expected = [1 - (7 / 8)**10, (7 / 8)**10 - (6 / 8)**10, (6 / 8)**10 - (5 / 8)**10]
  for w, p in enumerate(expected):
    assert abs(share[w] - p) < 5 * math.sqrt(p * (1 - p) / rows), (w, share[w], p)
  assert abs(share[3:].sum() - (5 / 8)**10) < 0.01


def test_a_pair_seen_exactly_the_minimum_count_has_its_pmi(tok, stats, at_min_count):
  """InforMask's pairs (the contextual strategy's table) have the same minimum count: the pairs
  of at_min_count's corpus seen exactly 3 times are in the table, (f, g), seen twice, is not.
  19 words and 14 pairs within WINDOW (1 in each "a b" and "f g", 3 in each "c d e"), so each
  kept pair's PMI is log(3/14) - 2 log(3/19) = 2.151. Comparing with > drops them all."""
  words, table = at_min_count
  ids = _ids(tok, " ".join(words))
  starts, hashes = cooccurrence.word_hashes(ids, np.ones_like(ids),
                                            ids >= special_ids.NUM_SPECIAL, stats)
  h = hashes[starts]
  assert len(h) == 7
  pairs = [(0, 1), (2, 3), (3, 4), (2, 4)]
  keys = cooccurrence._pair_keys(  # pylint: disable=protected-access
      h[[i for i, _ in pairs]], h[[j for _, j in pairs]])
  assert table.pairs.tolist() == sorted(keys.tolist())
  np.testing.assert_allclose(table.pair_pmi, math.log(3 / 14) - 2 * math.log(3 / 19),
                             rtol=1e-6)


def test_contextual_masks_change_from_step_to_step(stats, long_rows, cooc):
  """On the corpus's own rows at 30%, a word stays unmasked for 10 steps about as rarely as
  under whole-word masking (0.7^10: 3%), not for good (the fixed-score masks of before: 41%)."""
  ids = long_rows["input_ids"]
  maskable = (ids >= special_ids.NUM_SPECIAL) & (long_rows["segment_ids"] > 0)
  starts = units.word_starts(ids, long_rows["segment_ids"], maskable, stats)
  m = _masker(stats, strategy="contextual", cooccurrence=cooc, mask_rate=0.3,
              max_predictions_per_seq=48)
  ever = np.zeros(ids.shape, bool)
  for step in range(10):
    ever |= _selected(m(long_rows, seed=0, step=step, example_ids=np.arange(len(ids))),
                      ids.shape)
  assert (starts & ~ever).sum() / starts.sum() < 0.1


# ------------------------------------------------------------------------------------ entity

@pytest.mark.parametrize("probability", [0.3, 0.7])
def test_entity_masks_each_entity_whole_at_its_probability(stats, packed, gazetteer,
                                                          probability):
  """With a budget that never runs out (50% of a row, room for 64 predictions), each entity is
  masked whole at a step with the configured probability, a fresh draw each step; the rest is
  whole words."""
  m = _masker(stats, gazetteer, strategy="entity", entity_probability=probability,
              mask_rate=0.5, max_predictions_per_seq=64)
  ids = packed["input_ids"]
  unit = _entity_units(*_entities(stats, packed, gazetteer))
  maskable = (ids >= special_ids.NUM_SPECIAL) & (packed["segment_ids"] > 0)
  word = np.where(maskable, np.arange(ROWS)[:, None] * 1000 + units.head_cols(
      units.word_starts(ids, packed["segment_ids"], maskable, stats)), -1)
  masked, total, previous, changed = 0, 0, None, 0
  for step in range(6):
    sel = _selected(m(packed, seed=0, step=step, example_ids=np.arange(ROWS)), ids.shape)
    _assert_all_or_nothing(unit, sel)
    _assert_all_or_nothing(np.where(unit < 0, word, -1), sel)
    hit = np.bincount(unit[unit >= 0], weights=sel[unit >= 0]) > 0
    masked, total = masked + hit.sum(), total + len(hit)
    changed += 0 if previous is None else (hit != previous).sum()
    previous = hit
  assert abs(masked / total - probability) < 5 * math.sqrt(probability * (1 - probability)
                                                           / total)
  assert changed > 0.3 * total / 6  # an entity's fate is drawn afresh each step
