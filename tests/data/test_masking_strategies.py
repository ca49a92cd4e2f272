"""The base masking strategies, one selection function each (random, whole_word, span, entity,
frequency, adaptive): the statistics that define them and their invariants, on rows made by the
real row builder from the built-in corpus.

Statistical checks pool enough draws that the bound (5 standard deviations of the estimate) is
tight, yet a correct implementation fails with probability < 1e-6 per check. Config errors are
in tests/training/test_settings.py and test_config_check.py; the masker's composites are in
test_masker.py.
"""

import pickle

import numpy as np
import pytest

from mlmjax.data import masking
from mlmjax.data.masking import entities
from mlmjax.data.masking import settings as masking_settings
from mlmjax.data.masking import spans
from mlmjax.data.masking import strategies
from mlmjax.data.masking import uniforms
from mlmjax.data.masking import units
from mlmjax.models import special_ids

from masking_cases import (ALL, LEN, NS, P, PHRASES, ROWS, _assert_all_or_nothing, _budget,
                           _entities, _entity_units, _masker, _select, _selected, _split,
                           _synthetic_stats, _units, _words)


# ------------------------------------------------------------------------------------ all strategies

@pytest.mark.parametrize("strategy", ALL)
def test_invariants_and_determinism(strategy, stats, packed, gazetteer, cooc):
  m = _masker(stats, gazetteer, strategy=strategy, cooccurrence=cooc)
  ids = packed["input_ids"]
  ex = np.arange(ROWS) + 1000
  budget = _budget(packed)
  for step in range(2):
    out = m(packed, seed=3, step=step, example_ids=ex)
    w = out["masked_weights"] > 0
    sel = _selected(out, ids.shape)
    count = w.sum(1)
    assert np.all(count <= P)
    if strategy in ("random", "span", "frequency", "adaptive"):
      np.testing.assert_array_equal(count, budget)
    elif strategy != "static":  # units that do not fit are skipped: a little below the budget
      assert np.all(count <= budget) and count.sum() >= 0.97 * budget.sum()
    # Never specials or padding; targets are the originals; nothing else changes.
    assert np.all(ids[sel] >= NS) and np.all(packed["segment_ids"][sel] > 0)
    np.testing.assert_array_equal(out["masked_ids"][w], ids[sel])
    np.testing.assert_array_equal(out["input_ids"][~sel], ids[~sel])
    assert np.all(out["masked_positions"][~w] == 0) and np.all(out["masked_ids"][~w] == 0)
    pos = np.where(w, out["masked_positions"], LEN)
    assert np.all(np.diff(pos, axis=1)[w[:, 1:]] > 0), "positions not ascending"
    assert np.all(w[:, :-1] >= w[:, 1:]), "padding slots not last"
    assert out["masked_positions"].dtype == np.int32 and out["masked_weights"].dtype == np.float32
    for k in ("segment_ids", "positions", "nsp_labels", "sequence_keys"):
      assert out[k] is packed[k]
  # A pure function of (seed, step, example id), whatever the batch composition.
  again = m(packed, seed=3, step=1, example_ids=ex)
  for k in out:
    np.testing.assert_array_equal(out[k], again[k])
  part = {k: v[5:9] for k, v in packed.items()}
  alone = m(part, seed=3, step=1, example_ids=ex[5:9])
  for k in ("input_ids", "masked_positions", "masked_ids", "masked_weights"):
    np.testing.assert_array_equal(out[k][5:9], alone[k])
  other = m(packed, seed=4, step=1, example_ids=ex)
  assert not np.array_equal(out["masked_positions"], other["masked_positions"])
  clone = pickle.loads(pickle.dumps(m))  # grain may pickle the masker into worker processes
  for k, v in clone(packed, seed=3, step=1, example_ids=ex).items():
    np.testing.assert_array_equal(v, out[k])


@pytest.mark.parametrize("strategy", ["random", "whole_word", "entity", "frequency", "static",
                                      "mixture", "adaptive", "syntax", "semantic",
                                      "contextual"])
