"""Every masking strategy: the statistics that define it and its invariants, on rows made by
the real row builder (formats.make_rows) from the built-in corpus.

Statistical checks pool enough draws that the bound (5 standard deviations of the estimate) is
tight, yet a correct implementation fails with probability < 1e-6 per check. Config errors are
in tests/training/test_config_check.py.
"""

import logging
import pickle
import re

import grain
import numpy as np
import pytest

from configs import base
from mlmjax.data import formats
from mlmjax.data import masking
from mlmjax.data import pipeline
from mlmjax.data import tokenizer as tok_lib
from mlmjax.data import vocab_stats
from mlmjax.data.masking import entities
from mlmjax.data.masking import spans
from mlmjax.data.masking import strategies
from mlmjax.data.masking import uniforms
from mlmjax.data.masking import units
from mlmjax.models import special_ids

NS = special_ids.NUM_SPECIAL
ROWS, LEN, P = 256, 128, 20
ALL = masking.STRATEGIES
MIX = "random=0.5,span=0.3,whole_word=0.2"
PHRASES = ["the children of Israel", "Israel", "the LORD", "the LORD God", "Moses", "David",
           "the house of David", "Jerusalem"]


# ------------------------------------------------------------------------------------ helpers

def _cfg(**kw):
  c = base.get_config().masking
  c.max_predictions_per_seq = P
  c.mixture = MIX
  c.update(kw)
  return c


def _rows(tok, texts, data_format="full_sentences", rows=ROWS, epoch=0, order_seed=None):
  """Rows of `texts` (one document each) built as the pipeline builds them, as one batch with
  every key the masker may read, and an extra key that must pass through."""
  reader = pipeline.DocumentReader(texts, tok.model_proto)
  docs = grain.MapDataset.source([formats.Document(i, epoch, reader.sentences(i))
                                  for i in range(len(texts))])
  if order_seed is not None:
    docs = docs.shuffle(seed=order_seed)
  made = list(formats.make_rows(docs.to_iter_dataset(), data_format, LEN, seed=0, num_bins=8,
                                sequence_keys=True))
  assert rows is None or len(made) >= rows, "not enough text"
  made = made[:rows]
  batch = {k: np.stack([r[k] for r in made]) for k in made[0]}
  batch["nsp_labels"] = np.arange(len(made), dtype=np.int32) % 2
  return batch


def _budget(batch):
  maskable = (batch["input_ids"] >= NS) & (batch["segment_ids"] > 0)
  return masking.budget(maskable.sum(1), 0.15, P)[0]


def _selected(out, shape):
  sel = np.zeros(shape, bool)
  w = out["masked_weights"] > 0
  sel[np.nonzero(w)[0], out["masked_positions"][w]] = True
  return sel


def _is_punct(piece):
  body = piece.lstrip("\u2581")
  return bool(body) and all(not ch.isalnum() for ch in body)


def _words(tok, batch):
  """The test's own word segmentation: [R, T] word id (-1 outside words), from piece strings."""
  ids, seg = batch["input_ids"], batch["segment_ids"]
  pieces = [tok.id_to_piece(i) for i in range(len(tok))]
  word = np.full(ids.shape, -1)
  n = -1
  for r in range(ids.shape[0]):
    prev_ok, prev_punct, prev_seg = False, False, -1
    for c in range(ids.shape[1]):
      ok = ids[r, c] >= NS and seg[r, c] > 0
      if ok:
        p = pieces[ids[r, c]]
        if (p.startswith("\u2581") or _is_punct(p) or prev_punct or not prev_ok
            or seg[r, c] != prev_seg):
          n += 1
        word[r, c] = n
      prev_ok, prev_seg = ok, seg[r, c]
      prev_punct = ok and _is_punct(pieces[ids[r, c]])
  return word


def _assert_all_or_nothing(unit, sel):
  """Every unit id (>= 0) is entirely selected or entirely not."""
  u = unit[unit >= 0]
  s = sel[unit >= 0]
  n_sel = np.bincount(u, weights=s, minlength=u.max() + 1)
  n_all = np.bincount(u, minlength=u.max() + 1)
  bad = (n_sel > 0) & (n_sel < n_all)
  assert not bad.any(), f"{bad.sum()} units partially selected"
  return n_all[n_sel > 0]


