"""Generated text scored (models/sample_quality.py), by hand: token entropy per sample,
seq-rep-n, generative perplexity under a made-up causal model."""

import math

import numpy as np
import pytest

from mlmjax.models import sample_quality
from mlmjax.models import special_ids

CLS, SEP, PAD = special_ids.CLS_ID, special_ids.SEP_ID, special_ids.PAD_ID
A, B, C, D = (special_ids.NUM_SPECIAL + i for i in range(4))


def test_token_entropy_is_each_sample_s_unigram_entropy_averaged():
  """Sample 1: a a b b, p = (1/2, 1/2), ln 2 nats; sample 2: c c c c, 0 nats; the mean ln 2 / 2.
  Pooled over both samples (the wrong axis): p = (1/4, 1/4, 1/2), 1.04 nats."""
  rows = np.array([[CLS, A, A, B, B, SEP], [CLS, C, C, C, C, SEP]])
  assert sample_quality.token_entropy(rows) == pytest.approx(math.log(2) / 2)
  rows = np.array([[CLS, A, B, C, D, SEP, PAD, PAD]])  # 4 distinct: ln 4, padding not counted
  assert sample_quality.token_entropy(rows) == pytest.approx(math.log(4))


def test_repeated_ngrams_are_seq_rep_n():
  """a b a b a: bigrams ab ba ab ba, 2 distinct of 4: 0.5; a b c d: 0; the mean 0.25."""
  rows = np.array([[CLS, A, B, A, B, A, SEP], [CLS, A, B, C, D, SEP, PAD]])
  assert sample_quality.repeated_ngrams(rows, n=2) == pytest.approx(0.25)
  assert sample_quality.repeated_ngrams(rows, n=4) == pytest.approx(0.0)  # a b a b, b a b a
  assert sample_quality.repeated_ngrams(rows, n=3) == pytest.approx((1 - 2 / 3) / 2)


def test_generative_perplexity_is_exp_of_the_text_tokens_mean_nll():
  """A made-up causal model gives a 1/2 after [CLS], b 1/4 after a, [SEP] 1/10: the text's two
  tokens score exp((ln 2 + ln 4) / 2) = sqrt(8); [SEP] and [PAD] are not the text's."""
  rows = np.array([[CLS, A, B, SEP, PAD]])

  def next_log_probs(ids):
    assert ids.shape == (1, 5)
    return np.log([[0.5, 0.25, 0.1, 0.01]])

  assert sample_quality.generative_perplexity(next_log_probs, rows) == pytest.approx(
      math.sqrt(8))