def test_replacement_split_80_10_10(strategy, stats, packed, gazetteer, cooc):
  m = _masker(stats, gazetteer, strategy=strategy, cooccurrence=cooc)
  counts = np.zeros(3)
  for i in range(10):  # static masks repeat per step: vary the epoch instead
    b = dict(packed, epochs=np.full_like(packed["epochs"], i))
    counts += _split(m(b, seed=0, step=i, example_ids=np.arange(ROWS)))
  n = counts.sum()
  v = len(stats.counts) - NS
  expected = np.array([0.8, 0.1 * (1 - 1 / v), 0.1 + 0.1 / v])
  sd = np.sqrt(expected * (1 - expected) / n)
  assert n > 30_000
  assert np.all(np.abs(counts / n - expected) < 5 * sd), (counts / n, expected)



# ------------------------------------------------------------------------------------ whole_word

def test_whole_words_masked_completely_or_not_at_all(stats, packed, words):
  m = _masker(stats, strategy="whole_word")
  multi = 0
  for step in range(4):
    sel = _selected(m(packed, seed=0, step=step, example_ids=np.arange(ROWS)), words.shape)
    assert not np.any(sel & (words < 0))
    sizes = _assert_all_or_nothing(words, sel)
    multi += np.sum(sizes > 1)
  assert multi > 1000  # many multi-piece words were selected, so the check has teeth


def test_word_rule_splits_punctuation(tok, stats, packed, words):
  maskable = (packed["input_ids"] >= NS) & (packed["segment_ids"] > 0)
  starts = units.word_starts(packed["input_ids"], packed["segment_ids"], maskable, stats)
  np.testing.assert_array_equal(starts, (words >= 0) & (np.diff(words, prepend=-1) != 0))
  # Punctuation pieces are words of their own.
  text = "And Moses said, Let my people go: and they went."
  ids = np.array([[special_ids.CLS_ID] + tok.encode([text])[0] + [special_ids.SEP_ID]], np.int32)
  starts = units.word_starts(ids, np.ones_like(ids), ids >= NS, stats)[0]
  pieces = [tok.id_to_piece(i) for i in ids[0]]
  for c, p in enumerate(pieces):
    if p in (",", ":", "."):
      assert starts[c] and (c + 1 == len(pieces) or ids[0, c + 1] < NS or starts[c + 1])



# ------------------------------------------------------------------------------------ span

def test_span_lengths_follow_truncated_geometric():
  cdf = spans.length_cdf(0.2, 10)
  pmf = 0.2 * 0.8 ** np.arange(10)
  pmf /= pmf.sum()
  np.testing.assert_allclose(np.diff(cdf, prepend=0.0), pmf)
  drawn = spans.draw_lengths(uniforms.uniform(0, uniforms.SPAN_LENGTH, 0, np.arange(50_000), 1),
                             cdf).ravel()
  n = len(drawn)
  freq = np.bincount(drawn, minlength=11)[1:] / n
  assert np.all(np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / n)), (freq, pmf)
  mean = (np.arange(1, 11) * pmf).sum()
  assert abs(mean - 3.8) < 0.1  # SpanBERT's figure (clipping min(L, 10) would give 4.5)
  sd_mean = np.sqrt((((np.arange(1, 11) - mean) ** 2) * pmf).sum() / n)
  assert abs(drawn.mean() - mean) < 5 * sd_mean


def test_spans_are_contiguous_runs_of_whole_words_in_one_sequence(tok, stats, long_rows):
  words = _words(tok, long_rows)
  budget = _budget(long_rows)
  lengths = []
  for step in range(6):
    rows, sel = _select("span", stats, long_rows, step)
    out = _masker(stats, strategy="span")(long_rows, seed=0, step=step,
                                          example_ids=np.arange(ROWS))
    np.testing.assert_array_equal(_selected(out, words.shape), sel.selected)  # the masker's own
    np.testing.assert_array_equal(sel.selected.sum(1), budget)  # exactly the budget
    unit = _units(sel.head_col, sel.selected)
    for u in range(unit.max() + 1):
      r, cols = np.nonzero(unit == u)
      r, h = r[0], cols[0]
      assert h == sel.head_col[r, h] and np.all(np.diff(cols) == 1)  # starts at its head
      assert words[r, h] != words[r, h - 1]  # at a word start
      assert len(set(long_rows["segment_ids"][r, cols])) == 1
      lengths.append(len(set(words[r, cols])))
  assert np.mean(lengths) > 2.5 and max(lengths) == 10  # many multi-word spans


