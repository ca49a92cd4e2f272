"""What the `config.masking` keys mean to the masker: typed and validated settings, the
strategy names, mixture specs, and the entity gazetteer file (see masking.py for the strategies).
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging
import numpy as np

from mlmjax import errors
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats as vocab_stats_lib

NS = tokenizer_lib.NUM_SPECIAL
STRATEGIES = ("random", "whole_word", "span", "entity", "frequency", "mixture", "static",
              "adaptive")
STATIC_BASES = ("random", "whole_word", "span", "entity", "frequency")
REPLACEMENTS = ("uniform", "unigram")


class MaskingError(errors.UserError):
  """A masking setting mlmjax cannot use, with a message naming the key to change."""


@dataclasses.dataclass(frozen=True)
class Settings:
  """The masking.* keys the masker uses, typed; `validate` checks them against the vocab."""

  strategy: str
  mask_rate: float
  mask_token_prob: float
  random_token_prob: float
  max_predictions: int
  replacement: str
  span_p: float
  span_max_words: int
  entity_gazetteer: str
  entity_heuristic: bool
  frequency_alpha: float
  mixture: tuple[tuple[str, float], ...]
  dupe_factor: int
  static_strategy: str

  @classmethod
  def from_config(cls, c) -> "Settings":
    """Parses the `config.masking` ConfigDict; also checks the keys only the trainer reads, so
    every masking error surfaces where the masker is built, before anything runs."""
    _check_trainer_keys(c)
    return cls(
        strategy=c.strategy, mask_rate=float(c.mask_rate),
        mask_token_prob=float(c.mask_token_prob), random_token_prob=float(c.random_token_prob),
        max_predictions=int(c.max_predictions_per_seq), replacement=c.replacement,
        span_p=float(c.span_p), span_max_words=int(c.span_max_words),
        entity_gazetteer=c.entity_gazetteer, entity_heuristic=bool(c.entity_heuristic),
        frequency_alpha=float(c.frequency_alpha),
        mixture=parse_mixture(c.mixture) if c.strategy == "mixture" else (),
        dupe_factor=int(c.dupe_factor), static_strategy=c.static_strategy)


def _check_trainer_keys(c) -> None:
  """masking.* keys read by the trainer (adaptive table, vocab stats), not by the masker."""
  if c.adaptive_every_steps < 1:
    raise MaskingError(f"masking.adaptive_every_steps={c.adaptive_every_steps} must be >= 1")
  if not 0.0 <= c.adaptive_decay < 1.0:
    raise MaskingError(f"masking.adaptive_decay={c.adaptive_decay} must be in [0, 1)")
  if c.stats_max_documents < 0:
    raise MaskingError(f"masking.stats_max_documents={c.stats_max_documents} must be >= 0")


def parse_mixture(spec: str) -> tuple[tuple[str, float], ...]:
  """"random=0.5,span=0.3" -> (('random', 0.5), ('span', 0.3)), weights normalised to sum 1."""
  example = "e.g. 'random=0.5,span=0.3,whole_word=0.2'"
  if not spec.strip():
    raise MaskingError(f"masking.strategy='mixture' needs masking.mixture, {example}")
  items = []
  for item in spec.split(","):
    name, eq, weight = item.partition("=")
    name = name.strip()
    if not eq or not name:
      raise MaskingError(f"masking.mixture item {item.strip()!r} is not strategy=weight, {example}")
    if name not in STRATEGIES or name == "mixture":
      raise MaskingError(
          f"masking.mixture: {name!r} is not one of "
          f"{', '.join(s for s in STRATEGIES if s != 'mixture')}")
    try:
      w = float(weight)
    except ValueError:
      w = float("nan")
    if not np.isfinite(w) or w <= 0:
      raise MaskingError(f"masking.mixture: the weight of {name!r} must be a positive number,"
                         f" got {weight.strip()!r}")
    if name in (n for n, _ in items):
      raise MaskingError(f"masking.mixture names {name!r} twice")
    items.append((name, w))
  total = sum(w for _, w in items)
  return tuple((n, w / total) for n, w in items)


def validate(s: Settings, stats: vocab_stats_lib.VocabStats, has_gazetteer: bool) -> None:
  if s.strategy not in STRATEGIES:
    raise MaskingError(f"masking.strategy={s.strategy!r} is not one of {', '.join(STRATEGIES)}")
  if not 0.0 < s.mask_rate < 1.0:
    raise MaskingError(f"masking.mask_rate={s.mask_rate} must be strictly between 0 and 1")
  if (s.mask_token_prob < 0 or s.random_token_prob < 0
      or s.mask_token_prob + s.random_token_prob > 1.0):
    raise MaskingError("masking.mask_token_prob and masking.random_token_prob must be >= 0 and"
                       f" sum to <= 1, got {s.mask_token_prob} + {s.random_token_prob}")
  if s.max_predictions < 1:
    raise MaskingError(f"masking.max_predictions_per_seq={s.max_predictions} must be >= 1")
  if s.replacement not in REPLACEMENTS:
    raise MaskingError(f"masking.replacement={s.replacement!r} is not one of"
                       f" {', '.join(REPLACEMENTS)}")
  has_counts = stats.counts[NS:].sum() > 0
  if s.replacement == "unigram" and not has_counts:
    raise MaskingError("masking.replacement='unigram' needs token counts, but the vocab stats"
                       " have none: set masking.stats_max_documents > 0")
  used = {s.strategy}
  used.update(n for n, _ in s.mixture)
  if "static" in used:
    if s.dupe_factor < 1:
      raise MaskingError(f"masking.dupe_factor={s.dupe_factor} must be >= 1")
    if s.static_strategy not in STATIC_BASES:
      raise MaskingError(f"masking.static_strategy={s.static_strategy!r} is not one of"
                         f" {', '.join(STATIC_BASES)}")
    used.add(s.static_strategy)
  if "span" in used:
    if not 0.0 < s.span_p <= 1.0:
      raise MaskingError(f"masking.span_p={s.span_p} must be in (0, 1] (SpanBERT: 0.2)")
    if s.span_max_words < 1:
      raise MaskingError(f"masking.span_max_words={s.span_max_words} must be >= 1"
                         " (SpanBERT: 10)")
  if "frequency" in used:
    if not np.isfinite(s.frequency_alpha) or s.frequency_alpha < 0:
      raise MaskingError(f"masking.frequency_alpha={s.frequency_alpha} must be >= 0"
                         " (0: uniform, 1: inverse frequency)")
    if not has_counts:
      raise MaskingError("masking.strategy 'frequency' needs token counts, but the vocab stats"
                         " have none: set masking.stats_max_documents > 0")
  if "entity" in used:
    if s.entity_gazetteer and not has_gazetteer:
      raise MaskingError(f"masking.entity_gazetteer={s.entity_gazetteer!r} is set but no"
                         " gazetteer was passed to Masker (use masking_settings.load_gazetteer)")
    if not s.entity_heuristic and not has_gazetteer:
      raise MaskingError("masking.strategy 'entity' needs masking.entity_heuristic=True or a"
                         " masking.entity_gazetteer file (one phrase per line)")


def strategies_in_use(masking_config) -> set[str]:
  """The strategy and, for mixture/static, the ones it draws on."""
  used = {masking_config.strategy}
  if masking_config.strategy == "mixture":
    used.update(n for n, _ in parse_mixture(masking_config.mixture))
  if "static" in used:
    used.add(masking_config.static_strategy)
  return used


def load_gazetteer(path: str, tok: tokenizer_lib.Tokenizer) -> list[np.ndarray]:
  """One phrase per line (blank lines skipped) -> int32 token id arrays, encoded like documents.

  Phrases whose encoding contains [UNK] can never match a maskable span and are dropped.
  """
  if not os.path.isfile(path):
    raise MaskingError(f"masking.entity_gazetteer: {path!r} does not exist")
  with open(path, "r", encoding="utf-8", errors="replace") as f:
    phrases = [line.strip() for line in f if line.strip()]
  if not phrases:
    raise MaskingError(f"masking.entity_gazetteer: {path!r} has no phrases (one per line)")
  encoded = [np.asarray(ids, np.int32) for ids in tok.encode(phrases)]
  kept = [ids for ids in encoded if len(ids) and ids.min() >= NS]
  if len(kept) < len(encoded):
    logging.warning("masking.entity_gazetteer: %d of %d phrases contain unknown characters"
                    " and can never match; dropped", len(encoded) - len(kept), len(encoded))
  if not kept:
    raise MaskingError(f"masking.entity_gazetteer: no phrase of {path!r} is representable by"
                       " the tokenizer")
  return kept
