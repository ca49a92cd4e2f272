"""Every masking strategy: the statistics that define it, its invariants, its errors.

Statistical checks pool enough draws that the bound (5 standard deviations of the estimate) is
tight, yet a correct implementation fails with probability < 1e-6 per check.
"""

import logging
import os
import pickle
import re

import numpy as np
import pytest

from configs import base
from mlmjax import errors
from mlmjax.data import masking
from mlmjax.data import masking_settings
from mlmjax.data import tokenizer as tok_lib
from mlmjax.data import vocab_stats

NS = tok_lib.NUM_SPECIAL
ROWS, LEN, P = 256, 128, 20
ALL = ("random", "whole_word", "span", "entity", "frequency", "mixture", "static", "adaptive")
MIX = "random=0.5,span=0.3,whole_word=0.2"


# ------------------------------------------------------------------------------------ helpers

def _cfg(**kw):
  c = base.get_config().masking
  c.max_predictions_per_seq = P
  c.mixture = MIX
  for k, v in kw.items():
    setattr(c, k, v)
  return c


def _pack(tok, docs, rows=ROWS, length=LEN, epoch=0, order_seed=None, fill=True):
  """Greedy packing of `[CLS] chunk [SEP]` sequences into rows, with every batch key."""
  seqs = []
  for di, ids in enumerate(tok.encode([d.replace("\n", " ") for d in docs])):
    for ci, s in enumerate(range(0, len(ids), length - 2)):
      seqs.append((di * 1000 + ci + 1, [tok_lib.CLS_ID] + ids[s:s + length - 2] + [tok_lib.SEP_ID]))
  if order_seed is not None:
    np.random.default_rng(order_seed).shuffle(seqs)
  out = {k: np.zeros((rows, length), np.int32)
         for k in ("input_ids", "segment_ids", "positions", "token_type_ids", "epochs")}
  out["sequence_keys"] = np.zeros((rows, length), np.uint64)
  r = c = 0
  sid = 1
  for key, s in seqs:
    if c + len(s) > length:
      r, c, sid = r + 1, 0, 1
      if r == rows:
        break
    n = len(s)
    out["input_ids"][r, c:c + n] = s
    out["segment_ids"][r, c:c + n] = sid
    out["positions"][r, c:c + n] = np.arange(n)
    out["sequence_keys"][r, c:c + n] = key
    out["epochs"][r, c:c + n] = epoch
    c, sid = c + n, sid + 1
  assert r == rows or not fill, "not enough text"
  out["nsp_labels"] = np.arange(rows, dtype=np.int32) % 2  # an extra key to pass through
  return out


def _budget(batch):
  ids, seg = batch["input_ids"], batch["segment_ids"]
  n = ((ids >= NS) & (seg > 0)).sum(1)
  return np.where(n > 0, np.minimum(P, np.maximum(1, np.floor(0.15 * n + 0.5))), 0)


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


def _split(out, batch):
  w = out["masked_weights"] > 0
  rows = np.nonzero(w)[0]
  new = out["input_ids"][rows, out["masked_positions"][w]]
  old = out["masked_ids"][w]
  return np.array([np.sum(new == tok_lib.MASK_ID), np.sum((new != tok_lib.MASK_ID) & (new != old)),
                   np.sum(new == old)])


def _synthetic_stats(counts):
  v = len(counts)
  z = np.zeros(v, bool)
  return vocab_stats.VocabStats(word_start=np.ones(v, bool), punctuation=z, capitalized=z,
                                sentence_end=z, counts=np.asarray(counts, np.int64))


# ------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def tok(tokenizer_path):
  return tok_lib.Tokenizer.load(tokenizer_path)


@pytest.fixture(scope="module")
def stats(tok, corpus):
  return vocab_stats.compute(tok, corpus[0].documents, 300)


@pytest.fixture(scope="module")
def packed(tok, corpus):
  """Rows of several verse-long sequences (many boundaries)."""
  verses = [v for d in corpus[0].documents[100:400] for v in d.split("\n")]
  return _pack(tok, verses)


