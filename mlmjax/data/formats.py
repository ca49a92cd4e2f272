"""Example construction: tokenized documents -> fixed-length rows, in RoBERTa's taxonomy.

Every format starts from a document's tokenized sentences (see sentences.py) and emits rows of
exactly seq_len tokens with `input_ids`, `token_type_ids`, `segment_ids` (1, 2, ... per packed
sequence, 0 on padding: the model's attention never crosses them), `positions` (restarting at
0 per sequence), and, for the masker, `sequence_keys` (the sequence's origin: document and
chunk) and `epochs`.

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
(seed, document, epoch key), so a row is a pure function of the data position: resumable.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import grain
import numpy as np

from mlmjax.data import tokenizer as tokenizer_lib

FORMATS = ("full_sentences", "doc_sentences", "segment_pair", "sentence_pair", "sop")
# Formats whose rows carry a sentence-pair label for the NSP/SOP head.
PAIR_FORMATS = ("segment_pair", "sentence_pair", "sop")
# BERT's create_pretraining_data: 10% of segment pairs aim at a shorter random length, so the
# model also sees short inputs.
SHORT_SEQ_PROB = 0.1


def has_pair_labels(data_format: str) -> bool:
  return data_format in PAIR_FORMATS


@dataclasses.dataclass
class Document:
  """One occurrence of a document in the data stream, tokenized sentence by sentence."""

  index: int  # position in the source (stable identity)
  epoch_key: int  # the epoch, or the epoch modulo BERT's dupe factor for static masking
  sentences: list[np.ndarray]  # int32 ids per sentence, none empty


def _sequence_key(doc: int, chunk: int) -> int:
  return (doc << 32) + chunk + 1  # 0 is reserved for padding


def _row(parts: list[np.ndarray], types: list[int], seq_len: int, key: int,
         epoch_key: int) -> dict[str, np.ndarray]:
  """Concatenates parts (with their token types) and pads to seq_len as one sequence."""
  ids = np.concatenate(parts).astype(np.int32)
  n = len(ids)
  out = {
      "input_ids": np.zeros(seq_len, np.int32),
      "token_type_ids": np.zeros(seq_len, np.int32),
      "segment_ids": np.zeros(seq_len, np.int32),
      "positions": np.zeros(seq_len, np.int32),
      "sequence_keys": np.zeros(seq_len, np.int64),
      "epochs": np.zeros(seq_len, np.int32),
  }
  out["input_ids"][:n] = ids
  out["token_type_ids"][:n] = np.concatenate(
      [np.full(len(p), t, np.int32) for p, t in zip(parts, types)])
  out["segment_ids"][:n] = 1
  out["positions"][:n] = np.arange(n)
  out["sequence_keys"][:n] = key
  out["epochs"][:n] = epoch_key
  return out


def chunk_sentences(sentences: list[np.ndarray], max_tokens: int) -> list[np.ndarray]:
  """Greedy runs of whole consecutive sentences of at most max_tokens tokens each; a sentence
  longer than max_tokens is cut into max_tokens pieces."""
  chunks, current, length = [], [], 0
  for sentence in sentences:
    for start in range(0, len(sentence), max_tokens):
      piece = sentence[start:start + max_tokens]
      if current and length + len(piece) > max_tokens:
        chunks.append(np.concatenate(current))
        current, length = [], 0
      current.append(piece)
      length += len(piece)
  if current:
    chunks.append(np.concatenate(current))
  return chunks


def _single_sequences(doc: Document, seq_len: int) -> list[dict[str, np.ndarray]]:
  cls, sep = np.array([tokenizer_lib.CLS_ID]), np.array([tokenizer_lib.SEP_ID])
  return [_row([cls, chunk, sep], [0, 0, 0], seq_len, _sequence_key(doc.index, c), doc.epoch_key)
          for c, chunk in enumerate(chunk_sentences(doc.sentences, seq_len - 2))]


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
  """Builds segment_pair / sentence_pair / sop rows of one document.

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
    return inner if self.word_start is None else inner[self.word_start[sentence[1:]]]

  def __call__(self, doc: Document) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng([self.seed, doc.index, doc.epoch_key])
    if self.format == "sentence_pair":
      pairs = self._sentence_pairs(doc, rng)
    else:
      pairs = self._segment_pairs(doc, rng)
    rows = []
    cls, sep = np.array([tokenizer_lib.CLS_ID]), np.array([tokenizer_lib.SEP_ID])
    for n, (a, b, label) in enumerate(pairs):
      a, b = _truncate_pair(a, b, self.seq_len - 3, rng)
      if len(a) and len(b):
        row = _row([cls, a, sep, b, sep], [0, 0, 0, 1, 1], self.seq_len,
                   _sequence_key(doc.index, n), doc.epoch_key)
        row["nsp_labels"] = np.int32(label)
        rows.append(row)
    return rows

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


class _FlatMap(grain.experimental.FlatMapTransform):
  """Document -> list of rows, for grain's FlatMapIterDataset."""

  # Only the MapDataset flavour of FlatMap needs a bound; ours runs on an IterDataset.
  max_fan_out = 1 << 30

  def __init__(self, fn: Callable[[Document], list[dict[str, np.ndarray]]]):
    self.fn = fn

  def flat_map(self, doc: Document) -> list[dict[str, np.ndarray]]:
    return self.fn(doc)


class _Packable:
  """A single-sequence row trimmed to its real tokens and to the features worth packing."""

  def __init__(self, features: tuple[str, ...]):
    self.features = features

  def __call__(self, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    n = int(row["segment_ids"].sum())
    return {k: row[k][:n] for k in self.features}


def _unpack(row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The packer's output -> our row layout (features left out of packing are all zeros)."""
  ids = row["input_ids"]
  return {
      "input_ids": ids,
      "token_type_ids": np.zeros_like(ids),
      "segment_ids": row["input_ids_segment_ids"].astype(np.int32),
      "positions": row["input_ids_positions"].astype(np.int32),
      "sequence_keys": row.get("sequence_keys", np.zeros(ids.shape, np.int64)),
      "epochs": row.get("epochs", np.zeros(ids.shape, np.int32)),
  }


def make_rows(docs: grain.IterDataset, data_format: str, seq_len: int, seed: int,
              num_bins: int, random_document=None, keep_origin: bool = False,
              word_start: np.ndarray | None = None) -> grain.IterDataset:
  """IterDataset of `Document`s -> IterDataset of rows (dicts of [seq_len] arrays).

  `keep_origin`: carry `sequence_keys`/`epochs` through packing (static masking needs them;
  packing fewer features is faster, so otherwise they are zeros). `word_start`: see PairMaker.
  """
  if data_format in PAIR_FORMATS:
    maker = PairMaker(data_format, seq_len, seed, random_document, word_start)
    return grain.experimental.FlatMapIterDataset(docs, _FlatMap(maker))
  single = grain.experimental.FlatMapIterDataset(
      docs, _FlatMap(functools.partial(_single_sequences, seq_len=seq_len)))
  if data_format == "doc_sentences":
    return single
  # Token types are all 0 here, so they are not packed.
  features = ("input_ids", "sequence_keys", "epochs") if keep_origin else ("input_ids",)
  packed = grain.experimental.FirstFitPackIterDataset(
      single.map(_Packable(features)), length_struct={k: seq_len for k in features},
      num_packing_bins=num_bins, seed=seed, shuffle_bins=True)
  return packed.map(_unpack)