def _split(out):
  w = out["masked_weights"] > 0
  new = out["input_ids"][np.nonzero(w)[0], out["masked_positions"][w]]
  old = out["masked_ids"][w]
  return np.array([np.sum(new == special_ids.MASK_ID),
                   np.sum((new != special_ids.MASK_ID) & (new != old)), np.sum(new == old)])


def _synthetic_stats(counts):
  v = len(counts)
  z = np.zeros(v, bool)
  return vocab_stats.VocabStats(word_start=np.ones(v, bool), punctuation=z, capitalized=z,
                                sentence_end=z, counts=np.asarray(counts, np.int64))


def _select(strategy, stats, batch, step=0, gazetteer=None, **kw):
  """The selection function of the strategy table on `batch`, as the masker calls it."""
  s = masking.Settings.from_config(_cfg(strategy=strategy, **kw))
  rows = strategies.Rows.make(batch["input_ids"], batch["segment_ids"],
                              uniforms.Draws(0, step, np.arange(len(batch["input_ids"]))),
                              s.mask_rate, s.max_predictions_per_seq)
  return rows, strategies.SELECTORS[strategy](rows, strategies.Context(s, stats, gazetteer))


def _units(head_col, sel):
  """[R, T] unit id from a selection's head columns (-1 where not selected)."""
  key = np.where(sel, np.arange(len(sel))[:, None] * sel.shape[1] + head_col, -1)
  return np.where(sel, np.unique(key, return_inverse=True)[1].reshape(sel.shape) - 1, -1)


# ------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def tok(tokenizer_path):
  return tok_lib.Tokenizer.load(tokenizer_path)


@pytest.fixture(scope="module")
def stats(tok, corpus):
  return vocab_stats.compute(tok, corpus[0], 300)


@pytest.fixture(scope="module")
def packed(tok, corpus):
  """Packed rows of several verse-long sequences (many boundaries)."""
  return _rows(tok, [v for d in corpus[0][100:400] for v in d.split("\n")])


@pytest.fixture(scope="module")
def long_rows(tok, corpus):
  """Rows of one document each, up to 126 tokens of a chapter's whole sentences."""
  return _rows(tok, corpus[0][400:700], "doc_sentences")


@pytest.fixture(scope="module")
def words(tok, packed):
  return _words(tok, packed)


@pytest.fixture(scope="module")
def gazetteer(tok, tmp_path_factory):
  path = tmp_path_factory.mktemp("gaz") / "entities.txt"
  path.write_text("\n\n".join(PHRASES), encoding="utf-8")  # blank lines are skipped
  return entities.load_gazetteer(str(path), tok)


def _masker(stats, gazetteer=None, token_weights=None, **kw):
  return masking.Masker(masking.Settings.from_config(_cfg(**kw)), stats, gazetteer, token_weights)


# ------------------------------------------------------------------------------------ all strategies

@pytest.mark.parametrize("strategy", ALL)
def test_invariants_and_determinism(strategy, stats, packed, gazetteer):
  m = _masker(stats, gazetteer, strategy=strategy)
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
                                      "mixture", "adaptive"])
def test_replacement_split_80_10_10(strategy, stats, packed, gazetteer):
  m = _masker(stats, gazetteer, strategy=strategy)
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
      if not is_mask.any():  # all random or all kept (a random token may equal the original)
        assert np.all(new == old) or np.mean(new != old) >= 0.5
      all_mask += is_mask.all()
      n_spans += 1
  assert abs(all_mask / n_spans - 0.8) < 5 * np.sqrt(0.16 / n_spans)


# ------------------------------------------------------------------------------------ entity

def _entity_units(covered, linked):
  heads = covered & ~linked
  unit = np.cumsum(heads.ravel()).reshape(heads.shape) - 1
  return np.where(covered, unit, -1)


def _entities(stats, batch, gazetteer=None, heuristic=True):
  ids, seg = batch["input_ids"], batch["segment_ids"]
  maskable = (ids >= NS) & (seg > 0)
  starts = units.word_starts(ids, seg, maskable, stats)
  return entities.entity_spans(ids, seg, maskable, starts, stats, gazetteer, heuristic)


def test_entities_masked_completely_or_not_at_all(tok, stats, packed, gazetteer):
  m = _masker(stats, gazetteer, strategy="entity")
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