@pytest.fixture(scope="module")
def long_rows(tok, corpus):
  """Rows that are (mostly) one 128-token chunk of a chapter."""
  return _pack(tok, corpus[0].documents[400:700])


@pytest.fixture(scope="module")
def words(tok, packed):
  return _words(tok, packed)


@pytest.fixture(scope="module")
def gazetteer(tok, tmp_path_factory):
  path = tmp_path_factory.mktemp("gaz") / "entities.txt"
  path.write_text("the children of Israel\nIsrael\n\nthe LORD\nthe LORD God\nMoses\nDavid\n"
                  "the house of David\nJerusalem\n", encoding="utf-8")
  return masking_settings.load_gazetteer(str(path), tok)


def _masker(stats, gazetteer=None, **kw):
  return masking.Masker(_cfg(**kw), stats, gazetteer)


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
  for step in range(10):
    counts += _split(m(packed, seed=0, step=step, example_ids=np.arange(ROWS)), packed)
  if strategy == "static":  # only dupe_factor distinct masks: vary epochs instead of steps
    counts[:] = 0
    for epoch in range(10):
      b = dict(packed, epochs=np.full_like(packed["epochs"], epoch))
      counts += _split(m(b, seed=0, step=0, example_ids=np.arange(ROWS)), b)
  n = counts.sum()
  v = len(stats.counts) - NS
  expected = np.array([0.8, 0.1 * (1 - 1 / v), 0.1 + 0.1 / v])
  sd = np.sqrt(expected * (1 - expected) / n)
  assert n > 30_000
  assert np.all(np.abs(counts / n - expected) < 5 * sd), (counts / n, expected)


def test_random_masker_equals_mask_batch(stats, packed):
  out = _masker(stats, strategy="random")(packed, seed=1, step=2, example_ids=np.arange(ROWS))
  ref = masking.mask_batch(packed, seed=1, step=2, example_ids=np.arange(ROWS),
                           vocab_size=len(stats.counts), mask_rate=0.15, mask_token_prob=0.8,
                           random_token_prob=0.1, max_predictions=P)
  for k in ref:
    np.testing.assert_array_equal(out[k], ref[k])


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


def test_word_rule_splits_punctuation(tok, stats):
  text = "And Moses said, Let my people go: and they went."
  ids = np.array([[tok_lib.CLS_ID] + tok.encode([text])[0] + [tok_lib.SEP_ID]], np.int32)
  batch = {"input_ids": ids, "segment_ids": np.ones_like(ids)}
  got = _words(tok, batch)
  m = _masker(stats, strategy="whole_word")
  rows = m._rows(batch, None)
  starts = m._word_starts(rows)
  np.testing.assert_array_equal(starts[0], (got[0] >= 0) & (np.diff(got[0], prepend=-1) != 0))
  # Punctuation pieces are words of their own.
  pieces = [tok.id_to_piece(i) for i in ids[0]]
  for c, p in enumerate(pieces):
    if p in (",", ":", "."):
      assert starts[0, c] and (c + 1 == len(pieces) or not rows.maskable[0, c + 1]
                               or starts[0, c + 1])


# ------------------------------------------------------------------------------------ span

