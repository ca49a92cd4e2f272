"""What the word annotations (data/text/annotation.py: spaCy's words, POS, dependencies, noun
chunks, named entities) give the masker: syntactic units and their weights, and recognised entities.

`syntax` masking picks whole units in a weighted random order (Efraimidis-Spirakis keys, as
`frequency` does for tokens) while they fit the budget. A unit is, by `masking.syntax_unit`:

  word        a spaCy word (its pieces)
  noun_chunk  a noun chunk ("the burning bush") as one unit, every other word alone (ERNIE
              1.0's phrase-level masking, with a parser's chunks)
  subtree     a largest dependency subtree of at most `masking.phrase_max_words` words ("unto
              the LORD"), every word outside one alone

A unit's weight is the largest of its words', and a word's is the weight of its universal POS
times that of its dependency relation, from `masking.syntax_weights` ("NOUN=3,ROOT=2,...":
POS tags are upper case, relations lower case but ROOT; unlisted ones weigh 1; 0 = never;
configs/base.py has the default, which favours content words and the clause's core).
"""

from __future__ import annotations

import numpy as np

from mlmjax.data.text import annotation
from mlmjax.data.masking import units
from mlmjax.errors import ConfigError

UNITS = ("word", "noun_chunk", "subtree")


def parse_weights(spec: str) -> tuple[np.ndarray, np.ndarray]:
  """"NOUN=3,ROOT=2" -> (weight by POS code [1 + |UPOS|], weight by relation code [1 + |DEPS|])."""
  pos = np.ones(1 + len(annotation.UPOS))
  dep = np.ones(1 + len(annotation.DEPS))
  for item in (i.strip() for i in spec.split(",") if i.strip()):
    name, eq, value = item.partition("=")
    try:
      w = float(value) if eq else float("nan")
    except ValueError:
      w = float("nan")
    if not np.isfinite(w) or w < 0:
      raise ConfigError(f"masking.syntax_weights item {item!r} is not TAG=weight with a weight"
                        " >= 0, e.g. 'NOUN=3,VERB=2,ROOT=2'")
    if name in annotation.UPOS:
      pos[1 + annotation.UPOS.index(name)] = w
    elif name in annotation.DEPS:
      dep[1 + annotation.DEPS.index(name)] = w
    else:
      raise ConfigError(f"masking.syntax_weights: {name!r} is neither a universal POS tag"
                        f" ({', '.join(annotation.UPOS)}) nor a dependency relation")
  return pos, dep


def parse_labels(spec: str) -> np.ndarray:
  """"PERSON,GPE" -> [1 + 2 * |ENTITY_LABELS|] bool by entity code ("": every label)."""
  names = [n.strip() for n in spec.split(",") if n.strip()] or list(annotation.ENTITY_LABELS)
  wanted = np.zeros(1 + 2 * len(annotation.ENTITY_LABELS), bool)
  for name in names:
    if name not in annotation.ENTITY_LABELS:
      raise ConfigError(f"masking.entity_labels: {name!r} is not one of"
                        f" {', '.join(annotation.ENTITY_LABELS)}")
    label = annotation.ENTITY_LABELS.index(name)
    wanted[[1 + 2 * label, 2 + 2 * label]] = True
  return wanted


def _breaks(seg: np.ndarray, maskable: np.ndarray) -> np.ndarray:
  """[R, T]: maskable tokens after a non-maskable one or a packed-sequence boundary."""
  return maskable & (~units.shift_right(maskable, False) | (seg != units.shift_right(seg, -1)))


def word_starts(ann: np.ndarray, seg: np.ndarray, maskable: np.ndarray) -> np.ndarray:
  """[R, T] bool: the first maskable piece of each spaCy word (or of its part in a row)."""
  return maskable & ((ann[..., annotation.WORD] == 1) | _breaks(seg, maskable))