def test_span_masks_the_ends_of_a_sequence_as_often_as_its_middle(stats, long_rows):
  """Spans are placed uniformly over every placement that overlaps the free words and cut at
  the boundary, so the first and last words of a sequence are masked as often as the others
  (a span that must fit whole masked them at ~0.3 of the middle's rate)."""
  seg = long_rows["segment_ids"]
  maskable = (long_rows["input_ids"] >= NS) & (seg > 0)
  full = maskable.sum(1) >= 100  # rows that are (nearly) one full sequence
  first = np.argmax(maskable, axis=1)
  last = LEN - 1 - np.argmax(maskable[:, ::-1], axis=1)
  hits = np.zeros(3)
  for step in range(20):
    sel = _select("span", stats, long_rows, step)[1].selected[full]
    r = np.arange(len(sel))
    mid = sel[:, 30:90].mean(axis=1)
    hits += [sel[r, first[full]].mean(), sel[r, last[full]].mean(), mid.mean()]
  rate_first, rate_last, rate_mid = hits / 20
  assert 0.8 < rate_first / rate_mid < 1.25 and 0.8 < rate_last / rate_mid < 1.25, hits / 20


def test_span_one_decision_per_span(stats, long_rows):
  m = _masker(stats, strategy="span")
  all_mask = n_spans = 0
  for step in range(10):
    out = m(long_rows, seed=0, step=step, example_ids=np.arange(ROWS))
    _, sel = _select("span", stats, long_rows, step)
    unit = _units(sel.head_col, sel.selected)
    for u in range(unit.max() + 1):
      at = unit == u
      new, old = out["input_ids"][at], long_rows["input_ids"][at]
      is_mask = new == special_ids.MASK_ID
      assert is_mask.all() or not is_mask.any(), "a span mixes [MASK] and other tokens"
      if not is_mask.any():  # all kept, or all random (one may equal its original by chance)
        assert np.all(new == old) or (new == old).sum() <= 1, "a span mixes kept and random"
      all_mask += is_mask.all()
      n_spans += 1
  assert abs(all_mask / n_spans - 0.8) < 5 * np.sqrt(0.16 / n_spans)



# ------------------------------------------------------------------------------------ entity

def test_entities_masked_completely_or_not_at_all(tok, stats, packed, gazetteer):
  m = _masker(stats, gazetteer, strategy="entity", entity_probability=1.0)  # entities first
  ids = packed["input_ids"]
  # The test's own search for gazetteer phrases (word-aligned) must agree with the masker's.
  words = _words(tok, packed)
  covered, linked = _entities(stats, packed, gazetteer)
  n_found = 0
  for phrase in tok.encode(PHRASES):
    k = len(phrase)
    for r in range(ROWS):
      for c in range(LEN - k + 1):
        if (np.array_equal(ids[r, c:c + k], phrase) and words[r, c] >= 0
            and (c == 0 or words[r, c - 1] != words[r, c])
            and (c + k == LEN or words[r, c + k] != words[r, c + k - 1])):
          assert covered[r, c:c + k].all()
          n_found += 1
  assert n_found > 100
  unit = _entity_units(covered, linked)
  in_entity = selected_in_entity = 0
  for step in range(6):
    sel = _selected(m(packed, seed=0, step=step, example_ids=np.arange(ROWS)), ids.shape)
    _assert_all_or_nothing(unit, sel)
    # Entities come first: a row whose entities fit in the budget has all of them selected.
    fits = (unit >= 0).sum(1) <= _budget(packed)
    assert np.all(sel[fits] | (unit[fits] < 0))
    in_entity += (unit >= 0).sum()
    selected_in_entity += (sel & (unit >= 0)).sum()
  assert selected_in_entity > 0.5 * in_entity  # far above the 15% random masking would give