def test_span_lengths_follow_truncated_geometric(tok, stats, long_rows):
  m = _masker(stats, strategy="span")
  pmf = 0.2 * 0.8 ** np.arange(10)
  pmf /= pmf.sum()
  np.testing.assert_allclose(m.span_length_pmf(), pmf)
  words = _words(tok, long_rows)
  budget = _budget(long_rows)
  drawn, n_clipped = [], 0
  for step in range(12):
    ex = np.arange(ROWS)
    info = m.debug_selection(long_rows, seed=0, step=step, example_ids=ex)
    out = m(long_rows, seed=0, step=step, example_ids=ex)
    sel = _selected(out, words.shape)
    np.testing.assert_array_equal(sel, info["selected"])
    sp = info["spans"]
    np.testing.assert_array_equal(np.bincount(sp["row"], sp["tokens"], ROWS), budget)
    last_round = np.zeros(ROWS, int)
    np.maximum.at(last_round, sp["row"], sp["round"])
    is_last = sp["round"] == last_round[sp["row"]]
    ok = ~sp["room_clipped"]
    # Every span but a row's last is exactly as drawn; the last one is cut to the budget.
    assert np.all((sp["words"] == sp["drawn_words"])[~is_last & ok])
    assert np.all((sp["tokens"] == sp["full_tokens"])[~is_last])
    assert np.all(sp["tokens"] <= sp["full_tokens"])
    n_clipped += (~ok).sum()
    drawn.append(sp["drawn_words"])
    # From the output alone: a span starts at a word start, stays in one sequence, covers
    # `words` words and `tokens` tokens.
    seg = long_rows["segment_ids"]
    for r, h, t, nw in zip(sp["row"], sp["head_col"], sp["tokens"], sp["words"]):
      assert h == 0 or words[r, h] != words[r, h - 1]
      assert sel[r, h:h + t].all() and len(set(seg[r, h:h + t])) == 1
      assert len(set(words[r, h:h + t])) == nw
  drawn = np.concatenate(drawn)
  n = len(drawn)
  assert n > 8000 and n_clipped < 0.005 * n
  # Drawn lengths of all placed spans (incl. each row's last: the stopping rule does not bias
  # them, by Wald's identity) follow the law bin by bin, and the mean is SpanBERT's 3.8.
  freq = np.bincount(drawn, minlength=11)[1:] / n
  sd = np.sqrt(pmf * (1 - pmf) / n)
  assert np.all(np.abs(freq - pmf) < 5 * sd), (freq, pmf)
  mean = (np.arange(1, 11) * pmf).sum()
  assert abs(mean - 3.8) < 0.1
  sd_mean = np.sqrt((((np.arange(1, 11) - mean) ** 2) * pmf).sum() / n)
  assert abs(drawn.mean() - mean) < 5 * sd_mean


def test_span_one_decision_per_span(stats, long_rows):
  m = _masker(stats, strategy="span")
  all_mask = spans = 0
  for step in range(10):
    out = m(long_rows, seed=0, step=step, example_ids=np.arange(ROWS))
    info = m.debug_selection(long_rows, seed=0, step=step, example_ids=np.arange(ROWS))
    sp = info["spans"]
    for r, h, t in zip(sp["row"], sp["head_col"], sp["tokens"]):
      new = out["input_ids"][r, h:h + t]
      old = long_rows["input_ids"][r, h:h + t]
      is_mask = new == tok_lib.MASK_ID
      assert is_mask.all() or not is_mask.any(), "a span mixes [MASK] and other tokens"
      if not is_mask.any():  # all random or all kept (a random token may equal the original)
        assert np.all(new == old) or np.mean(new != old) > 0.5
      all_mask += is_mask.all()
      spans += 1
  assert abs(all_mask / spans - 0.8) < 5 * np.sqrt(0.16 / spans)


def test_span_respects_sequence_boundaries(stats, packed):
  m = _masker(stats, strategy="span")
  seg = packed["segment_ids"]
  for step in range(3):
    sp = m.debug_selection(packed, seed=0, step=step, example_ids=np.arange(ROWS))["spans"]
    for r, h, t in zip(sp["row"], sp["head_col"], sp["tokens"]):
      assert len(set(seg[r, h:h + t])) == 1
      assert np.all(packed["input_ids"][r, h:h + t] >= NS)


# ------------------------------------------------------------------------------------ entity

def _entity_units(info):
  covered, linked = info["entity_covered"], info["entity_linked"]
  heads = covered & ~linked
  unit = np.cumsum(heads.ravel()).reshape(heads.shape) - 1
  return np.where(covered, unit, -1)


