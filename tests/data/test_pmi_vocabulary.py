"""PMI-Masking's vocabulary (mlmjax/data/masking/pmi_vocabulary.py) held to the paper's
definitions (Levine et al., ICLR 2021; github.com/AI21Labs/pmi-masking), computed here by hand
on corpora made so that the right definition and the usual wrong ones disagree: PMI_n over
every segmentation, n-grams seen at least the minimum count, ranked per length in shares,
PMI_n above zero, sized to a share of the words covered."""

import collections
import itertools
import logging
import math

import pytest

from masking_cases import _hash_of, _made_up_words
from mlmjax.data import pipeline
from mlmjax.data.masking import cooccurrence

SHARES = (0.5, 0.25, 0.125, 0.125)


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


def test_the_pmi_vocabulary_is_the_papers_computed_by_hand(tok, stats, planted):
  docs, grams, frequent, table = planted
  expected, scores = _vocabulary_by_hand(docs, 8, 11)
  assert expected == {g for g, c in grams.items() if c in (12, 13, 14, 15, 20, 21, 30, 40)}
  # Counts and PMI disagree: the most frequent bigram ranks last of the bigrams by PMI.
  assert scores[frequent] < min(s for g, s in scores.items() if len(g) == 2 and g != frequent)
  assert set(table.ngrams.tolist()) == {_hash_of(tok, stats, " ".join(g)) for g in expected}


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