# ------------------------------------------------------------------------------------ mixture

def _matches(out, refs):
  """[R, K]: whether row r of a mixture's output is exactly what strategy k alone makes."""
  return np.stack([np.all(out["masked_positions"] == ref["masked_positions"], axis=1)
                   & np.all(out["input_ids"] == ref["input_ids"], axis=1) for ref in refs], 1)


def _component_of_each_row(out, refs, unique=False):
  """Which single-strategy output each row of a mixture's output equals: the first that
  matches (-1: none; with `unique`, also -1 where several match)."""
  match = _matches(out, refs)
  ok = match.sum(1) == 1 if unique else match.any(1)
  return np.where(ok, match.argmax(1), -1)


def test_mixture_proportions_and_components(stats, packed):
  names, weights = ["random", "span", "whole_word"], np.array([2, 1.5, 1])
  m = _masker(stats, strategy="mixture", mixture="random=2,span=1.5,whole_word=1")
  ex = np.arange(ROWS)
  counts = np.zeros(3)
  for step in range(20):
    out = m(packed, seed=0, step=step, example_ids=ex)
    refs = [_masker(stats, strategy=n)(packed, seed=0, step=step, example_ids=ex) for n in names]
    choice = _component_of_each_row(out, refs)
    # Per example, exactly what one of the strategies alone would do.
    assert np.all(choice >= 0)
    counts += np.bincount(choice, minlength=3)
  n, p = counts.sum(), weights / weights.sum()
  assert np.all(np.abs(counts / n - p) < 5 * np.sqrt(p * (1 - p) / n)), (counts / n, p)


def test_mixture_of_every_other_strategy(tok, stats, packed):
  """Every base and composite strategy can be a component: the mixture draws each one about
  equally often, and a row drawn for a component is masked exactly as that strategy alone
  masks it, at that strategy's budget."""
  names = [s for s in ALL if s != "mixture"]
  table = np.ones(len(stats.counts))
  table[::2] = 0.0  # adaptive with a table (never even ids): not the same masks as `random`
  # Entities in every row (else `entity` masks a row exactly as `random` does).
  gazetteer = entities.Gazetteer([np.asarray(x, np.int32) for x in tok.encode(["and", "of"])])
  kw = dict(token_weights=lambda step: table)
  m = _masker(stats, gazetteer, strategy="mixture", mixture=",".join(f"{s}=1" for s in names),
              **kw)
  ex = np.arange(ROWS)
  budget = _budget(packed)
  drawn = np.zeros(len(names))
  steps = 4
  for step in range(steps):
    out = m(packed, seed=0, step=step, example_ids=ex)
    refs = [_masker(stats, gazetteer, strategy=n, **kw)(packed, seed=0, step=step,
                                                         example_ids=ex) for n in names]
    assert np.all(_matches(out, refs).any(1)), "a row masked as no component masks it"
    choice = _component_of_each_row(out, refs, unique=True)  # a few rows match two: left out
    drawn += np.bincount(choice[choice >= 0], minlength=len(names))
    count = out["masked_weights"].sum(1)
    for i, n in enumerate(names):
      rows = choice == i
      got, want = count[rows], budget[rows]
      if n in ("random", "span", "frequency", "adaptive"):
        np.testing.assert_array_equal(got, want, err_msg=n)
      else:  # whole units that do not fit are skipped; static budgets are per sequence
        assert np.all(got <= P) and got.sum() >= 0.97 * want.sum(), (n, got.sum(), want.sum())
      if n == "adaptive":  # the weight table reaches the component
        assert np.all(out["masked_ids"][rows][out["masked_weights"][rows] > 0] % 2 == 1)
  # Drawn with equal weights: each component's share within 5 standard deviations of 1/K.
  n_rows, p = steps * ROWS, 1 / len(names)
  shares = drawn / n_rows
  assert np.all(np.abs(shares - p) < 5 * np.sqrt(p * (1 - p) / n_rows)), dict(zip(names, shares))


# ------------------------------------------------------------------------------------ static