def test_entities_masked_completely_or_not_at_all(tok, stats, packed, gazetteer):
  m = _masker(stats, gazetteer, strategy="entity")
  ids = packed["input_ids"]
  # The test's own search for gazetteer phrases (word-aligned) must agree with the masker's.
  words = _words(tok, packed)
  info = m.debug_selection(packed, seed=0, step=0, example_ids=np.arange(ROWS))
  n_found = 0
  for phrase in gazetteer:
    k = len(phrase)
    for r in range(ROWS):
      for c in range(LEN - k + 1):
        if (np.array_equal(ids[r, c:c + k], phrase) and words[r, c] >= 0
            and (c == 0 or words[r, c - 1] != words[r, c])
            and (c + k == LEN or words[r, c + k] != words[r, c + k - 1])):
          assert info["entity_covered"][r, c:c + k].all()
          n_found += 1
  assert n_found > 100
  in_entity = selected_in_entity = 0
  for step in range(6):
    info = m.debug_selection(packed, seed=0, step=step, example_ids=np.arange(ROWS))
    unit = _entity_units(info)
    sel = _selected(m(packed, seed=0, step=step, example_ids=np.arange(ROWS)), ids.shape)
    np.testing.assert_array_equal(sel, info["selected"])
    _assert_all_or_nothing(unit, sel)
    # Entities come first: a row whose entities fit in the budget has all of them selected.
    ent_tokens = (unit >= 0).sum(1)
    fits = ent_tokens <= info["budget"]
    assert np.all(sel[fits] | (unit[fits] < 0))
    in_entity += (unit >= 0).sum()
    selected_in_entity += (sel & (unit >= 0)).sum()
  assert selected_in_entity > 0.5 * in_entity  # far above the 15% random masking would give


def test_entity_heuristic_catches_and_misses(tok, stats):
  text = ("And the LORD God spake unto Moses. Then Simon Peter went with John Mark to Jerusalem,"
          " and Pharaoh saw it.")
  ids = np.array([[tok_lib.CLS_ID] + tok.encode([text])[0] + [tok_lib.SEP_ID]], np.int32)
  batch = {"input_ids": ids, "segment_ids": np.ones_like(ids)}

  def found(m):
    info = m.debug_selection(batch, seed=0, step=0, example_ids=np.arange(1))
    unit = _entity_units(info)[0]
    return [tok.decode(ids[0][unit == u]) for u in range(unit.max() + 1)]

  # Runs of >= 2 capitalised words; "Then" (sentence start) is dropped; single words missed.
  assert found(_masker(stats, strategy="entity")) == ["LORD God", "Simon Peter", "John Mark"]
  gaz = [np.asarray(x, np.int32) for x in tok.encode(["Moses", "the LORD", "Jerusalem"])]
  # Gazetteer and heuristic together; overlapping spans ("the LORD" + "LORD God") merge.
  assert found(_masker(stats, gaz, strategy="entity")) == [
      "the LORD God", "Moses", "Simon Peter", "John Mark", "Jerusalem"]
  assert found(_masker(stats, gaz, strategy="entity", entity_heuristic=False)) == [
      "the LORD", "Moses", "Jerusalem"]


# ------------------------------------------------------------------------------------ frequency

def _two_class_batch(rows, n_a, n_b, length=32):
  """Rows of [CLS] n_a tokens of class A (ids 5..504), n_b of class B (505..999) [SEP]."""
  rng = np.random.default_rng(0)
  ids = np.zeros((rows, length), np.int32)
  ids[:, 0] = tok_lib.CLS_ID
  ids[:, 1:1 + n_a] = rng.integers(5, 505, (rows, n_a))
  ids[:, 1 + n_a:1 + n_a + n_b] = rng.integers(505, 1000, (rows, n_b))
  ids[:, 1 + n_a + n_b] = tok_lib.SEP_ID
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

