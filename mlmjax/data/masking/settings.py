"""The `config.masking` keys, typed and checked (`Settings.from_config`), and the mixture spec.

Rules across sections stay in mlmjax/training/config_check.py: enough prediction slots for a
phase's rows, no rate schedule for static masks, a gazetteer file that exists.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlmjax import typed_settings
from mlmjax.data.text import annotation
from mlmjax.data.masking import diffusion
from mlmjax.data.masking import pmi_vocabulary
from mlmjax.data.masking import rate_schedule
from mlmjax.data.masking import syntax
from mlmjax.errors import ConfigError

MIXTURE_EXAMPLE = "e.g. 'random=0.5,span=0.3,whole_word=0.2'"


def parse_mixture(spec: str) -> tuple[tuple[str, float], ...]:
  """"random=0.5,span=0.3" -> (('random', 0.5), ('span', 0.3)), weights normalised to sum 1.
  (Whether the names are strategies is a config rule.)"""
  if not spec.strip():
    raise ConfigError(f"masking.strategy='mixture' needs masking.mixture, {MIXTURE_EXAMPLE}")
  items = []
  for item in spec.split(","):
    name, eq, weight = item.partition("=")
    name = name.strip()
    if not eq or not name:
      raise ConfigError(f"masking.mixture item {item.strip()!r} is not strategy=weight,"
                         f" {MIXTURE_EXAMPLE}")
    try:
      w = float(weight)
    except ValueError:
      w = float("nan")
    if not np.isfinite(w) or w <= 0:
      raise ConfigError(f"masking.mixture: the weight of {name!r} must be a positive number,"
                         f" got {weight.strip()!r}")
    if name in (n for n, _ in items):
      raise ConfigError(f"masking.mixture names {name!r} twice")
    items.append((name, w))
  total = sum(w for _, w in items)
  return tuple((n, w / total) for n, w in items)


# The base strategies (strategies.py has one selection function for each, in this order) and
# the composites made of them: the values masking.strategy takes.
BASES = ("random", "whole_word", "span", "entity", "frequency", "adaptive", "syntax", "semantic",
         "contextual")
COMPOSITES = ("mixture", "static")
STRATEGIES = (*BASES, *COMPOSITES)
# What static masks can be made by: fixed masks cannot follow a weight table that moves.
STATIC_BASES = tuple(s for s in BASES if s != "adaptive")
# What the input must carry for a strategy: word annotations (spaCy), co-occurrence tables.
NEEDS_ANNOTATIONS = ("syntax",)  # and entity with masking.entity_ner
NEEDS_COOCCURRENCE = ("semantic", "contextual")


@dataclasses.dataclass(frozen=True)
class Settings(typed_settings.Section):
  """config.masking, typed (field names are the config's keys; configs/base.py says what each
  means). `mixture_weights`: masking.mixture parsed, when the strategy is 'mixture'."""

  KEY = "masking"

  strategy: str
  mask_rate: float
  mask_rate_schedule: str
  mask_rate_end: float
  max_predictions_per_seq: int
  mask_token_prob: float
  random_token_prob: float
  replacement: str
  span_p: float
  span_max_words: int
  entity_gazetteer: str
  entity_heuristic: bool
  entity_ner: bool
  entity_labels: str
  entity_probability: float
  nlp_pipeline: str
  syntax_unit: str
  phrase_max_words: int
  syntax_weights: str
  pmi_ngrams: int
  pmi_coverage: float
  pmi_score: str
  pmi_length_shares: tuple
  pmi_min_count: int
  contextual_candidates: int
  frequency_alpha: float
  mixture: str
  dupe_factor: int
  static_strategy: str
  adaptive_every_steps: int
  adaptive_decay: float
  stats_max_documents: int
  diffusion_rates: str
  diffusion_min_rate: float
  mixture_weights: tuple[tuple[str, float], ...] = dataclasses.field(init=False)

  def __post_init__(self):
    names = STRATEGIES
    typed_settings.one_of("masking.strategy", self.strategy, names)
    weights = parse_mixture(self.mixture) if self.strategy == "mixture" else ()
    object.__setattr__(self, "mixture_weights", weights)
    for name, _ in weights:
      if name not in names or name == "mixture":
        raise ConfigError(f"masking.mixture: {name!r} is not one of"
                          f" {', '.join(n for n in names if n != 'mixture')}")
    typed_settings.check_rate("masking.mask_rate", self.mask_rate)
    typed_settings.one_of("masking.mask_rate_schedule", self.mask_rate_schedule,
                          rate_schedule.SHAPES)
    typed_settings.check_rate("masking.mask_rate_end", self.mask_rate_end)
    if self.mask_token_prob < 0 or self.random_token_prob < 0 or (
        self.mask_token_prob + self.random_token_prob > 1.0):
      raise ConfigError("masking.mask_token_prob and masking.random_token_prob must be >= 0 and"
                        f" sum to <= 1, got {self.mask_token_prob} + {self.random_token_prob}")
    if self.max_predictions_per_seq < 1:
      raise ConfigError(f"masking.max_predictions_per_seq={self.max_predictions_per_seq} must"
                        " be >= 1")
    typed_settings.one_of("masking.replacement", self.replacement, ("uniform", "unigram"))
    if self.adaptive_every_steps < 1:
      raise ConfigError(f"masking.adaptive_every_steps={self.adaptive_every_steps} must be"
                        " >= 1")
    if not 0.0 <= self.adaptive_decay < 1.0:
      raise ConfigError(f"masking.adaptive_decay={self.adaptive_decay} must be in [0, 1)")
    if self.stats_max_documents < 0:
      raise ConfigError(f"masking.stats_max_documents={self.stats_max_documents} must be >= 0")
    typed_settings.one_of("masking.diffusion_rates", self.diffusion_rates,
                          diffusion.DISTRIBUTIONS)
    if not 0.0 < self.diffusion_min_rate < 1.0:  # 0 would divide the bound's loss by 0
      raise ConfigError(f"masking.diffusion_min_rate={self.diffusion_min_rate} must be in (0, 1)"
                        " (MDLM, LLaDA: 1e-3)")
    self._check_strategies_in_use()

  def diffusion(self) -> diffusion.Rates:
    """How the diffusion objective draws its documents' rates."""
    return diffusion.Rates(self.diffusion_rates, self.diffusion_min_rate)

  def _check_strategies_in_use(self) -> None:
    """The keys of the strategies this run uses (a key of one it does not use is ignored)."""
    used = self.in_use()
    if "static" in used:
      if self.dupe_factor < 1:
        raise ConfigError(f"masking.dupe_factor={self.dupe_factor} must be >= 1")
      typed_settings.one_of("masking.static_strategy", self.static_strategy,
                            STATIC_BASES)
    if "span" in used:
      if not 0.0 < self.span_p <= 1.0:
        raise ConfigError(f"masking.span_p={self.span_p} must be in (0, 1] (SpanBERT: 0.2)")
      if self.span_max_words < 1:
        raise ConfigError(f"masking.span_max_words={self.span_max_words} must be >= 1"
                          " (SpanBERT: 10)")
    if "frequency" in used and not (np.isfinite(self.frequency_alpha)
                                    and self.frequency_alpha >= 0):
      raise ConfigError(f"masking.frequency_alpha={self.frequency_alpha} must be >= 0 (0:"
                        " uniform, 1: inverse frequency)")
    for needs_counts, what in (("frequency" in used, "strategy 'frequency'"),
                               (self.replacement == "unigram", "replacement='unigram'")):
      if needs_counts and self.stats_max_documents == 0:
        raise ConfigError(f"masking.{what} needs token counts: set"
                          " masking.stats_max_documents > 0")
    if "entity" in used and not (self.entity_heuristic or self.entity_gazetteer
                                 or self.entity_ner):
      raise ConfigError("masking.strategy 'entity' needs masking.entity_ner=True,"
                        " masking.entity_heuristic=True or a masking.entity_gazetteer file (one"
                        " phrase per line)")
    if "entity" in used:
      syntax.parse_labels(self.entity_labels)
      if not 0.0 < self.entity_probability <= 1.0:
        raise ConfigError(f"masking.entity_probability={self.entity_probability} must be in"
                          " (0, 1] (1: entities first)")
    if "syntax" in used:
      typed_settings.one_of("masking.syntax_unit", self.syntax_unit, syntax.UNITS)
      syntax.parse_weights(self.syntax_weights)
      if self.phrase_max_words < 1:
        raise ConfigError(f"masking.phrase_max_words={self.phrase_max_words} must be >= 1")
    if used & set(NEEDS_COOCCURRENCE):
      if self.pmi_ngrams < 0 or self.pmi_min_count < 1:
        raise ConfigError(f"masking.pmi_ngrams={self.pmi_ngrams} must be >= 0 (0: sized by"
                          f" masking.pmi_coverage) and masking.pmi_min_count="
                          f"{self.pmi_min_count} >= 1")
      if not 0 < self.pmi_coverage <= 1:
        raise ConfigError(f"masking.pmi_coverage={self.pmi_coverage} must be in (0, 1]: the"
                          " share of words inside a kept n-gram")
      typed_settings.one_of("masking.pmi_score", self.pmi_score, pmi_vocabulary.SCORES)
      shares = self.pmi_length_shares
      if (len(shares) != 4 or min(shares) < 0
          or abs(sum(shares) - 1.0) > 1e-6):
        raise ConfigError(f"masking.pmi_length_shares={shares} must be 4 shares (of 2-, 3-, 4-"
                          " and 5-grams) >= 0 summing to 1")
      if self.stats_max_documents == 0:
        raise ConfigError("masking.strategy 'semantic' and 'contextual' count word"
                          " co-occurrences: set masking.stats_max_documents > 0")
    if "contextual" in used and self.contextual_candidates < 1:
      raise ConfigError(f"masking.contextual_candidates={self.contextual_candidates} must be"
                        " >= 1 (1: whole-word masking)")

  def annotates(self) -> bool:
    """Whether the input carries spaCy's word annotations (data/text/annotation.py)."""
    used = self.in_use()
    return bool(used & set(NEEDS_ANNOTATIONS)) or (
        "entity" in used and self.entity_ner)

  def annotator(self) -> annotation.Annotator | None:
    """The word annotator the input needs (None: none), with only the parts it needs."""
    if not self.annotates():
      return None
    return annotation.Annotator(self.nlp_pipeline, parse="syntax" in self.in_use(),
                                ner="entity" in self.in_use() and self.entity_ner)

  def counts_cooccurrence(self) -> bool:
    return bool(self.in_use() & set(NEEDS_COOCCURRENCE))

  def in_use(self) -> set[str]:
    """The strategy and, for mixture/static, the ones it draws on."""
    used = {self.strategy, *(n for n, _ in self.mixture_weights)}
    if "static" in used:
      used.add(self.static_strategy)
    return used
