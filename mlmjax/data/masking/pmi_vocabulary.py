"""PMI-Masking's vocabulary (Levine et al., ICLR 2021): which word n-grams `semantic` masks
whole, chosen from the corpus counts cooccurrence.py makes.

An n-gram of 2 to 5 words is eligible when seen at least `masking.pmi_min_count` times and its
PMI_n is above zero: log p(w1..wn) minus the largest sum of log-probabilities over its
segmentations into two or more contiguous parts (more likely together than in any split).
Each length is ranked apart (PMI_n is length-sensitive) by PMI_n, or with
`masking.pmi_score='p2'` by PMI_n + log p (github.com/shaigue/pmi_masking's score, frequent
n-grams first). The vocabulary takes the best `share x K` of each length (LENGTH_SHARES, the
paper's: half bigrams), K = `masking.pmi_ngrams`, or (0) the smallest K for which
`masking.pmi_coverage` of the words lie inside an occurrence of a kept n-gram (the paper's
800K n-grams cover about half of its corpus); a length too short for its share, or a coverage
out of reach, is said in a warning.
"""

from __future__ import annotations

import itertools

from absl import logging
import numpy as np

MAX_N = 5  # the longest n-gram (the paper's)
# The shares of 2-, 3-, 4- and 5-grams (the paper's masking vocabulary,
# github.com/AI21Labs/pmi-masking).
LENGTH_SHARES = (0.5, 0.25, 0.125, 0.125)
COVERAGE = 0.5  # the share of words inside a kept n-gram (masking.pmi_coverage's default)
SCORES = ("pmi", "p2")  # what ranks the n-grams of a length


def lookup(table: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  idx = np.minimum(np.searchsorted(table, keys), max(len(table) - 1, 0))
  return idx, (table[idx] == keys) if len(table) else np.zeros(keys.shape, bool)


def choose(grams: dict, at: dict, fits: dict, log_p: dict, total: int, min_count: int,
           length_shares, num_ngrams: int, coverage: float,
           score: str) -> tuple[np.ndarray, np.ndarray, float]:
  """(the vocabulary's n-gram hashes, sorted; their PMI_n; the share of the words inside one)
  from the sample's counts, by n: `grams` (sorted hashes, a word index of each, counts), `at`
  and `fits` (the hash of the n-gram starting at each word, whether one fits there), `log_p`
  (sorted hashes, log-probabilities); `total` words."""
  ranked, pmi_of = {}, {}  # n -> the eligible n-grams, best first, and their PMI_n
  for n in range(2, MAX_N + 1):
    uniq, where, counts = grams[n]
    keep = counts >= min_count
    best = np.full(keep.sum(), -np.inf)
    for cuts in _segmentations(n):
      total_lp = np.zeros(keep.sum())
      for a, b in zip((0,) + cuts, cuts + (n,)):
        idx, found = lookup(log_p[b - a][0], at[b - a][where[keep] + a])
        total_lp += np.where(found, log_p[b - a][1][idx], log_p[n][1][keep])
      best = np.maximum(best, total_lp)
    log_pn = np.log(counts[keep] / total)
    pmi = log_pn - best
    rank = pmi if score == "pmi" else pmi + log_pn
    positive = pmi > 0
    order = np.argsort(-rank[positive], kind="stable")
    ranked[n] = uniq[keep][positive][order]
    pmi_of[n] = pmi[positive][order]
  vocabulary, reached = _sized(ranked, {n: (at[n], fits[n]) for n in ranked},
                               len(at[1]), length_shares, num_ngrams, coverage)
  ngrams = np.concatenate(vocabulary)
  ngram_pmi = np.concatenate([pmi_of[n][:len(v)] for n, v in zip(range(2, MAX_N + 1),
                                                                 vocabulary)])
  by_hash = np.argsort(ngrams, kind="stable")
  return ngrams[by_hash], ngram_pmi[by_hash].astype(np.float32), reached


def _sized(ranked: dict, at: dict, num_words: int, length_shares, num_ngrams: int,
           coverage: float) -> tuple[list[np.ndarray], float]:
  """(each length's kept n-grams, the share of the words inside one of their occurrences): the
  best `share x K` of each length's `ranked`, K = `num_ngrams`, or (0) the smallest K whose
  n-grams cover `coverage` of the words (coverage grows with K: a bisection). `at`: n -> (the
  hash of the n-gram starting at each word, whether one fits there)."""
  def kept(k: int) -> list[np.ndarray]:
    return [ranked[n][:int(round(share * k))] for n, share in zip(range(2, MAX_N + 1),
                                                                 length_shares)]

  def covered(k: int) -> float:
    inside = np.zeros(num_words + 1, np.int64)  # +1 at an occurrence's start, -1 past its end
    for n, grams in zip(range(2, MAX_N + 1), kept(k)):
      hashes, ok = at[n]
      _, found = lookup(np.sort(grams), hashes)
      first = np.flatnonzero(ok & found)
      np.add.at(inside, first, 1)
      np.add.at(inside, first + n, -1)
    return np.count_nonzero(np.cumsum(inside)[:num_words]) / max(num_words, 1)

  # The K that takes every length's last eligible n-gram: no larger one changes anything.
  most = max([int(np.ceil(len(ranked[n]) / share)) for n, share in
              zip(range(2, MAX_N + 1), length_shares) if share > 0] + [1])
  size = num_ngrams
  if not size:
    low, size, at_most = 1, most, covered(most)
    if at_most < coverage:
      logging.warning("masking.pmi_coverage=%g is out of reach: every n-gram with PMI_n > 0"
                      " seen masking.pmi_min_count times covers %.1f%% of the words", coverage,
                      100 * at_most)
    while low < size:
      mid = (low + size) // 2
      low, size = (low, mid) if covered(mid) >= coverage else (mid + 1, size)
  for n, share in zip(range(2, MAX_N + 1), length_shares):
    if len(ranked[n]) < int(round(share * size)):
      logging.warning("masking.pmi_length_shares: %d-grams are %d of a vocabulary of %d, but"
                      " only %d have PMI_n > 0 and masking.pmi_min_count occurrences", n,
                      int(round(share * size)), size, len(ranked[n]))
  vocabulary = kept(size)
  reached = covered(size)
  logging.info("PMI vocabulary: %s n-grams of 2-5 words, %.1f%% of the words inside one",
               "/".join(str(len(v)) for v in vocabulary), 100 * reached)
  return vocabulary, reached


def _segmentations(n: int):
  """Cut points of every split of n words into 2 or more contiguous parts: (1,), (2,), (1, 2)..."""
  for k in range(1, n):
    yield from itertools.combinations(range(1, n), k)