def test_mixture_proportions_and_components(stats, packed):
  m = _masker(stats, strategy="mixture", mixture="random=2,span=1.5,whole_word=1")
  n = 20_000
  choice = m.mixture_choice(seed=0, step=7, example_ids=np.arange(n))
  p = np.array([2, 1.5, 1]) / 4.5
  freq = np.bincount(choice, minlength=3) / n
  assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n))
  # Per example, deterministic, and exactly what that strategy alone would do.
  ex = np.arange(ROWS)
  out = m(packed, seed=0, step=7, example_ids=ex)
  choice = m.mixture_choice(seed=0, step=7, example_ids=ex)
  for i, name in enumerate(["random", "span", "whole_word"]):
    ref = _masker(stats, strategy=name)(packed, seed=0, step=7, example_ids=ex)
    rows = choice == i
    assert rows.sum() > 20
    for k in ("input_ids", "masked_positions", "masked_ids", "masked_weights"):
      np.testing.assert_array_equal(out[k][rows], ref[k][rows])
  other = m.mixture_choice(seed=0, step=8, example_ids=ex)
  assert np.mean(other != choice) > 0.4  # re-drawn every step


def test_mixture_of_every_other_strategy(stats, packed, gazetteer):
  spec = ",".join(f"{s}=1" for s in ALL if s != "mixture")
  m = _masker(stats, gazetteer, strategy="mixture", mixture=spec)
  out = m(packed, seed=0, step=0, example_ids=np.arange(ROWS))
  assert np.all(out["masked_weights"].sum(1) <= P)
  assert len(np.unique(m.mixture_choice(seed=0, step=0, example_ids=np.arange(ROWS)))) == 7


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
  verses = [v for d in corpus[0].documents[100:300] for v in d.split("\n")]
  m = _masker(stats, strategy="static", dupe_factor=3)
  verses = verses[:150]  # all fit in 128 rows, whatever their order
  dyn = _masker(stats, strategy="random")

  def masks(epoch, step, order_seed=None, masker=m):
    b = _pack(tok, verses, rows=128, epoch=epoch, order_seed=order_seed, fill=False)
    out = masker(b, seed=0, step=step, example_ids=np.arange(128) + 128 * step)
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
  # Per-sequence budget: round(0.15 * maskable tokens of the sequence), at least 1.
  for r in range(128):
    for key in np.unique(b0["sequence_keys"][r][b0["segment_ids"][r] > 0]):
      cols = (b0["sequence_keys"][r] == key) & (b0["segment_ids"][r] > 0)
      n = (b0["input_ids"][r][cols] >= NS).sum()
      assert len(e0[int(key)][0]) == max(1, int(np.floor(0.15 * n + 0.5)))
  # Dynamic masking of the same rows changes every step.
  d0, d1 = masks(0, 0, masker=dyn)[0], masks(0, 1, masker=dyn)[0]
  assert np.mean([d0[k] != d1[k] for k in d0]) > 0.9


def test_static_row_truncation_keeps_units_whole(tok, stats):
  # 20 sequences of one short word pair each want 1 prediction apiece; the row holds only 5.
  ids = tok.encode(["Moses said"])[0]
  seq = [tok_lib.CLS_ID] + ids + [tok_lib.SEP_ID]
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


# ------------------------------------------------------------------------------------ adaptive

