"""The `config.masking` keys as the masker uses them: typed settings, the mixture spec, the
per-row prediction budget. The rules for their values are in mlmjax/training/config_check.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlmjax.errors import ConfigError

MIXTURE_EXAMPLE = "e.g. 'random=0.5,span=0.3,whole_word=0.2'"


def budget(num_maskable, mask_rate: float, max_predictions: int):
  """Tokens to mask in a row (or static sequence) with `num_maskable` maskable tokens:
  round-half-up(mask_rate * n), at least 1 (BERT), 0 for an empty row, at most
  max_predictions. The one formula of the masker and of the config check (which asks it about
  a full row)."""
  n = np.asarray(num_maskable)
  want = np.where(n > 0, np.maximum(1, np.floor(n * mask_rate + 0.5)), 0).astype(np.int64)
  return np.minimum(want, max_predictions), want


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


@dataclasses.dataclass(frozen=True)
class Settings:
  """The masking.* keys the masker reads, typed."""

  strategy: str
  mask_rate: float
  mask_token_prob: float
  random_token_prob: float
  max_predictions: int
  replacement: str
  span_p: float
  span_max_words: int
  entity_heuristic: bool
  frequency_alpha: float
  mixture: tuple[tuple[str, float], ...]
  dupe_factor: int
  static_strategy: str

  @classmethod
  def from_config(cls, c) -> "Settings":
    return cls(
        strategy=c.strategy, mask_rate=float(c.mask_rate),
        mask_token_prob=float(c.mask_token_prob), random_token_prob=float(c.random_token_prob),
        max_predictions=int(c.max_predictions_per_seq), replacement=c.replacement,
        span_p=float(c.span_p), span_max_words=int(c.span_max_words),
        entity_heuristic=bool(c.entity_heuristic), frequency_alpha=float(c.frequency_alpha),
        mixture=parse_mixture(c.mixture) if c.strategy == "mixture" else (),
        dupe_factor=int(c.dupe_factor), static_strategy=c.static_strategy)

  def in_use(self) -> set[str]:
    """The strategy and, for mixture/static, the ones it draws on."""
    used = {self.strategy, *(n for n, _ in self.mixture)}
    if "static" in used:
      used.add(self.static_strategy)
    return used
