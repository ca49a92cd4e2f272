"""Example construction: tokenized documents -> units (the sequences of a row), in RoBERTa's
taxonomy. rows.py packs units into rows and turns whole batches of them into arrays.

Every format starts from a document's tokenized sentences (see sentences.py). A *unit* is one
`[CLS] ... [SEP]` sequence or one `[CLS] A [SEP] B [SEP]` pair: the token arrays to concatenate
(specials included), its length, its token types (0 up to the end of A, then 1), its sequence
key (document and chunk: static masks follow it), its epoch key and its pair label.

  full_sentences   whole sentences, consecutive, up to seq_len - 2 tokens per `[CLS] ... [SEP]`
                   sequence (a longer sentence is cut); sequences of different documents are
                   first-fit packed into rows, document-masked (RoBERTa's FULL-SENTENCES
                   without its cross-document attention).
  doc_sentences    the same sequences, but never packed: one document's sequence per row, the
                   rest padding (RoBERTa's DOC-SENTENCES).
  segment_pair     BERT: `[CLS] A [SEP] B [SEP]`, A and B runs of whole sentences filling
                   seq_len - 3 tokens (10% of the time a shorter random target, as BERT);
                   `nsp_labels` 0 when B really follows A, 1 (half the time) when B comes
                   from another document, token types 0 for A, 1 for B.
  sentence_pair    the same with single sentences as A and B (RoBERTa's SENTENCE-PAIR + NSP).
  sop              ALBERT's sentence-order prediction: A and B are consecutive segments of one
                   document, swapped half the time (`nsp_labels` 1 = swapped).

All randomness (segment lengths, negatives, swaps) comes from a generator seeded with
(seed, document, epoch key), so a unit is a pure function of the data position: resumable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Callable, NamedTuple

import numpy as np

from mlmjax.data.text import annotation
from mlmjax.data.rows import packing
from mlmjax.models import special_ids

FORMATS = ("full_sentences", "doc_sentences", "segment_pair", "sentence_pair", "sop")
# Formats whose rows carry a sentence-pair label for the NSP/SOP head.
PAIR_FORMATS = ("segment_pair", "sentence_pair", "sop")
# BERT's create_pretraining_data: 10% of segment pairs aim at a shorter random length, so the
# model also sees short inputs.
SHORT_SEQ_PROB = 0.1


def has_pair_labels(data_format: str) -> bool:
  return data_format in PAIR_FORMATS


def packs(data_format: str) -> bool:
  """Whether rows hold several units (first-fit packing) or one each."""
  return data_format == "full_sentences"


@dataclasses.dataclass
class Document:
  """One occurrence of a document in the data stream, tokenized sentence by sentence."""

  index: int  # position in the split (stable identity)
  epoch_key: int  # the epoch, or the epoch modulo BERT's dupe factor for static masking
  sentences: list[np.ndarray]  # int32 ids per sentence, none empty


class Unit(NamedTuple):
  """One sequence (or pair) of a row; see the module docstring."""

  pieces: tuple[np.ndarray, ...]  # int32 arrays to concatenate, [CLS]/[SEP] included
  length: int
  type0: int  # the first type0 tokens have token type 0 (segment A), the rest 1
  key: int  # sequence key: (document << 32) + chunk + 1; 0 is padding
  epoch: int  # the document's epoch key
  label: int  # NSP/SOP label; -1 for single sequences


def _sequence_key(doc: int, chunk: int) -> int:
  return (doc << 32) + chunk + 1  # 0 is reserved for padding


def _chunk_parts(sentences: list[np.ndarray], max_tokens: int
                 ) -> list[tuple[list[np.ndarray], int]]:
  """Greedy runs of whole consecutive sentences of at most max_tokens tokens each, as (list of
  sentences, their length); a sentence longer than max_tokens is cut into max_tokens pieces."""
  chunks, current, length = [], [], 0
  for sentence in sentences:
    n = len(sentence)
    if n > max_tokens:
      for start in range(0, n, max_tokens):
        piece = sentence[start:start + max_tokens]
        if current and length + len(piece) > max_tokens:
          chunks.append((current, length))
          current, length = [], 0
        current.append(piece)
        length += len(piece)
      continue
    if current and length + n > max_tokens:
      chunks.append((current, length))
      current, length = [], 0
    current.append(sentence)
    length += n
  if current:
    chunks.append((current, length))
  return chunks


def chunk_sentences(sentences: list[np.ndarray], max_tokens: int) -> list[np.ndarray]:
  """Greedy runs of whole consecutive sentences of at most max_tokens tokens each; a sentence
  longer than max_tokens is cut into max_tokens pieces."""
  return [np.concatenate(parts) for parts, _ in _chunk_parts(sentences, max_tokens)]


def sequence_units(doc: Document, seq_len: int) -> list[Unit]:
  """The `[CLS] chunk [SEP]` sequences of a document (full_sentences, doc_sentences)."""
  key = doc.index << 32
  return [Unit((_cls(parts[0]), *parts, _sep(parts[0])), n + 2, n + 2, key + c + 1,
               doc.epoch_key, -1)
          for c, (parts, n) in enumerate(_chunk_parts(doc.sentences, seq_len - 2))]


def _cls(like: np.ndarray) -> np.ndarray:
  """[CLS] shaped like the sentence `like` (annotated sentences have feature columns)."""
  return annotation.special(special_ids.CLS_ID, like)


def _sep(like: np.ndarray) -> np.ndarray:
  return annotation.special(special_ids.SEP_ID, like)


def _truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """BERT's truncate_seq_pair: trim the longer side, from the front or back at random."""
  while len(a) + len(b) > max_tokens:
    if len(a) >= len(b):
      a = a[1:] if rng.random() < 0.5 else a[:-1]
    else:
      b = b[1:] if rng.random() < 0.5 else b[:-1]
  return a, b


