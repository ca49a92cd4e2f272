"""Masking basics (strategy `random`): budget, specials, purity; the counter-based uniforms.

The per-strategy statistics, 80/10/10 included, are in test_masking_strategies.py.
"""

import numpy as np
import pytest
import scipy.stats

from mlmjax.configs import base
from mlmjax.data import masking
from mlmjax.data.text import vocab_stats
from mlmjax.data.masking import uniforms
from mlmjax.models import special_ids

VOCAB = 1000


def _stats():
  z = np.zeros(VOCAB, bool)
  return vocab_stats.VocabStats(word_start=z, punctuation=z, capitalized=z, sentence_end=z,
                                counts=np.zeros(VOCAB, np.int64))


def _batch(rows=64, length=128, seed=0):
  """Packed-looking rows: [CLS] words [SEP] [CLS] words [SEP] then [PAD]s, some [UNK]s."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(special_ids.NUM_SPECIAL, VOCAB, size=(rows, length)).astype(np.int32)
  ids[:, 0] = special_ids.CLS_ID
  ids[:, 50] = special_ids.SEP_ID
  ids[:, 51] = special_ids.CLS_ID
  ids[:, 100] = special_ids.SEP_ID
  ids[:, 101:] = special_ids.PAD_ID
  ids[:, 7] = special_ids.UNK_ID
  return {"input_ids": ids}


def _mask(batch, step=0, example_ids=None, seed=1, **overrides):
  config = base.get_config().masking
  config.update(overrides)
  rows = batch["input_ids"].shape[0]
  ids = np.arange(rows) if example_ids is None else example_ids
  masker = masking.Masker(masking.Settings.from_config(config), _stats())
  return masker(batch, seed=seed, step=step, example_ids=ids)


def test_budget_rounds_half_up_with_at_least_one_and_a_cap():
  budget, want = masking.budget(np.array([0, 1, 3, 30, 96, 510]), 0.15, 76)
  np.testing.assert_array_equal(want, [0, 1, 1, 5, 14, 77])  # 4.5 -> 5, 76.5 -> 77
  np.testing.assert_array_equal(budget, [0, 1, 1, 5, 14, 76])


def test_selection_rate_and_specials():
  batch = _batch()
  maskable_per_row = 101 - 5  # 101 real tokens minus CLS, SEP, CLS, SEP, UNK
  per_row = int(masking.budget(maskable_per_row, 0.15, 20)[0])
  assert per_row == 14
  for step in range(20):
    out = _mask(batch, step)
    w = out["masked_weights"]
    assert np.all(w.sum(axis=1) == per_row)
    pos = out["masked_positions"][w > 0]
    rows = np.nonzero(w > 0)[0]
    original = batch["input_ids"][rows, pos]
    assert np.all(original >= special_ids.NUM_SPECIAL), "special or pad token selected"
    np.testing.assert_array_equal(out["masked_ids"][w > 0], original)
    # Padding slots are zero and never alter the input.
    assert np.all(out["masked_positions"][w == 0] == 0)
    assert np.all(out["masked_ids"][w == 0] == 0)
    # Unselected positions are untouched.
    changed = out["input_ids"] != batch["input_ids"]
    selected = np.zeros_like(changed)
    selected[rows, pos] = True
    assert not np.any(changed & ~selected)
    # Positions are distinct and ascending within a row.
    for r in range(w.shape[0]):
      p = out["masked_positions"][r][w[r] > 0]
      assert np.all(np.diff(p) > 0)


def test_random_replacements_are_uniform_non_special():
  """Random replacements are uniform over the non-special ids: a chi-square goodness-of-fit
  over all of them, every one drawn, and never a special id (nor one past the vocabulary)."""
  batch = _batch(rows=256)
  new = []
  for step in range(16):  # ~57k replacements: ~58 expected per id, enough for chi-square
    out = _mask(batch, step, mask_token_prob=0.0, random_token_prob=1.0)
    w = out["masked_weights"] > 0
    new.append(out["input_ids"][np.nonzero(w)[0], out["masked_positions"][w]])
  new = np.concatenate(new)
  assert new.min() >= special_ids.NUM_SPECIAL and new.max() < VOCAB, "a special or unknown id"
  counts = np.bincount(new, minlength=VOCAB)[special_ids.NUM_SPECIAL:]
  never = np.nonzero(counts == 0)[0] + special_ids.NUM_SPECIAL
  assert not len(never), f"ids never drawn: {never[:10]}"
  # Chi-square goodness of fit, per id (fine structure: ids favoured or starved) and over 16
  # ranges of ids (a smooth skew, which per-id counts of ~58 are too noisy to show). Fixed
  # seeds, so the outcome is fixed; a uniform draw falls below p = 1e-6 once in a million seeds.
  ranges = np.array_split(counts, 16)
  for name, observed, expected in (
      ("per id", counts, None),
      ("per range", [r.sum() for r in ranges], [len(r) * new.size / counts.size for r in ranges])):
    p_value = scipy.stats.chisquare(observed, expected).pvalue
    assert p_value > 1e-6, f"replacement ids not uniform {name}: chi-square p = {p_value:.2g}"


def test_pure_function_of_seed_step_example():
  batch = _batch(rows=8)
  a = _mask(batch, step=5, example_ids=np.arange(100, 108))
  b = _mask(batch, step=5, example_ids=np.arange(100, 108))
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  # The same example alone (another batch composition) gets the same mask.
  alone = _mask({"input_ids": batch["input_ids"][3:4]}, step=5, example_ids=np.array([103]))
  for k in a:
    np.testing.assert_array_equal(a[k][3:4], alone[k])
  # Another step, another example index or another seed: different masks.
  c = _mask(batch, step=6, example_ids=np.arange(100, 108))
  d = _mask(batch, step=5, example_ids=np.arange(200, 208))
  e = _mask(batch, step=5, example_ids=np.arange(100, 108), seed=2)
  for other in (c, d, e):
    assert not np.array_equal(a["masked_positions"], other["masked_positions"])


def test_budget_caps_at_max_predictions_and_empty_rows():
  batch = _batch(rows=4)
  batch["input_ids"][1] = special_ids.PAD_ID  # an all-padding row (e.g. eval padding)
  out = _mask(batch, max_predictions_per_seq=5)
  assert out["masked_positions"].shape == (4, 5)
  np.testing.assert_array_equal(out["masked_weights"].sum(1), [5, 0, 5, 5])


@pytest.mark.parametrize("length", [1, 3])
def test_tiny_rows_still_get_one_prediction(length):
  ids = np.full((2, length + 2), special_ids.PAD_ID, np.int32)
  ids[:, 0] = special_ids.CLS_ID
  ids[:, 1:1 + length] = 42
  ids[:, 1 + length] = special_ids.SEP_ID
  out = _mask({"input_ids": ids})
  assert np.all(out["masked_weights"].sum(1) == 1)  # BERT: at least one per non-empty row


def test_uniforms_look_uniform():
  u = uniforms.uniform(0, 0, 0, np.arange(512), 512).ravel()
  assert 0.0 <= u.min() and u.max() < 1.0
  hist = np.histogram(u, bins=16, range=(0, 1))[0]
  expected = u.size / 16
  assert np.all(np.abs(hist - expected) < 5 * np.sqrt(expected))


def test_uniforms_are_strictly_inside_the_unit_interval_even_for_all_zero_inputs():
  u = uniforms.uniform(0, 0, 0, np.arange(4), 8)
  assert u.min() > 0.0 and u.max() < 1.0
  assert len(np.unique(u)) == u.size  # no fixed point of the hash at zero
