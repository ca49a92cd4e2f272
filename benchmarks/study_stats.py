"""The statistics the seed studies share (strategies.py, diffusion.py): a column's mean ± sample
standard deviation, Welch's test between two arms, Holm's correction across a table's tests,
and the power of a paired t-test with the smallest difference it finds."""

from __future__ import annotations

import math
import statistics

import numpy as np
from scipy import optimize
from scipy import stats

POWER = 0.8  # the chance a real difference is found, for the detectable difference


def mean_sd(values: list[float], digits: int = 1) -> str:
  """'mean ± sd' over the seeds; one seed alone (it has no spread to show); '-' for none."""
  if not values:
    return "-"
  if len(values) == 1:
    return f"{values[0]:.{digits}f}"
  return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def welch_p(a: list[float], b: list[float]) -> float:
  """The two-sided p of Welch's t-test (arms that share no seed-by-seed pairing); nan below 2
  values on a side."""
  if len(a) < 2 or len(b) < 2:
    return float("nan")
  return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def holm(ps: list[float]) -> list[float]:
  """Holm's step-down adjusted p-values (Holm 1979): the i-th smallest of m times (m - i),
  never below an earlier one, at most 1. Tests without a p (nan) are not counted in m."""
  tested = sorted((p, i) for i, p in enumerate(ps) if p == p)
  adjusted, running = [float("nan")] * len(ps), 0.0
  for rank, (p, i) in enumerate(tested):
    running = max(running, min(1.0, (len(tested) - rank) * p))
    adjusted[i] = running
  return adjusted


def power(effect_sds: float, seeds: int, level: float) -> float:
  """The power of a two-sided paired t-test over `seeds` pairs at `level` to find a true mean
  difference of `effect_sds` standard deviations of the differences: the noncentral t's mass
  beyond the critical values (noncentrality effect_sds x sqrt(seeds))."""
  df, noncentrality = seeds - 1, effect_sds * math.sqrt(seeds)
  critical = stats.t.ppf(1 - level / 2, df)
  below = stats.nct.cdf(-critical, df, noncentrality)  # nan where it underflows: nothing
  return float(stats.nct.sf(critical, df, noncentrality) + np.nan_to_num(below))


def detectable_sds(seeds: int, level: float) -> float:
  """The smallest mean difference, in standard deviations of the differences, that a paired
  t-test over `seeds` pairs at `level` finds with power POWER."""
  return optimize.brentq(lambda e: power(e, seeds, level) - POWER, 1e-6, 100.0)
