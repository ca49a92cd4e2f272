"""Word co-occurrence statistics of the training corpus, for `semantic` and `contextual` masking.

Words are the masker's words (units.py: a ▁-piece and its continuation, punctuation alone),
each identified by a 64-bit hash of its pieces, so the tables are tokenizer-exact and the
masker finds them again in packed rows with the same function (`word_hashes`).

  semantic    PMI-Masking (Levine et al., ICLR 2021; github.com/AI21Labs/pmi-masking). The
              vocabulary of correlated word n-grams, chosen from this sample's counts:
              pmi_vocabulary.py. In a row, its occurrences are units taken whole (one inside a
              longer one gives way to it; of two overlapping otherwise, the one of higher
              PMI_n, so a collocation is never split by a weaker n-gram, at random between
              equals), every other word a unit of its own, all in a uniformly random order
              while they fit the budget; the 80/10/10 replacement is decided per unit.
  contextual  InforMask (Sadeq et al., EMNLP 2022). The informative relevance of a mask is the
              PMI of each masked word with each unmasked word within WINDOW words of it in its
              sequence, summed (pairs seen fewer than pmi_min_count times count 0): high when
              the context predicts what is hidden. The paper's sample-and-score: each step,
              masking.contextual_candidates random whole-word masks of the budget are drawn for
              a row and the one of the highest relevance is kept, so informative words are
              masked most often and masks change every step.

Counted once per run over the same document sample as the token counts
(`masking.stats_max_documents` documents, evenly spaced), exactly, with numpy's sorted unique
counts: the peak memory is about 500 bytes a word of the sample, so the sample stops at
MAX_WORDS words (~1 GB; the built-in corpus has 0.9 million, counted in 2.2 s). Saved in the
workdir next to the vocab stats and reused on resume, so masks never change under a run.
"""

from __future__ import annotations

import dataclasses
import io

from absl import logging
import numpy as np

from mlmjax import paths
from mlmjax.data.text import annotation
from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import pmi_vocabulary
from mlmjax.data.masking import units
from mlmjax.data.masking.pmi_vocabulary import COVERAGE, LENGTH_SHARES, MAX_N, lookup
from mlmjax.data.masking.uniforms import GOLDEN, M1, M2, mix64
from mlmjax.models import special_ids

WINDOW = 5  # words on each side a word's relevance counts
MAX_WORDS = 2_000_000  # the most words counted (memory: module docstring)
_VERSION = 2  # 2: the coverage reached and each n-gram's PMI_n


@dataclasses.dataclass(frozen=True, eq=False)
class Cooccurrence:
  """Sorted n-gram hashes of the PMI vocabulary; sorted word-pair hashes and their PMI."""

  ngrams: np.ndarray      # [K] uint64
  pairs: np.ndarray       # [Q] uint64
  pair_pmi: np.ndarray    # [Q] float32
  coverage: float = float("nan")  # the share of the sample's words inside a kept n-gram
  ngram_pmi: np.ndarray | None = None  # [K] float32 PMI_n of each n-gram (None: all equal)


def word_hashes(ids, seg, maskable, stats: vocab_stats_lib.VocabStats):
  """-> word starts [R, T] bool and, at each word start, the hash of the word's pieces [R, T]
  uint64 (0 elsewhere)."""
  starts = units.word_starts(ids, seg, maskable, stats)
  head = units.head_cols(starts)
  r, c = np.nonzero(maskable & (head >= 0))
  with np.errstate(over="ignore"):
    piece = mix64(ids[r, c].astype(np.uint64) * M1 + (c - head[r, c]).astype(np.uint64)
                  * GOLDEN + GOLDEN)
  out = np.zeros(ids.shape, np.uint64)
  np.add.at(out, (r, head[r, c]), piece)  # wraps: a sum of scrambled pieces, in word order
  with np.errstate(over="ignore"):
    return starts, np.where(starts, mix64(out + M2), np.uint64(0))