def _subtree_heads(ann, starts, seg, max_words: int) -> np.ndarray:
  """Unit heads of the `subtree` mode: the first column of each largest subtree of at most
  `max_words` words, and every word start outside one. A head outside the row or sequence
  counts as the root; extents are grown leaf to root, one level a pass."""
  num_rows, length = starts.shape
  flat = np.arange(num_rows * length).reshape(num_rows, length)
  col = np.arange(length)
  head = col + ann[..., annotation.HEAD]
  inside = (head >= 0) & (head < length)
  head = np.where(inside, head, col)
  r = np.arange(num_rows)[:, None]
  ok = starts & starts[r, head] & (seg[r, head] == seg) & (head != col)
  child, parent = flat[ok], (r * length + head)[ok]
  left, right = flat.reshape(-1).copy(), flat.reshape(-1).copy()
  for _ in range(length):
    new_left, new_right = left.copy(), right.copy()
    np.minimum.at(new_left, parent, left[child])
    np.maximum.at(new_right, parent, right[child])
    if np.array_equal(new_left, left) and np.array_equal(new_right, right):
      break
    left, right = new_left, new_right
  words_before = np.cumsum(starts.reshape(-1)) - starts.reshape(-1)  # word starts before
  size = words_before[right] - words_before[left] + 1  # words in [left, right]
  fits = starts.reshape(-1) & (size <= max_words)
  parent_of = np.full(num_rows * length, -1)
  parent_of[child] = parent
  largest = fits & ~((parent_of >= 0) & fits[np.maximum(parent_of, 0)])
  # Columns covered by a largest subtree: +1 at its first column, -1 after its last.
  edge = np.zeros(num_rows * length + 1, np.int64)
  np.add.at(edge, left[largest], 1)
  np.add.at(edge, _word_end(right[largest], starts, seg) + 1, -1)
  covered = (np.cumsum(edge)[:-1] > 0).reshape(num_rows, length)
  heads = np.zeros(num_rows * length, bool)
  heads[left[largest]] = True
  return heads.reshape(num_rows, length) | (starts & ~covered)


def _word_end(first: np.ndarray, starts: np.ndarray, seg: np.ndarray) -> np.ndarray:
  """Flat column of the last piece of the word starting at flat column `first`."""
  num_rows, length = starts.shape
  nxt = np.where(starts | (seg == 0), np.arange(length), length)
  nxt = np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1]  # next start at or after
  after = np.concatenate([nxt[:, 1:], np.full((num_rows, 1), length)], axis=1)
  rows, cols = np.divmod(first, length)
  return rows * length + after[rows, cols] - 1


def units_and_weights(ann, seg, maskable, unit: str, max_words: int, pos_weights, dep_weights
                      ) -> tuple[np.ndarray, np.ndarray]:
  """-> unit heads [R, T] bool, each unit's weight at its head column [R, T]."""
  starts = word_starts(ann, seg, maskable)
  if unit == "noun_chunk":  # a chunk's later words continue its unit
    heads = starts & ((ann[..., annotation.CHUNK] != 2) | _breaks(seg, maskable))
  elif unit == "subtree":
    heads = _subtree_heads(ann, starts, seg, max_words) & maskable
  else:
    heads = starts
  word_weight = pos_weights[ann[..., annotation.POS]] * dep_weights[ann[..., annotation.DEP]]
  head_col = units.head_cols(heads)
  weight = np.zeros(heads.shape)
  r, c = np.nonzero(starts & (head_col >= 0))
  np.maximum.at(weight, (r, head_col[r, c]), word_weight[r, c])
  return heads, weight


def bio_spans(codes, seg, maskable) -> tuple[np.ndarray, np.ndarray]:
  """BIO codes (annotation.py: odd begins, even continues, 0 outside) -> covered, linked [R, T]
  (as entities.entity_spans): the maskable pieces in a span, and those in the same span as
  their left neighbour (a span is cut by an unmaskable piece or a sequence boundary)."""
  covered = maskable & (codes > 0)
  inside = (codes > 0) & (codes % 2 == 0)
  linked = covered & inside & units.shift_right(covered, False) & ~_breaks(seg, maskable)
  return covered, linked


def ner_spans(ann, seg, maskable, wanted_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """-> covered, linked [R, T] (bio_spans) of the recognised entities with a wanted label."""
  code = ann[..., annotation.ENTITY]
  return bio_spans(np.where(wanted_codes[code], code, 0), seg, maskable)
