"""Counter-based random numbers: every random draw of masking is a hash of its coordinates.

Dynamic masks draw `uniform(seed, stream, step, example id, column)`, so an example's mask is a
pure function of (seed, step, global example index): independent of the batch it sits in, of
the process (or grain worker) that builds it, and of interruptions and resumes; and a fresh
mask every step (RoBERTa). Static masks draw `(seed, stream, sequence key, epoch % dupe_factor,
column)` instead, so a sequence gets the same mask wherever and whenever it is packed.
"""

from __future__ import annotations

import numpy as np

# splitmix64's constants.
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_STATIC_SALT = np.uint64(0x5A17C0DE00000000)

# Independent streams of one step (eval uses its own seed, see data/pipeline.py); new ones go at
# the end, so that the others' draws never change.
(SELECT, ACTION, REPLACEMENT, SPAN_LENGTH, SPAN_ANCHOR, MIXTURE, TRUNCATE, OVERLAP,
 ENTITY, DIFFUSION_RATE) = range(10)
CANDIDATES = 64  # contextual's candidate masks draw streams CANDIDATES, CANDIDATES + 1, ...


def mix64(x: np.ndarray) -> np.ndarray:
  """splitmix64's finaliser: a bijective, well-avalanched scramble of uint64 values."""
  x = (x ^ (x >> np.uint64(30))) * M1
  x = (x ^ (x >> np.uint64(27))) * M2
  return x ^ (x >> np.uint64(31))


def _to_unit(bits: np.ndarray) -> np.ndarray:
  """Top 53 bits -> the middle of their interval: strictly inside (0, 1), so log(u) and
  log1p(-u) are always finite."""
  return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def _columns(rows: np.ndarray, length: int) -> np.ndarray:
  cols = np.arange(length, dtype=np.uint64) * GOLDEN
  return _to_unit(mix64(rows[:, None] + cols[None, :]))


def uniform(seed: int, stream: int, step: int, example_ids: np.ndarray,
            length: int) -> np.ndarray:
  """[len(example_ids), length] float64 uniforms in (0, 1), a pure function of the arguments."""
  with np.errstate(over="ignore"):  # uint64 arithmetic wraps on purpose
    # + GOLDEN: the mixer maps 0 to 0, so all-zero inputs must not reach it unchanged.
    key = mix64(np.uint64(seed) * GOLDEN + np.uint64(stream) + GOLDEN)
    key = mix64(key ^ (np.uint64(step) * M1))
    return _columns(mix64(key ^ (np.asarray(example_ids).astype(np.uint64) * M2)), length)


def static_uniform(seed: int, stream: int, sequence_keys: np.ndarray, dupes: np.ndarray,
                   length: int) -> np.ndarray:
  """[R, length] uniforms of (seed, stream, sequence key, dupe index, column = position)."""
  with np.errstate(over="ignore"):
    key = mix64(np.uint64(seed) * GOLDEN + np.uint64(stream) + _STATIC_SALT)
    rows = mix64(key ^ (np.asarray(dupes).astype(np.uint64) * M1))
    return _columns(mix64(rows ^ (np.asarray(sequence_keys).astype(np.uint64) * M2)), length)


class Draws:
  """The uniforms of a set of rows: u(stream, n) -> [R, n]; column c is a pure function of c.

  Dynamic rows are keyed by (seed, step, example ids); static ones by (seed, sequence keys,
  dupe indices) and have no step.
  """

  def __init__(self, seed: int, step: int | None = None, example_ids=None, sequence_keys=None,
               dupes=None):
    self.seed, self.step, self.example_ids = seed, step, example_ids
    self.sequence_keys, self.dupes = sequence_keys, dupes

  def u(self, stream: int, n: int) -> np.ndarray:
    if self.sequence_keys is None:
      return uniform(self.seed, stream, self.step, self.example_ids, n)
    return static_uniform(self.seed, stream, self.sequence_keys, self.dupes, n)