def test_adaptive_weights(stats, long_rows):
  m = _masker(stats, strategy="adaptive")
  ex = np.arange(ROWS)
  ref = _masker(stats, strategy="random")(long_rows, seed=0, step=3, example_ids=ex)
  out = m(long_rows, seed=0, step=3, example_ids=ex)
  for k in ref:  # before any feedback: exactly uniform selection
    np.testing.assert_array_equal(out[k], ref[k])
  v = len(stats.counts)
  weights = np.ones(v)
  weights[::2] = 0.0  # even ids are never selected
  m.set_token_weights(weights)
  out = m(long_rows, seed=0, step=3, example_ids=ex)
  assert np.all(out["masked_ids"][out["masked_weights"] > 0] % 2 == 1)
  # The table travels with the masker (grain may pickle it).
  clone = pickle.loads(pickle.dumps(m))
  again = clone(long_rows, seed=0, step=3, example_ids=ex)
  for k in out:
    np.testing.assert_array_equal(out[k], again[k])
  # A table set `from_step` on leaves the masks of earlier steps alone (prefetch-safe).
  m.set_token_weights(np.ones(v), from_step=10)
  for k, val in m(long_rows, seed=0, step=3, example_ids=ex).items():
    np.testing.assert_array_equal(val, out[k])
  for k, val in m(long_rows, seed=0, step=10, example_ids=ex).items():
    np.testing.assert_array_equal(val, _masker(stats, strategy="random")(
        long_rows, seed=0, step=10, example_ids=ex)[k])
  for bad in (np.ones(v - 1), -np.ones(v), np.full(v, np.nan), np.zeros(v)):
    with pytest.raises(ValueError):
      m.set_token_weights(bad)


def test_adaptive_selection_probability_proportional_to_weight():
  stats = _synthetic_stats(np.ones(1000, np.int64))
  m = _masker(stats, strategy="adaptive", mask_rate=0.05)
  w = np.ones(1000)
  w[5:505] = 3.0
  m.set_token_weights(w)
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


# ------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize("overrides,message", [
    (dict(strategy="bert"), "masking.strategy='bert' is not one of random, whole_word, span,"
     " entity, frequency, mixture, static, adaptive"),
    (dict(mask_rate=1.0), "masking.mask_rate=1.0 must be strictly between 0 and 1"),
    (dict(replacement="zipf"), "masking.replacement='zipf' is not one of uniform, unigram"),
    (dict(strategy="mixture", mixture=""), "masking.strategy='mixture' needs masking.mixture,"
     " e.g. 'random=0.5,span=0.3,whole_word=0.2'"),
    (dict(strategy="mixture", mixture="random=0.5,span"), "masking.mixture item 'span' is not"
     " strategy=weight, e.g. 'random=0.5,span=0.3,whole_word=0.2'"),
    (dict(strategy="mixture", mixture="random=1,mixture=1"), "masking.mixture: 'mixture' is"
     " not one of random, whole_word, span, entity, frequency, static, adaptive"),
    (dict(strategy="mixture", mixture="random=1,spam=1"), "masking.mixture: 'spam' is not one"
     " of random, whole_word, span, entity, frequency, static, adaptive"),
    (dict(strategy="mixture", mixture="random=1,span=-1"), "masking.mixture: the weight of"
     " 'span' must be a positive number, got '-1'"),
    (dict(strategy="mixture", mixture="random=1,span=x"), "masking.mixture: the weight of"
     " 'span' must be a positive number, got 'x'"),
    (dict(strategy="mixture", mixture="span=1,span=2"), "masking.mixture names 'span' twice"),
    (dict(strategy="span", span_p=0.0), "masking.span_p=0.0 must be in (0, 1] (SpanBERT: 0.2)"),
    (dict(strategy="mixture", mixture="random=1,span=1", span_max_words=0),
     "masking.span_max_words=0 must be >= 1 (SpanBERT: 10)"),
    (dict(strategy="frequency", frequency_alpha=-0.5), "masking.frequency_alpha=-0.5 must be"
     " >= 0 (0: uniform, 1: inverse frequency)"),
    (dict(strategy="static", dupe_factor=0), "masking.dupe_factor=0 must be >= 1"),
    (dict(strategy="static", static_strategy="mixture"), "masking.static_strategy='mixture' is"
     " not one of random, whole_word, span, entity, frequency"),
    (dict(strategy="entity", entity_heuristic=False), "masking.strategy 'entity' needs"
     " masking.entity_heuristic=True or a masking.entity_gazetteer file (one phrase per line)"),
    (dict(strategy="entity", entity_gazetteer="names.txt"), "masking.entity_gazetteer="
     "'names.txt' is set but no gazetteer was passed to Masker"
     " (use masking_settings.load_gazetteer)"),
    (dict(strategy="adaptive", adaptive_every_steps=0), "masking.adaptive_every_steps=0 must"
     " be >= 1"),
    (dict(max_predictions_per_seq=0), "masking.max_predictions_per_seq=0 must be >= 1"),
    (dict(adaptive_decay=1.0), "masking.adaptive_decay=1.0 must be in [0, 1)"),
    (dict(stats_max_documents=-1), "masking.stats_max_documents=-1 must be >= 0"),
])
def test_config_errors(overrides, message, stats):
  with pytest.raises(masking_settings.MaskingError) as e:
    _masker(stats, **overrides)
  assert str(e.value) == message
  assert isinstance(e.value, errors.UserError)