def test_entity_heuristic_catches_and_misses(tok, stats):
  text = ("And the LORD God spake unto Moses. Then Simon Peter went with John Mark to Jerusalem,"
          " and Pharaoh saw it.")
  ids = np.array([[special_ids.CLS_ID] + tok.encode([text])[0] + [special_ids.SEP_ID]], np.int32)
  batch = {"input_ids": ids, "segment_ids": np.ones_like(ids)}

  def found(gazetteer=None, heuristic=True):
    unit = _entity_units(*_entities(stats, batch, gazetteer, heuristic))[0]
    return [tok.decode(ids[0][unit == u]) for u in range(unit.max() + 1)]

  # Runs of >= 2 capitalised words; "Then" (sentence start) is dropped; single words missed.
  assert found() == ["LORD God", "Simon Peter", "John Mark"]
  gaz = entities.Gazetteer([np.asarray(x, np.int32)
                            for x in tok.encode(["Moses", "the LORD", "Jerusalem"])])
  # Gazetteer and heuristic together; overlapping spans ("the LORD" + "LORD God") merge.
  assert found(gaz) == ["the LORD God", "Moses", "Simon Peter", "John Mark", "Jerusalem"]
  assert found(gaz, heuristic=False) == ["the LORD", "Moses", "Jerusalem"]



# ------------------------------------------------------------------------------------ frequency

def _two_class_batch(rows, n_a, n_b, length=32):
  """Rows of [CLS] n_a tokens of class A (ids 5..504), n_b of class B (505..999) [SEP]."""
  rng = np.random.default_rng(0)
  ids = np.zeros((rows, length), np.int32)
  ids[:, 0] = special_ids.CLS_ID
  ids[:, 1:1 + n_a] = rng.integers(5, 505, (rows, n_a))
  ids[:, 1 + n_a:1 + n_a + n_b] = rng.integers(505, 1000, (rows, n_b))
  ids[:, 1 + n_a + n_b] = special_ids.SEP_ID
  perm = np.argsort(rng.random((rows, n_a + n_b)), axis=1) + 1  # shuffle A/B within rows
  ids[:, 1:1 + n_a + n_b] = np.take_along_axis(ids, perm, axis=1)
  return {"input_ids": ids, "segment_ids": (ids > 0).astype(np.int32)}


def _expected_picks(k, n_a, n_b, w_a, w_b):
  """Expected number of class-A tokens among k weighted draws without replacement (exact)."""
  dist = {0: 1.0}  # a picked -> probability
  for i in range(k):
    nxt = {}
    for a, p in dist.items():
      b = i - a
      pa = (n_a - a) * w_a / ((n_a - a) * w_a + (n_b - b) * w_b)
      nxt[a + 1] = nxt.get(a + 1, 0) + p * pa
      nxt[a] = nxt.get(a, 0) + p * (1 - pa)
    dist = nxt
  mean = sum(a * p for a, p in dist.items())
  var = sum((a - mean) ** 2 * p for a, p in dist.items())
  return mean, var


@pytest.mark.parametrize("mask_rate,k", [(0.05, 1), (0.3, 6)])
def test_frequency_selection_probability(mask_rate, k):
  counts = np.zeros(1000, np.int64)
  counts[5:505], counts[505:] = 100, 1600
  stats = _synthetic_stats(counts)
  rows = 4096
  batch = _two_class_batch(rows, 10, 10)
  m = _masker(stats, strategy="frequency", frequency_alpha=0.5, mask_rate=mask_rate)
  out = m(batch, seed=0, step=0, example_ids=np.arange(rows))
  w = out["masked_weights"] > 0
  assert np.all(w.sum(1) == k)
  picks_a = ((out["masked_ids"] < 505) & w).sum(1)
  # Weights 100**-0.5 = 0.1 vs 1600**-0.5 = 0.025: with k = 1, P(A) = 10*0.1/(10*0.1+10*0.025).
  mean, var = _expected_picks(k, 10, 10, 0.1, 0.025)
  if k == 1:
    assert mean == pytest.approx(0.8)
  assert abs(picks_a.mean() - mean) < 5 * np.sqrt(var / rows), (picks_a.mean(), mean)


