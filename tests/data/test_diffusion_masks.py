"""Masked diffusion's masks (data/masking/diffusion.py): a rate per document in [min_rate, 1],
uniform or spread evenly over a batch (MDLM's low-discrepancy sampler), each token masked alone
with its document's rate, always by [MASK], every target in a slot with its rate, and the same
masks for the same (seed, step, example) wherever it sits."""

import numpy as np
import pytest

from mlmjax.configs import tiny
from mlmjax.data import masking
from mlmjax.data.masking import diffusion
from mlmjax.data.masking import uniforms
from mlmjax.errors import ConfigError
from mlmjax.models import special_ids

CLS, SEP, MASK = special_ids.CLS_ID, special_ids.SEP_ID, special_ids.MASK_ID
EPS = 1e-3


def _rows(num_rows, length=64, documents=1):
  """Rows of `documents` packed documents each ([CLS] tokens [SEP]), then padding."""
  ids = np.zeros((num_rows, length), np.int32)
  seg = np.zeros((num_rows, length), np.int32)
  doc_len = (length - 4) // documents
  for d in range(documents):
    start = d * doc_len
    ids[:, start] = CLS
    ids[:, start + 1:start + doc_len - 1] = 100 + np.arange(doc_len - 2)
    ids[:, start + doc_len - 1] = SEP
    seg[:, start:start + doc_len] = d + 1
  return ids, seg


def _masker(stats, distribution="uniform"):
  config = tiny.get_config()
  config.masking.max_predictions_per_seq = 64
  return masking.Masker(masking.Settings.from_config(config.masking), stats,
                        diffusion=diffusion.Rates(distribution, EPS))


def _first_token_rates(distribution, num_rows, step=0, documents=1, start=0):
  ids, seg = _rows(num_rows, documents=documents)
  draws = uniforms.Draws(7, step, np.arange(start, start + num_rows))
  return diffusion.Rates(distribution, EPS).of_documents(draws, seg), seg


def test_uniform_rates_cover_min_rate_to_1_with_mean_half_way_and_one_rate_per_document():
  rates, seg = _first_token_rates("uniform", 4096, documents=2)
  first = rates[:, 0]
  assert EPS <= first.min() and first.max() <= 1.0
  assert abs(first.mean() - (1 + EPS) / 2) < 0.015  # 4096 draws: sd of the mean 0.0045
  assert abs(first.std() - (1 - EPS) / np.sqrt(12)) < 0.01
  for d in (1, 2):  # every token of a document has its rate; padding none
    in_doc = np.where(seg == d, rates, np.nan)
    assert np.all(np.nanmax(in_doc, axis=1) == np.nanmin(in_doc, axis=1))
  assert np.all(rates[seg == 0] == 0)
  second = rates[np.arange(len(rates)), np.argmax(seg == 2, axis=1)]
  assert abs(np.corrcoef(first, second)[0, 1]) < 0.05  # the two documents draw apart


def test_low_discrepancy_rates_fill_every_bin_of_a_batch_evenly():
  """64 consecutive examples in 8 equal bins of [eps, 1]: 8 in each, give or take one (the
  Weyl sequence's three-distance property); independent draws are far less even."""
  for step in range(20):
    rates, _ = _first_token_rates("low_discrepancy", 64, step=step, start=64 * step)
    counts = np.histogram(rates[:, 0], bins=8, range=(EPS, 1.0))[0]
    assert counts.min() >= 7 and counts.max() <= 9, counts
  spread = [np.ptp(np.histogram(_first_token_rates("uniform", 64, step=s)[0][:, 0], bins=8,
                                range=(EPS, 1.0))[0]) for s in range(20)]
  assert max(spread) >= 5  # what the uniform draw gives some batches


def test_low_discrepancy_spaces_the_documents_of_a_row_evenly():
  rates, seg = _first_token_rates("low_discrepancy", 16, documents=4)
  starts = [np.argmax(seg == d, axis=1) for d in range(1, 5)]
  u = (np.stack([rates[np.arange(16), s] for s in starts], 1) - EPS) / (1 - EPS)
  gaps = np.diff(np.sort(u, axis=1), axis=1, append=(np.sort(u, axis=1)[:, :1] + 1))
  np.testing.assert_allclose(gaps, 0.25, atol=1e-9)


def test_each_token_is_masked_alone_at_its_documents_rate_always_by_mask(vocab_stats_for_tests):
  ids, seg = _rows(512, length=64)
  out = _masker(vocab_stats_for_tests)({"input_ids": ids, "segment_ids": seg}, seed=3, step=5,
                                       example_ids=np.arange(512))
  selected = out["input_ids"] != ids
  assert np.all(out["input_ids"][selected] == MASK)  # absorbing: no random or kept token
  assert not selected[(ids < special_ids.NUM_SPECIAL)].any()
  weights = out["masked_weights"] > 0
  assert np.array_equal(weights.sum(axis=1), selected.sum(axis=1))  # every target has a slot
  positions = np.where(weights, out["masked_positions"], -1)
  for r in range(3):
    assert sorted(positions[r][weights[r]]) == list(np.nonzero(selected[r])[0])
  rates = diffusion.Rates("uniform", EPS).of_documents(uniforms.Draws(3, 5, np.arange(512)), seg)
  np.testing.assert_allclose(out["masked_rates"][weights],
                             np.take_along_axis(rates, out["masked_positions"], 1)[weights],
                             rtol=1e-6)
  assert np.all(out["masked_rates"][~weights] == 0)
  # The masked fraction of each document follows its rate: 58 maskable tokens a row.
  fraction = selected.sum(axis=1) / 58
  slope = np.polyfit(rates[:, 0], fraction, 1)[0]
  assert abs(slope - 1.0) < 0.05 and abs(np.mean(fraction - rates[:, 0])) < 0.01


def test_an_examples_masks_depend_on_seed_step_and_example_only(vocab_stats_for_tests):
  masker = _masker(vocab_stats_for_tests, "low_discrepancy")
  ids, seg = _rows(8)
  batch = {"input_ids": ids, "segment_ids": seg}
  a = masker(batch, seed=1, step=9, example_ids=np.arange(100, 108))
  b = masker({k: v[::-1] for k, v in batch.items()}, seed=1, step=9,
             example_ids=np.arange(100, 108)[::-1])
  np.testing.assert_array_equal(a["input_ids"], b["input_ids"][::-1])
  np.testing.assert_array_equal(a["masked_rates"], b["masked_rates"][::-1])
  c = masker(batch, seed=1, step=10, example_ids=np.arange(100, 108))
  assert not np.array_equal(a["input_ids"], c["input_ids"])


@pytest.mark.parametrize("key,value,message", [
    ("diffusion_rates", "sobol", "masking.diffusion_rates='sobol' is not one of"
     " low_discrepancy, uniform"),
    ("diffusion_min_rate", 0.0, "masking.diffusion_min_rate=0.0 must be in (0, 1) (MDLM, LLaDA:"
     " 1e-3)"),
])
def test_bad_diffusion_keys_are_one_line(key, value, message):
  config = tiny.get_config()
  config.masking[key] = value
  with pytest.raises(ConfigError) as e:
    masking.Settings.from_config(config.masking)
  assert str(e.value) == message