@pytest.mark.parametrize("overrides,name", [(dict(replacement="unigram"), "replacement='unigram'"),
                                            (dict(strategy="frequency"), "strategy 'frequency'")])
def test_counts_required(overrides, name, tok):
  no_counts = vocab_stats.compute(tok, [], 0)
  assert no_counts.counts.sum() == 0
  with pytest.raises(masking_settings.MaskingError) as e:
    masking.Masker(_cfg(**overrides), no_counts)
  assert str(e.value) == (f"masking.{name} needs token counts, but the vocab stats have none:"
                          " set masking.stats_max_documents > 0")


def test_gazetteer_errors(tok, tmp_path):
  missing = str(tmp_path / "nope.txt")
  with pytest.raises(masking_settings.MaskingError) as e:
    masking_settings.load_gazetteer(missing, tok)
  assert str(e.value) == f"masking.entity_gazetteer: {missing!r} does not exist"
  empty = tmp_path / "empty.txt"
  empty.write_text("\n  \n", encoding="utf-8")
  with pytest.raises(masking_settings.MaskingError) as e:
    masking_settings.load_gazetteer(str(empty), tok)
  assert str(e.value) == f"masking.entity_gazetteer: {str(empty)!r} has no phrases (one per line)"


# ------------------------------------------------------------------------------------ vocab stats

def test_piece_tables():
  pieces = ["[PAD]", "\u2581the", "ed", ",", "\u2581", "\u2581LORD", "God", ".\u201d", "s.",
            "\u2581(", "?)", "'", "\u2581Mr.", "\u00e9t\u00e9", "\u2581\u00c9cole", "\u2581...",
            "$"]
  t = vocab_stats.piece_tables(pieces, [True] + [False] * (len(pieces) - 1))
  got = {k: [p for p, f in zip(pieces, v) if f] for k, v in t.items()}
  assert got["punctuation"] == [",", ".\u201d", "\u2581(", "?)", "'", "\u2581...", "$"]
  assert got["word_start"] == ["\u2581the", ",", "\u2581", "\u2581LORD", ".\u201d", "\u2581(",
                               "?)", "'", "\u2581Mr.", "\u2581\u00c9cole", "\u2581...", "$"]
  assert got["capitalized"] == ["\u2581LORD", "God", "\u2581Mr.", "\u2581\u00c9cole"]
  assert got["sentence_end"] == [".\u201d", "s.", "?)", "\u2581Mr.", "\u2581..."]
  assert got["space_only"] == ["\u2581"]