def test_frequency_shifts_selection_to_rare_tokens(stats, long_rows):
  log_c = np.log(np.maximum(stats.counts, 1))
  means = {}
  for alpha in (0.0, 0.5, 1.0):
    m = _masker(stats, strategy="frequency", frequency_alpha=alpha)
    out = m(long_rows, seed=0, step=0, example_ids=np.arange(ROWS))
    means[alpha] = log_c[out["masked_ids"][out["masked_weights"] > 0]].mean()
    if alpha == 0.0:  # alpha 0 is exactly uniform selection
      ref = _masker(stats, strategy="random")(long_rows, seed=0, step=0,
                                               example_ids=np.arange(ROWS))
      np.testing.assert_array_equal(out["masked_positions"], ref["masked_positions"])
  assert means[0.0] - 0.5 > means[0.5] > means[1.0] + 0.5, means


def test_unigram_replacement_follows_counts():
  counts = np.zeros(1000, np.int64)
  counts[[10, 11, 12]] = [600, 300, 100]
  stats = _synthetic_stats(counts)
  m = _masker(stats, replacement="unigram", mask_token_prob=0.0, random_token_prob=1.0,
              mask_rate=0.5)
  batch = _two_class_batch(2048, 15, 15)
  out = m(batch, seed=0, step=0, example_ids=np.arange(2048))
  w = out["masked_weights"] > 0
  new = out["input_ids"][np.nonzero(w)[0], out["masked_positions"][w]]
  assert set(np.unique(new)) == {10, 11, 12}  # never a token with count 0
  n = len(new)
  p = np.array([0.6, 0.3, 0.1])
  freq = np.array([np.mean(new == i) for i in (10, 11, 12)])
  assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n))



# ------------------------------------------------------------------------------------ adaptive

def test_adaptive_weights(stats, long_rows):
  ex = np.arange(ROWS)
  ref = _masker(stats, strategy="random")(long_rows, seed=0, step=3, example_ids=ex)
  v = len(stats.counts)
  weights = np.ones(v)
  weights[::2] = 0.0  # even ids are never selected
  tables = {}  # step -> the table in force (none before step 3)
  m = _masker(stats, strategy="adaptive",
              token_weights=lambda step: tables.get(min(step, 3)))
  out = m(long_rows, seed=0, step=2, example_ids=ex)
  ref2 = _masker(stats, strategy="random")(long_rows, seed=0, step=2, example_ids=ex)
  for k in ref2:  # before any feedback: exactly uniform selection
    np.testing.assert_array_equal(out[k], ref2[k])
  tables[3] = weights
  out = m(long_rows, seed=0, step=3, example_ids=ex)
  assert np.all(out["masked_ids"][out["masked_weights"] > 0] % 2 == 1)
  assert not np.array_equal(out["masked_positions"], ref["masked_positions"])


def test_adaptive_selection_probability_proportional_to_weight():
  stats = _synthetic_stats(np.ones(1000, np.int64))
  w = np.ones(1000)
  w[5:505] = 3.0
  m = _masker(stats, strategy="adaptive", mask_rate=0.05, token_weights=lambda step: w)
  rows = 4096
  out = m(_two_class_batch(rows, 5, 15), seed=0, step=0, example_ids=np.arange(rows))
  p = 5 * 3 / (5 * 3 + 15 * 1)
  frac = np.mean(out["masked_ids"][:, 0] < 505)
  assert abs(frac - p) < 5 * np.sqrt(p * (1 - p) / rows)


def test_every_strategy_name_has_its_selection_function_in_order():
  """settings.py names the strategies a config may set; strategies.py has one selection function
  for each base one, in the same order."""
  assert tuple(strategies.SELECTORS) == masking_settings.BASES
  assert masking.STRATEGIES == (*masking_settings.BASES, "mixture", "static")