class PairMaker:
  """Builds the segment_pair / sentence_pair / sop units of one document.

  `random_document(rng, not_index)` returns the tokenized sentences of another document (for
  NSP negatives); it is drawn from the same split, so eval negatives stay held out.
  `word_start` ([V] bool, vocab_stats) says which tokens begin a word: a sentence is only ever
  cut before one, so no example starts or ends inside a word (None: any token).
  """

  def __init__(self, data_format: str, seq_len: int, seed: int,
               random_document: Callable[[np.random.Generator, int], list[np.ndarray]],
               word_start: np.ndarray | None = None):
    self.format = data_format
    self.seq_len = seq_len
    self.seed = seed
    self.random_document = random_document
    self.word_start = word_start

  def _cut_points(self, sentence: np.ndarray) -> np.ndarray:
    """Where a sentence may be cut in two: before a word start, never at its ends."""
    inner = np.arange(1, len(sentence))
    if self.word_start is None:
      return inner
    return inner[self.word_start[annotation.ids_of(sentence)[1:]]]

  def __call__(self, doc: Document) -> list[Unit]:
    rng = np.random.default_rng([self.seed, doc.index, doc.epoch_key])
    if self.format == "sentence_pair":
      pairs = self._sentence_pairs(doc, rng)
    else:
      pairs = self._segment_pairs(doc, rng)
    units = []
    for n, (a, b, label) in enumerate(pairs):
      a, b = _truncate_pair(a, b, self.seq_len - 3, rng)
      if len(a) and len(b):
        units.append(Unit((_cls(a), a, _sep(a), b, _sep(a)), len(a) + len(b) + 3, len(a) + 2,
                          _sequence_key(doc.index, n), doc.epoch_key, label))
    return units

  def _random_b(self, doc: Document, rng, target: int) -> np.ndarray:
    """Whole sentences of another document, from a random start, up to `target` tokens."""
    other = self.random_document(rng, doc.index)
    start = int(rng.integers(len(other)))
    taken, length = [], 0
    for sentence in other[start:]:
      taken.append(sentence)
      length += len(sentence)
      if length >= target:
        break
    return np.concatenate(taken)

  def _segment_pairs(self, doc: Document, rng):
    """BERT's create_instances_from_document (and ALBERT's SOP variant).

    One departure from BERT, so that labels are exactly 50/50: a chunk of a single sentence
    is cut at a random word start into A and B (BERT always gave it a random B, which skews
    NSP towards "not next" on corpora of long sentences). Cutting inside a word would leak a
    label cue (a swapped SOP pair would start mid-word); a one-word sentence is not paired.
    """
    max_tokens = self.seq_len - 3
    target = max_tokens
    if rng.random() < SHORT_SEQ_PROB:
      target = int(rng.integers(2, max_tokens + 1))
    sentences = doc.sentences
    chunk, length, i = [], 0, 0
    while i < len(sentences):
      chunk.append(sentences[i])
      length += len(sentences[i])
      if i == len(sentences) - 1 or length >= target:
        was_cut = len(chunk) == 1
        if was_cut:
          cuts = self._cut_points(chunk[0])
          cut = int(cuts[rng.integers(len(cuts))]) if len(cuts) else 0
          chunk = [chunk[0][:cut], chunk[0][cut:]] if cut else []
        if len(chunk) >= 2:  # else one sentence of one word: nothing to pair
          a_end = int(rng.integers(1, len(chunk)))
          a, b = np.concatenate(chunk[:a_end]), np.concatenate(chunk[a_end:])
          if self.format == "sop":
            yield (b, a, 1) if rng.random() < 0.5 else (a, b, 0)
          elif rng.random() < 0.5:
            yield a, self._random_b(doc, rng, max(1, target - len(a))), 1
            if not was_cut:
              i -= len(chunk) - a_end  # BERT puts the unused sentences back for the next pair
          else:
            yield a, b, 0
        chunk, length = [], 0
      i += 1

  def _sentence_pairs(self, doc: Document, rng):
    """Sentences s and s + 1 (label 0), or s and a sentence of another document (label 1), for
    s = 0, 2, 4, ...; an odd last sentence (or a one-sentence document) is left out, so the
    labels stay exactly 50/50."""
    sentences = doc.sentences
    for s in range(0, len(sentences) - 1, 2):
      if rng.random() < 0.5:
        other = self.random_document(rng, doc.index)
        yield sentences[s], other[int(rng.integers(len(other)))], 1
      else:
        yield sentences[s], sentences[s + 1], 0


