"""Weighted mixtures of sources: `data.sources = "0.7:wiki/*.jsonl.gz; 0.3:books/*.txt"`.

Each entry is WEIGHT:SOURCE, SOURCE anything `data.source` takes; either every entry is raw
text (one tokenizer is trained on, or given for, the whole mixture) or every entry is prepared
data made with the same tokenizer. Each source keeps its own held-out split.

A mixture is one virtual sequence of documents, so everything downstream (data shards, the
shuffled order of every epoch, packing, the checkpointed position) works on it unchanged and a
resumed run continues exactly. Weights become integer quanta q_k (per mille of the total,
reduced by their common divisor); the sequence is periods of P = sum(q_k) documents, the first
q_0 of each period from source 0, the next q_1 from source 1, ... (the per-epoch shuffle
spreads them). Source k is read in order and
wraps around (a small source with a large weight is repeated: upsampled; a large one with a
small weight is seen in part per epoch). An epoch has as many periods as the source that needs
the most takes to be read once. Nothing is stored per document: document j is found by
arithmetic, O(log K).

Per phase (`data.sources_phase_weights`, e.g. "0.5,0.5; 0.2,0.8" for two train.phases): each
phase re-weights the same sources, as mmBERT anneals its language mix in the decay phase; a
phase's input starts a fresh stream anyway (phases.py).
"""

from __future__ import annotations

import bisect
import math
import re

from mlmjax.errors import ConfigError

_QUANTA = 1000  # weights are kept to this resolution
_ENTRY = re.compile(r"\s*(?P<weight>[0-9.eE+-]+)\s*:\s*(?P<source>\S.*?)\s*")


def parse(spec: str) -> list[tuple[float, str]]:
  """`data.sources` -> [(weight, source)]; a ConfigError names what is wrong."""
  entries = []
  for part in spec.split(";"):
    if not part.strip():
      continue
    match = _ENTRY.fullmatch(part)
    try:
      weight = float(match["weight"]) if match else -1.0
    except ValueError:
      weight = -1.0
    if not match or not math.isfinite(weight) or weight < 0:
      raise ConfigError(f"data.sources: {part.strip()!r} is not WEIGHT:SOURCE with a weight"
                        " >= 0 (entries separated by ';', e.g. '0.7:wiki/*.jsonl.gz;"
                        " 0.3:books/*.txt')")
    entries.append((weight, match["source"]))
  if len(entries) < 1 or sum(w for w, _ in entries) <= 0:
    raise ConfigError(f"data.sources={spec!r}: needs at least one source with a weight > 0")
  return entries


def phase_weights(data_config, phase: int) -> list[float]:
  """The weights of phase `phase`: its group of `data.sources_phase_weights`, else
  `data.sources`' own."""
  base = [w for w, _ in parse(data_config.sources)]
  groups = [g for g in data_config.sources_phase_weights.split(";") if g.strip()]
  if not groups:
    return base
  if phase >= len(groups):
    raise ConfigError(f"data.sources_phase_weights has {len(groups)} groups; phase {phase} has"
                      " none (give one group per train.phases entry)")
  try:
    weights = [float(x) for x in groups[phase].split(",")]
  except ValueError:
    weights = []
  if len(weights) != len(base) or min(weights) < 0 or sum(weights) <= 0:
    raise ConfigError(f"data.sources_phase_weights group {phase} ({groups[phase].strip()!r})"
                      f" must be {len(base)} comma-separated weights >= 0, not all 0")
  return weights


def quanta(weights: list[float]) -> list[int]:
  """Integer shares of a period, per mille of the total, reduced by their common divisor."""
  total = sum(weights)
  q = [max(1, round(_QUANTA * w / total)) if w > 0 else 0 for w in weights]
  g = math.gcd(*q)
  return [x // g for x in q]


class Mixture:
  """The virtual sequence of documents (module docstring): len, [i] (text, for raw sources),
  sentences(i) (tokens, for prepared ones), a stable repr."""

  def __init__(self, name: str, parts: list, weights: list[float]):
    self.name, self.parts, self.weights = name, list(parts), list(weights)
    self._q = quanta(self.weights)
    self._cum = [0]
    for q in self._q:
      self._cum.append(self._cum[-1] + q)
    self._period = self._cum[-1]
    for part, q in zip(self.parts, self._q):
      if q and not len(part):
        raise ConfigError(f"data.sources: {part!r} has no documents")
    periods = max(math.ceil(len(p) / q) for p, q in zip(self.parts, self._q) if q)
    self._len = periods * self._period

  def reweighted(self, weights: list[float]) -> "Mixture":
    return type(self)(self.name, self.parts, weights)

  def locate(self, j: int) -> tuple[int, int]:
    """Document j -> (source k, its document index)."""
    if not 0 <= j < self._len:
      raise IndexError(f"document {j} of {self._len}")
    period, r = divmod(j, self._period)
    k = bisect.bisect_right(self._cum, r) - 1
    return k, (period * self._q[k] + r - self._cum[k]) % len(self.parts[k])

  def __len__(self) -> int:
    return self._len

  def __getitem__(self, j):
    if isinstance(j, slice):
      return [self[i] for i in range(*j.indices(self._len))]
    k, i = self.locate(j if j >= 0 else j + self._len)
    return self.parts[k][i]

  def __iter__(self):
    return (self[j] for j in range(self._len))

  def __repr__(self) -> str:  # in messages and checkpoints' checks: stable
    weights = ", ".join(f"{q / self._period:.3g}" for q in self._q)
    return f"Mixture({self.name!r}, weights [{weights}], {self._len} documents)"


class PreparedMixture(Mixture):
  """A mixture of prepared splits: documents as tokens (documents.py's `sentences`)."""

  def sentences(self, j: int):
    k, i = self.locate(j)
    return self.parts[k].sentences(i)

  @property
  def annotated(self) -> bool:
    return all(p.annotated for p in self.parts)
