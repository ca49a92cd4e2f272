"""How good generated text is, three numbers (docs/diffusion.md):

  generative perplexity  exp(the mean negative log-likelihood of the samples' tokens) under a
                         reference causal LM; each token predicted from the text before it,
                         [CLS] first; pooled over every sample's tokens (MDLM, Sahoo et al.
                         2024, scores its samples under GPT-2 Large)
  token entropy          each sample's unigram entropy (nats: -sum p log p over the tokens'
                         frequencies in that sample), averaged over the samples. Zheng et al.
                         (2024) show generative perplexity falling with the samples' token
                         entropy (fewer distinct tokens): the two are read together
  repeated n-grams       Welleck et al. (2019)'s seq-rep-n: each sample's share of n-grams
                         that are not unique (1 - distinct / all), averaged over the samples

A sample is a row of ids [CLS] text [SEP] [PAD]...; special ids are not the text's and count
in none of the three.
"""

from __future__ import annotations

import collections
import math
from typing import Callable

import numpy as np

from mlmjax.models import special_ids


def texts(rows: np.ndarray) -> list[np.ndarray]:
  """Each row's text: its ids that are not special."""
  return [row[row >= special_ids.NUM_SPECIAL] for row in np.asarray(rows)]


def token_entropy(rows: np.ndarray) -> float:
  """The samples' mean unigram entropy, in nats."""
  out = []
  for text in texts(rows):
    counts = np.array(list(collections.Counter(text.tolist()).values()), np.float64)
    p = counts / counts.sum()
    out.append(float(-(p * np.log(p)).sum()))
  return float(np.mean(out))


def repeated_ngrams(rows: np.ndarray, n: int = 4) -> float:
  """seq-rep-n: the mean over samples of 1 - distinct n-grams / n-grams (samples shorter than
  n have none and are left out)."""
  out = []
  for text in texts(rows):
    grams = [tuple(text[i:i + n]) for i in range(len(text) - n + 1)]
    if grams:
      out.append(1.0 - len(set(grams)) / len(grams))
  return float(np.mean(out)) if out else 0.0


def generative_perplexity(next_log_probs: Callable[[np.ndarray], np.ndarray],
                          rows: np.ndarray) -> float:
  """exp(mean NLL) of the samples' text tokens; `next_log_probs(ids [B, L]) -> [B, L-1]`, the
  log-probability the reference gives each token ids[:, 1:] after the ones before it."""
  rows = np.asarray(rows)
  log_probs = np.asarray(next_log_probs(rows), np.float64)
  scored = rows[:, 1:] >= special_ids.NUM_SPECIAL
  return math.exp(-log_probs[scored].sum() / scored.sum())


def scores(next_log_probs: Callable[[np.ndarray], np.ndarray], rows: np.ndarray) -> dict:
  """The three numbers of the samples `rows` (the reference's `next_log_probs`)."""
  return {"generative_perplexity": generative_perplexity(next_log_probs, rows),
          "token_entropy": token_entropy(rows), "repeated_4grams": repeated_ngrams(rows, 4)}