def test_vocab_stats_compute_save_load(tok, corpus, tmp_path, monkeypatch):
  docs = corpus[0].documents[:50]
  stats = vocab_stats.get_vocab_stats(tok, docs, str(tmp_path), max_documents=20)
  path = tmp_path / vocab_stats.STATS_FILENAME
  assert path.exists() and os.listdir(tmp_path) == [vocab_stats.STATS_FILENAME]
  assert stats.counts.dtype == np.int64 and len(stats.counts) == len(tok)
  assert np.all(stats.counts[:NS] == 0) and stats.counts.sum() > 10_000
  # An evenly spaced sample of 20 of the 50 documents was counted.
  sample = [docs[i * 50 // 20] for i in range(20)]
  expected = np.bincount(np.concatenate(tok.encode([d.replace("\n", " ") for d in sample])),
                         minlength=len(tok))
  expected[:NS] = 0
  np.testing.assert_array_equal(stats.counts, expected)
  assert stats.word_start[tok.sp.piece_to_id("\u2581the")]
  assert stats.punctuation[tok.sp.piece_to_id(",")] and stats.sentence_end[tok.sp.piece_to_id(".")]
  # Reused, not recomputed, on the next call ("stored with the tokenizer").
  monkeypatch.setattr(vocab_stats, "compute", lambda *a: pytest.fail("recomputed"))
  again = vocab_stats.get_vocab_stats(tok, docs, str(tmp_path), max_documents=20)
  for f in ("word_start", "punctuation", "capitalized", "sentence_end", "counts", "space_only"):
    np.testing.assert_array_equal(getattr(stats, f), getattr(again, f))
  other = tok_lib.train_tokenizer(docs, 300, "unigram", 10_000)
  with pytest.raises(vocab_stats.VocabStatsError, match="belongs to another tokenizer"):
    vocab_stats.get_vocab_stats(other, docs, str(tmp_path), max_documents=20)


@pytest.mark.parametrize("strategy", ALL)
def test_degenerate_rows(strategy, stats, gazetteer):
  """Empty rows, rows of one token, rows of only [UNK], rows shorter than P."""
  ids = np.zeros((4, 6), np.int32)
  ids[1, :3] = [tok_lib.CLS_ID, 42, tok_lib.SEP_ID]
  ids[2, :3] = [tok_lib.CLS_ID, tok_lib.UNK_ID, tok_lib.SEP_ID]
  ids[3, :6] = [tok_lib.CLS_ID, 42, 43, 44, 45, tok_lib.SEP_ID]
  seg = (ids > 0).astype(np.int32)
  batch = {"input_ids": ids, "segment_ids": seg, "positions": np.cumsum(seg, 1) - 1,
           "sequence_keys": seg.astype(np.uint64) * np.arange(4, dtype=np.uint64)[:, None],
           "epochs": np.zeros_like(ids)}
  m = _masker(stats, gazetteer, strategy=strategy)
  for b in (batch, {k: v[:1] for k, v in batch.items()}):  # also: a batch of padding only
    out = m(b, seed=0, step=0, example_ids=np.arange(len(b["input_ids"])))
    assert out["masked_positions"].shape == (len(b["input_ids"]), P)
    np.testing.assert_array_equal(out["masked_weights"].sum(1), [0, 1, 0, 1][:len(b["input_ids"])])


@pytest.mark.parametrize("static_strategy", masking_settings.STATIC_BASES)
def test_static_with_every_base_strategy(static_strategy, tok, stats, packed, words, gazetteer):
  m = _masker(stats, gazetteer, strategy="static", static_strategy=static_strategy)
  out = m(packed, seed=0, step=0, example_ids=np.arange(ROWS))
  sel = _selected(out, words.shape)
  assert np.all(out["masked_weights"].sum(1) <= P) and np.all(packed["input_ids"][sel] >= NS)
  again = m(packed, seed=0, step=99, example_ids=np.arange(ROWS) + 7)  # ignores step and ids
  np.testing.assert_array_equal(out["input_ids"], again["input_ids"])
  if static_strategy == "whole_word":
    _assert_all_or_nothing(words, sel)
  if static_strategy == "entity":  # entity spans depend on the text only, not on the row
    info = _masker(stats, gazetteer, strategy="entity").debug_selection(
        packed, seed=0, step=0, example_ids=np.arange(ROWS))
    _assert_all_or_nothing(_entity_units(info), sel)