def unit_maker(data_format: str, seq_len: int, seed: int, random_document=None,
               word_start: np.ndarray | None = None) -> Callable[[Document], list[Unit]]:
  """Document -> its units in `data_format` (PairMaker's arguments for the pair formats)."""
  if data_format in PAIR_FORMATS:
    return PairMaker(data_format, seq_len, seed, random_document, word_start)
  return lambda doc: sequence_units(doc, seq_len)


def make_rows(docs: Iterable[Document], data_format: str, seq_len: int, seed: int,
              num_bins: int, random_document=None, sequence_keys: bool = False,
              word_start: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Documents -> rows (dicts of [seq_len] arrays, `nsp_labels` a scalar), one at a time, built
  as the pipeline builds them (rows.py; the pipeline keeps whole batches together, shard_walk.py).

  `num_bins`: rows filled at once by first-fit packing. `sequence_keys`: add `sequence_keys` and
  `epochs` (static masking needs them). `word_start`: see PairMaker. The rows still open when
  `docs` ends are emitted too.
  """
  make_units = unit_maker(data_format, seq_len, seed, random_document, word_start)
  packer = packing.Packer(num_bins, seq_len, packs(data_format))

  def emit():
    batch = packing.materialize(packer.take(), seq_len, sequence_keys=sequence_keys,
                                 pairs=has_pair_labels(data_format))
    for r in range(len(batch["input_ids"])):
      yield {k: v[r] for k, v in batch.items()}

  for doc in docs:
    for unit in make_units(doc):
      if not packer.add(unit):
        yield from emit()
        packer.add(unit)
  if packer.rows:
    yield from emit()