def _per_sequence(out, batch):
  """sequence key -> (selected positions within the sequence, new ids there)."""
  sel = _selected(out, batch["input_ids"].shape)
  res = {}
  for r in range(batch["input_ids"].shape[0]):
    for key in np.unique(batch["sequence_keys"][r][batch["segment_ids"][r] > 0]):
      cols = np.nonzero((batch["sequence_keys"][r] == key) & (batch["segment_ids"][r] > 0))[0]
      s = sel[r, cols]
      res[int(key)] = (tuple(batch["positions"][r, cols][s]), tuple(out["input_ids"][r, cols][s]))
  return res


def test_static_masks_repeat_with_period_dupe_factor(tok, corpus, stats):
  verses = [v for d in corpus[0][100:300] for v in d.split("\n")][:150]
  m = _masker(stats, strategy="static", dupe_factor=3)
  dyn = _masker(stats, strategy="random")

  def masks(epoch, step, order_seed=None, masker=m):
    b = _rows(tok, verses, rows=None, epoch=epoch, order_seed=order_seed)
    out = masker(b, seed=0, step=step, example_ids=np.arange(len(b["input_ids"])) + 128 * step)
    return _per_sequence(out, b), b

  e0, b0 = masks(0, 0)
  # Same whatever the step, the row, the offset in the row: a function of the sequence alone.
  assert masks(0, 5)[0] == e0
  shuffled, bs = masks(0, 9, order_seed=1)
  assert set(shuffled) == set(e0) and len(e0) == 150
  assert not np.array_equal(bs["sequence_keys"], b0["sequence_keys"])
  assert all(shuffled[k] == e0[k] for k in e0)
  # Period dupe_factor in epochs; different masks within a period.
  assert masks(3, 1)[0] == e0 and masks(6, 2)[0] == e0
  e1 = masks(1, 0)[0]
  assert np.mean([e1[k] != e0[k] for k in e0]) > 0.9
  # Per-sequence budget: that of the sequence's own maskable tokens.
  for r in range(len(b0["input_ids"])):
    for key in np.unique(b0["sequence_keys"][r][b0["segment_ids"][r] > 0]):
      cols = (b0["sequence_keys"][r] == key) & (b0["segment_ids"][r] > 0)
      n = (b0["input_ids"][r][cols] >= NS).sum()
      assert len(e0[int(key)][0]) == masking.budget(n, 0.15, P)[0]
  # Dynamic masking of the same rows changes every step.
  d0, d1 = masks(0, 0, masker=dyn)[0], masks(0, 1, masker=dyn)[0]
  assert np.mean([d0[k] != d1[k] for k in d0]) > 0.9


def test_static_row_truncation_keeps_units_whole(tok, stats):
  # 20 sequences of one short word pair each want 1 prediction apiece; the row holds only 5.
  ids = tok.encode(["Moses said"])[0]
  seq = [special_ids.CLS_ID] + ids + [special_ids.SEP_ID]
  n = len(seq)
  rows, length = 2, 20 * n
  batch = {k: np.zeros((rows, length), np.int32) for k in ("input_ids", "segment_ids",
                                                           "positions", "epochs")}
  batch["sequence_keys"] = np.zeros((rows, length), np.uint64)
  for i in range(20):
    sl = slice(i * n, (i + 1) * n)
    batch["input_ids"][:, sl] = seq
    batch["segment_ids"][:, sl] = i + 1
    batch["positions"][:, sl] = np.arange(n)
    batch["sequence_keys"][:, sl] = np.array([[i + 1], [100 + i]], np.uint64)
  for base_strategy in ("random", "whole_word"):
    m = _masker(stats, strategy="static", static_strategy=base_strategy,
                max_predictions_per_seq=5)
    out = m(batch, seed=0, step=0, example_ids=np.arange(rows))
    assert np.all(out["masked_weights"].sum(1) == 5)
    if base_strategy == "whole_word":
      words = _words(tok, batch)
      _assert_all_or_nothing(words, _selected(out, words.shape))


def test_static_needs_its_batch_keys(stats):
  m = _masker(stats, strategy="static")
  with pytest.raises(ValueError, match=re.escape("needs batch keys ['positions', 'sequence_keys',"
                                                 " 'epochs']")):
    m({"input_ids": np.full((1, 4), 7, np.int32), "segment_ids": np.ones((1, 4), np.int32)},
      seed=0, step=0, example_ids=np.arange(1))


