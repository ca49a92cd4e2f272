"""The masker (data/masking/masker.py): the composite strategies (mixture, static), the
per-row budget and its truncation, degenerate rows and the span-boundary outputs, on rows made
by the real row builder from the built-in corpus (statistical bounds as in
test_masking_strategies.py).
"""

import logging
import re

import numpy as np
import pytest

from mlmjax.data.text import annotation
from mlmjax.data import masking
from mlmjax.data.masking import entities
from mlmjax.models import special_ids

from masking_cases import (ALL, NS, P, ROWS, _assert_all_or_nothing, _budget, _cfg, _entities,
                           _entity_units, _masker, _rows, _selected, _synthetic_stats, _words)


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


def test_mixture_of_every_other_strategy(tok, stats, packed, cooc):
  """Every base and composite strategy can be a component: the mixture draws each one about
  equally often, and a row drawn for a component is masked exactly as that strategy alone
  masks it, at that strategy's budget."""
  names = [s for s in ALL if s != "mixture"]
  table = np.ones(len(stats.counts))
  table[::2] = 0.0  # adaptive with a table (never even ids): not the same masks as `random`
  # Entities in every row (else `entity` masks a row exactly as `random` does).
  gazetteer = entities.Gazetteer([np.asarray(x, np.int32) for x in tok.encode(["and", "of"])])
  kw = dict(token_weights=lambda step: table, cooccurrence=cooc)
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
def test_static_with_every_base_strategy(static_strategy, stats, packed, words, gazetteer, cooc):
  m = _masker(stats, gazetteer, strategy="static", static_strategy=static_strategy,
              cooccurrence=cooc)
  out = m(packed, seed=0, step=0, example_ids=np.arange(ROWS))
  sel = _selected(out, words.shape)
  assert np.all(out["masked_weights"].sum(1) <= P) and np.all(packed["input_ids"][sel] >= NS)
  again = m(packed, seed=0, step=99, example_ids=np.arange(ROWS) + 7)  # ignores step and ids
  np.testing.assert_array_equal(out["input_ids"], again["input_ids"])
  if static_strategy == "whole_word":
    _assert_all_or_nothing(words, sel)
  if static_strategy == "entity":  # entity spans depend on the text only, not on the row
    _assert_all_or_nothing(_entity_units(*_entities(stats, packed, gazetteer)), sel)



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
def test_degenerate_rows(strategy, stats, gazetteer, cooc):
  """Empty rows, rows of one token, rows of only [UNK], rows shorter than P."""
  ids = np.zeros((4, 6), np.int32)
  ids[1, :3] = [special_ids.CLS_ID, 42, special_ids.SEP_ID]
  ids[2, :3] = [special_ids.CLS_ID, special_ids.UNK_ID, special_ids.SEP_ID]
  ids[3, :6] = [special_ids.CLS_ID, 42, 43, 44, 45, special_ids.SEP_ID]
  seg = (ids > 0).astype(np.int32)
  batch = {"input_ids": ids, "segment_ids": seg, "positions": np.cumsum(seg, 1) - 1,
           "sequence_keys": seg.astype(np.uint64) * np.arange(4, dtype=np.uint64)[:, None],
           "epochs": np.zeros_like(ids),
           "annotations": np.zeros(ids.shape + (len(annotation.FEATURES),), np.int32)}
  batch["annotations"][..., annotation.WORD] = seg  # each token a word
  m = _masker(stats, gazetteer, strategy=strategy, cooccurrence=cooc)
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

