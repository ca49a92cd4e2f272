"""`semantic`, `contextual` and `entity` held to their sources' definitions, each computed here by
hand on a corpus made so that the right definition and the usual wrong ones disagree:

  semantic    PMI-Masking (Levine et al., ICLR 2021; github.com/AI21Labs/pmi-masking): its
              vocabulary's occurrences masked whole (the longer of two nested ones, of two
              overlapping the higher PMI_n, between equals one at random), other words whole,
              80/10/10 decided per unit (the vocabulary itself: test_pmi_vocabulary.py).
  contextual  InforMask (Sadeq et al., EMNLP 2022): informative relevance; the best-scored of
              several random masks.
  entity      each entity masked whole with masking.entity_probability at a step, the rest of
              the budget in whole words.
"""

import collections
import itertools
import math

import numpy as np
import pytest

from masking_cases import (ROWS, _assert_all_or_nothing, _entities, _entity_units, _hash_of,
                           _made_up_words, _masker, _selected)
from mlmjax.data import pipeline
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import units
from mlmjax.models import special_ids


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