def _words_of(starts, hashes, seg):
  """Row-major words: their hash and a run id (row, sequence) that n-grams may not cross."""
  r, c = np.nonzero(starts)
  return hashes[r, c], r.astype(np.int64) * (int(seg.max()) + 1) + seg[r, c]


def ngram_hashes(words: np.ndarray, run: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
  """The hashes of the n-grams starting at each word [W] and whether one fits in its run."""
  w = len(words)
  h = np.zeros(w, np.uint64)
  ok = np.full(w, w >= n)
  with np.errstate(over="ignore"):
    for j in range(min(n, w)):
      nxt, same = np.zeros(w, np.uint64), np.zeros(w, bool)
      nxt[:w - j], same[:w - j] = words[j:], run[j:] == run[:w - j]
      h, ok = mix64(h * M1 + nxt + np.uint64(n)), ok & same
  return h, ok


def _pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  with np.errstate(over="ignore"):
    return mix64(np.minimum(a, b) * M1 + np.maximum(a, b) + M2)


def _pairs(words, run):
  """Each word with those up to WINDOW words to its right in its run: per distance d, the
  left words' indices and the pairs' keys."""
  lefts, keys = [], []
  for d in range(1, WINDOW + 1):
    i = np.flatnonzero(run[:-d] == run[d:]) if len(run) > d else np.zeros(0, np.int64)
    lefts.append(i)
    keys.append(_pair_keys(words[i], words[i + d]))
  return lefts, keys


def _counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
  return uniq, first, counts


def compute(documents, stats: vocab_stats_lib.VocabStats, max_documents: int,
            num_ngrams: int, min_count: int, length_shares=LENGTH_SHARES,
            coverage: float = COVERAGE, score: str = "pmi") -> Cooccurrence:
  """The tables from an evenly spaced sample of `max_documents` tokenized documents, taken in a
  fixed random order (so a sample cut at MAX_WORDS is still spread over the corpus).
  `num_ngrams`: the vocabulary's size (0: as many as `coverage` takes); `length_shares`: its
  share of 2-, 3-, 4- and 5-grams (each length ranked apart by `score`)."""
  n_docs = len(documents)
  picked = (np.arange(n_docs) if n_docs <= max_documents
            else np.arange(max_documents) * n_docs // max_documents)
  all_words, all_runs, run_base, counted = [], [], 0, 0
  for i in picked[np.random.default_rng(0).permutation(len(picked))].tolist():
    if counted >= MAX_WORDS:
      logging.info("Co-occurrences: the sample stops at %d words (MAX_WORDS)", counted)
      break
    sentences = [annotation.ids_of(s) for s in documents.sentences(i)]
    if not sentences:
      continue
    ids = np.zeros((len(sentences), max(len(s) for s in sentences)), np.int32)
    for k, s in enumerate(sentences):
      ids[k, :len(s)] = s
    seg = (ids != special_ids.PAD_ID).astype(np.int32)
    maskable = (ids >= special_ids.NUM_SPECIAL) & (seg > 0)
    starts, hashes = word_hashes(ids, seg, maskable, stats)
    words, run = _words_of(starts, hashes, seg)
    all_words.append(words)
    all_runs.append(run + run_base)
    counted += len(words)
    run_base += int(run.max()) + 1 if len(run) else 0
  words = np.concatenate(all_words + [np.zeros(0, np.uint64)])
  run = np.concatenate(all_runs + [np.zeros(0, np.int64)])
  total = max(len(words), 1)
  log_p = {}  # n -> (sorted hashes, log-probabilities)
  grams, at, fits = {}, {}, {}
  for n in range(1, MAX_N + 1):
    at[n], fits[n] = ngram_hashes(words, run, n)
    ok = fits[n]
    uniq, first, counts = _counts(at[n][ok])
    log_p[n] = (uniq, np.log(counts / total))
    grams[n] = (uniq, np.flatnonzero(ok)[first], counts)
  ngrams, ngram_pmi, reached = pmi_vocabulary.choose(
      grams, at, fits, log_p, total, min_count, length_shares, num_ngrams, coverage, score)
  lefts, keys = _pairs(words, run)
  left = np.concatenate(lefts)
  right = np.concatenate([i + d for d, i in enumerate(lefts, 1)])
  pair_keys, first, pair_counts = _counts(np.concatenate(keys))
  kept = pair_counts >= min_count
  # PMI(a, b) = log p(a, b) - log p(a) - log p(b); a pair's words from its first occurrence.
  uni_h, uni_lp = log_p[1]
  lp_a = uni_lp[np.searchsorted(uni_h, at[1][left[first[kept]]])]
  lp_b = uni_lp[np.searchsorted(uni_h, at[1][right[first[kept]]])]
  pmi = np.log(pair_counts[kept] / max(len(left), 1)) - lp_a - lp_b
  return Cooccurrence(ngrams, pair_keys[kept], pmi.astype(np.float32), reached, ngram_pmi)


def ngram_units(starts, hashes, seg, maskable, table: Cooccurrence,
                priority: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """-> [R, T] unit heads of `semantic` and [R, T] the pieces inside its n-grams.

  PMI-Masking's units: each occurrence of a vocabulary n-gram is a unit, and each word outside
  them (whole-word masking). An occurrence inside a longer one gives way to it; of occurrences
  that overlap otherwise, the one of higher PMI_n wins (table.ngram_pmi), between equals the
  one of higher `priority` [R, T] at its first piece (random; None: the earlier one), and the
  other's words outside it are words of their own."""
  num_rows, length = starts.shape
  r, c = np.nonzero(starts)
  words, run = _words_of(starts, hashes, seg)
  w = len(words)
  index = np.arange(w)
  span = np.zeros(w, np.int64)  # words of the longest vocabulary n-gram starting at each word
  strength = np.zeros(w)  # its PMI_n
  for n in range(2, MAX_N + 1):
    h, ok = ngram_hashes(words, run, n)
    idx, found = lookup(table.ngrams, h)
    span = np.where(ok & found, n, span)
    if table.ngram_pmi is not None and len(table.ngram_pmi):
      strength = np.where(ok & found, table.ngram_pmi[idx], strength)
  end = np.where(span > 0, index + span, 0)
  earlier_end = np.maximum.accumulate(np.concatenate([[0], end[:-1]]))[:w]
  alive = (span > 0) & (earlier_end < end)  # not inside an earlier, longer occurrence
  prio = (-index.astype(np.float64) if priority is None else priority[r, c])
  kept = np.zeros(w, bool)
  while alive.any():  # rounds of local winners: the same as taking them by priority, one by one
    beaten = np.zeros(w, bool)
    for d in range(1, min(MAX_N, w)):
      # i overlaps i + d when d < span[i]; each loses to the other's higher priority
      pair = alive[:-d] & alive[d:] & (d < span[:-d])
      right_wins = (strength[d:] > strength[:-d]) | (
          (strength[d:] == strength[:-d]) & (prio[d:] > prio[:-d]))
      left_wins = (strength[:-d] > strength[d:]) | (
          (strength[:-d] == strength[d:]) & (prio[:-d] > prio[d:]))
      beaten[:-d] |= pair & right_wins
      beaten[d:] |= pair & left_wins
    won = alive & ~beaten
    kept |= won
    lost = np.zeros(w, bool)
    for d in range(1, min(MAX_N, w)):
      lost[d:] |= won[:-d] & (d < span[:-d])  # starts inside a winner
      lost[:-d] |= won[d:] & (d < span[:-d])  # a winner starts inside it
    alive &= ~won & ~lost
  taken = np.zeros(w, bool)  # words inside a kept occurrence
  for j in range(min(MAX_N, w)):  # (slices of j < w only: a batch may hold fewer words)
    taken[j:] |= kept[:w - j] & (j < span[:w - j])
  word_col = units.head_cols(starts)
  covered_word = np.zeros((num_rows, length), bool)
  covered_word[r, c] = taken
  head_word = np.zeros((num_rows, length), bool)
  head_word[r, c] = kept
  rr = np.arange(num_rows)[:, None]
  in_ngram = maskable & (word_col >= 0) & covered_word[rr, np.maximum(word_col, 0)]
  # An n-gram's later words continue its unit; a word outside them is a unit of its own.
  return maskable & (head_word | (starts & ~in_ngram)), in_ngram


@dataclasses.dataclass(frozen=True)
class WordPairs:
  """The word pairs of some rows with a PMI in the table: words within WINDOW of each other in
  one sequence, by their place among the rows' word starts (row-major)."""

  row: np.ndarray    # [Q] the row of each pair
  left: np.ndarray   # [Q] index of its first word
  right: np.ndarray  # [Q] index of its second word
  pmi: np.ndarray    # [Q]


def word_pairs(starts, hashes, seg, table: Cooccurrence) -> WordPairs:
  """The pairs of the rows' words whose PMI the table holds (pairs seen fewer than
  pmi_min_count times are not there: their PMI is too uncertain to count)."""
  r, _ = np.nonzero(starts)
  words, run = _words_of(starts, hashes, seg)
  rows, lefts, rights, pmis = [], [], [], []
  for d, (left, keys) in enumerate(zip(*_pairs(words, run)), 1):
    idx, found = lookup(table.pairs, keys)
    rows.append(r[left[found]])
    lefts.append(left[found])
    rights.append(left[found] + d)
    pmis.append(table.pair_pmi[idx[found]].astype(np.float64))
  cat = lambda parts, dtype: np.concatenate(parts + [np.zeros(0, dtype)])
  return WordPairs(cat(rows, np.int64), cat(lefts, np.int64), cat(rights, np.int64),
                   cat(pmis, np.float64))


def informative_relevance(pairs: WordPairs, masked_words: np.ndarray, num_rows: int
                          ) -> np.ndarray:
  """[R] InforMask's informative relevance of each row's mask: the PMI of every masked word
  with every unmasked word near it, summed (masked_words [W]: by word index). A mask scores
  high when it hides words its context predicts, and loses what two masked words share."""
  split = masked_words[pairs.left] != masked_words[pairs.right]
  return np.bincount(pairs.row, weights=pairs.pmi * split, minlength=num_rows)


def save(table: Cooccurrence, path: str) -> None:
  buf = io.BytesIO()
  np.savez(buf, version=np.int64(_VERSION), ngrams=table.ngrams, pairs=table.pairs,
           pair_pmi=table.pair_pmi, coverage=np.float64(table.coverage),
           ngram_pmi=np.zeros(0, np.float32) if table.ngram_pmi is None else table.ngram_pmi)
  paths.write_atomic(path, buf.getvalue())


def load(path: str) -> Cooccurrence:
  with np.load(io.BytesIO(paths.read_bytes(path)), allow_pickle=False) as z:
    if "coverage" not in z:  # version 1: neither the coverage nor the n-grams' PMI_n
      return Cooccurrence(z["ngrams"], z["pairs"], z["pair_pmi"])
    return Cooccurrence(z["ngrams"], z["pairs"], z["pair_pmi"], float(z["coverage"]),
                        z["ngram_pmi"] if len(z["ngram_pmi"]) else None)


def path_beside(stats_path: str) -> str:
  """Where a run keeps its tables: next to its vocab stats (workdir.py)."""
  return stats_path.removesuffix(".npz") + "_cooccurrence.npz"


def get(documents, stats, path: str, max_documents: int, num_ngrams: int,
        min_count: int, length_shares=LENGTH_SHARES, coverage: float = COVERAGE,
        score: str = "pmi") -> Cooccurrence:
  """The run's tables: the saved ones at `path`, else computed and saved there."""
  if paths.exists(path):
    logging.info("Reusing co-occurrence statistics %s", path)
    return load(path)
  logging.info("Counting word n-grams and pairs of up to %d documents...", max_documents)
  table = compute(documents, stats, max_documents, num_ngrams, min_count, length_shares,
                  coverage, score)
  save(table, path)
  logging.info("Saved %d PMI n-grams and %d word pairs to %s", len(table.ngrams),
               len(table.pairs), path)
  return table