@pytest.mark.parametrize("static_strategy", masking.STATIC_BASES)
def test_static_with_every_base_strategy(static_strategy, stats, packed, words, gazetteer):
  m = _masker(stats, gazetteer, strategy="static", static_strategy=static_strategy)
  out = m(packed, seed=0, step=0, example_ids=np.arange(ROWS))
  sel = _selected(out, words.shape)
  assert np.all(out["masked_weights"].sum(1) <= P) and np.all(packed["input_ids"][sel] >= NS)
  again = m(packed, seed=0, step=99, example_ids=np.arange(ROWS) + 7)  # ignores step and ids
  np.testing.assert_array_equal(out["input_ids"], again["input_ids"])
  if static_strategy == "whole_word":
    _assert_all_or_nothing(words, sel)
  if static_strategy == "entity":  # entity spans depend on the text only, not on the row
    _assert_all_or_nothing(_entity_units(*_entities(stats, packed, gazetteer)), sel)


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


# ------------------------------------------------------------------------------------ budget

def test_truncation_warning_once(stats, long_rows, caplog):
  m = _masker(stats, mask_rate=0.5)  # wants ~63 predictions per row, P = 20
  with caplog.at_level(logging.WARNING):
    for step in range(3):
      m(long_rows, seed=0, step=step, example_ids=np.arange(ROWS))
  msgs = [r.getMessage() for r in caplog.records if "max_predictions_per_seq" in r.getMessage()]
  assert len(msgs) == 1 and "raise max_predictions_per_seq" in msgs[0]
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    _masker(stats)(long_rows, seed=0, step=0, example_ids=np.arange(ROWS))
  assert not caplog.records


@pytest.mark.parametrize("strategy", ALL)
def test_degenerate_rows(strategy, stats, gazetteer):
  """Empty rows, rows of one token, rows of only [UNK], rows shorter than P."""
  ids = np.zeros((4, 6), np.int32)
  ids[1, :3] = [special_ids.CLS_ID, 42, special_ids.SEP_ID]
  ids[2, :3] = [special_ids.CLS_ID, special_ids.UNK_ID, special_ids.SEP_ID]
  ids[3, :6] = [special_ids.CLS_ID, 42, 43, 44, 45, special_ids.SEP_ID]
  seg = (ids > 0).astype(np.int32)
  batch = {"input_ids": ids, "segment_ids": seg, "positions": np.cumsum(seg, 1) - 1,
           "sequence_keys": seg.astype(np.uint64) * np.arange(4, dtype=np.uint64)[:, None],
           "epochs": np.zeros_like(ids)}
  m = _masker(stats, gazetteer, strategy=strategy)
  for b in (batch, {k: v[:1] for k, v in batch.items()}):  # also: a batch of padding only
    out = m(b, seed=0, step=0, example_ids=np.arange(len(b["input_ids"])))
    assert out["masked_positions"].shape == (len(b["input_ids"]), P)
    np.testing.assert_array_equal(out["masked_weights"].sum(1), [0, 1, 0, 1][:len(b["input_ids"])])


def test_span_boundaries_of_a_hand_built_row():
  """Two words, [60 20 21] and [61 22] (ids >= 50 start words), masked whole as two spans of
  one word: each slot gets the positions just outside its own span and its offset in it."""
  ids = np.array([[special_ids.CLS_ID, 60, 20, 21, 61, 22, special_ids.SEP_ID]], np.int32)
  counts = np.ones(100, np.int64)
  stats = _synthetic_stats(counts)
  stats.word_start[:50] = False
  m = masking.Masker(masking.Settings.from_config(_cfg(strategy="span", mask_rate=0.9, span_p=1.0,
                                                     span_max_words=1)), stats,
                     span_boundaries=True)
  out = m({"input_ids": ids, "segment_ids": np.ones_like(ids)}, seed=0, step=0,
          example_ids=np.arange(1))
  w = out["masked_weights"][0] > 0
  assert list(out["masked_positions"][0][w]) == [1, 2, 3, 4, 5]
  assert list(out["masked_span_left"][0][w]) == [0, 0, 0, 3, 3]
  assert list(out["masked_span_right"][0][w]) == [4, 4, 4, 6, 6]
  assert list(out["masked_span_offset"][0][w]) == [0, 1, 2, 0, 1]
  assert not out["masked_span_left"][0][~w].any()  # padding slots
