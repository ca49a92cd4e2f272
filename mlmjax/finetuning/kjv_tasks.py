"""Offline fine-tuning tasks made from the built-in corpus (the King James Bible), so a user can
see what pretraining bought without downloading anything.

  kjv_testament   one verse -> Old (0) or New (1) Testament; both classes equally often (every
                  New Testament verse of the split and as many Old Testament ones, drawn).
  kjv_next_verse  two verses -> 1 if B is the verse right after A in the same chapter, 0 if B
                  is a verse drawn from another chapter of the same split; half each.
  kjv_corrupted   one verse -> 0 as written, 1 with 15% of its words (at least one) replaced
                  by words drawn from the split's text (so by their frequency; punctuation and
                  capitalisation kept); half each. Telling them apart takes knowing what fits
                  a context: exactly what masked-language-model pretraining learns.
  kjv_entities    token classification: one verse's words (split at spaces, punctuation kept)
                  -> B-NAME / I-NAME / O, a name being a word of `names_gazetteer` (a run of
                  them, e.g. "Simon Peter", is one name; a possessive "Pharaoh's" is the name
                  "Pharaoh"); every verse of the split with a name and as many without, drawn.
  kjv_qa          extractive QA in SQuAD 2.0 style: the context is a window of 4 consecutive
                  verses of a chapter (the chapter's last, shorter window too if it has 2 or
                  more), the question a verse of it with one name replaced by "[?]", the answer
                  that name in the context. A third of the questions (drawn) come instead from a
                  verse of another chapter of the split whose replaced name is not in the
                  context: no answer. One question per window that has a verse with a name.
  kjv_continuation  4-way multiple choice: a verse -> which option is the next verse of its
                  chapter; the 3 others are verses drawn from other chapters of the split.
  kjv_retrieval   sentence embeddings: (a verse, the next verse of its chapter), verses 1-2,
                  3-4, ... of each chapter, so no verse is both an anchor and a positive; dev is
                  scored as retrieving each anchor's positive among all dev positives, so no
                  text occurs twice in a split (later pairs dropped).

The split is by chapter: dev takes the chapters that pretraining on the built-in corpus holds
out with the default `data.eval_every_nth_document` (every 50th, by the same rule, in
sources.TextSource), so a model pretrained on the corpus never trained on a dev chapter; train
takes all the others, less the examples with a verse that occurs word for word in a dev chapter
too (the KJV repeats some, e.g. "And the LORD spake unto Moses, saying,"; an example of several
verses goes if any of them does). Draws use a fixed seed, never the fine-tuning seed: every run,
pretrained or not, sees the same examples.
"""

from __future__ import annotations

import collections
import functools
import re

import numpy as np

from mlmjax.data.corpora import sources
from mlmjax.finetuning.examples import Examples
from mlmjax.finetuning.records import ChoiceExamples
from mlmjax.finetuning.records import PairExamples
from mlmjax.finetuning.records import QAExamples
from mlmjax.finetuning.records import TaggedExamples

# The pretraining default (configs/base.py, data.eval_every_nth_document).
PRETRAINING_EVAL_EVERY = 50
_FIRST_NEW_TESTAMENT_BOOK = "Matthew"
_SEED = 1611  # the KJV's year; fixed so the task never changes


def _chapter_splits() -> tuple[list[list[dict]], list[list[dict]], set[str]]:
  """(train, dev) lists of chapters, each a list of verse records in order, and the texts of
  the dev verses."""
  chapters: dict[tuple[str, int], list[dict]] = {}
  for verse in sources.builtin_verses():
    chapters.setdefault((verse["book"], verse["chapter"]), []).append(verse)
  ordered = list(chapters.values())
  train, dev = (list(sources.TextSource("kjv", ordered, PRETRAINING_EVAL_EVERY, held_out))
                for held_out in (False, True))
  return train, dev, {v["text"] for chapter in dev for v in chapter}


def testament() -> tuple[Examples, Examples, list[str]]:
  train, dev, dev_texts = _chapter_splits()
  books = list(dict.fromkeys(v["book"] for chapter in train + dev for v in chapter))
  new_testament = set(books[books.index(_FIRST_NEW_TESTAMENT_BOOK):])
  rng = np.random.default_rng(_SEED)

  def balanced(chapters, exclude):
    verses = [v for chapter in chapters for v in chapter if v["text"] not in exclude]
    new = [v["text"] for v in verses if v["book"] in new_testament]
    old = [v["text"] for v in verses if v["book"] not in new_testament]
    old = [old[i] for i in np.sort(rng.choice(len(old), len(new), replace=False))]
    return Examples([(t,) for t in old + new],
                    np.asarray([0] * len(old) + [1] * len(new), np.int32))
  return balanced(train, dev_texts), balanced(dev, ()), ["Old Testament", "New Testament"]


def next_verse() -> tuple[Examples, Examples, list[str]]:
  rng = np.random.default_rng(_SEED)

  def pairs(chapters, exclude):
    texts, labels = [], []
    for c, chapter in enumerate(chapters):
      for i in range(len(chapter) - 1):
        if rng.random() < 0.5:
          b, label = chapter[i + 1], 1
        else:  # a verse of another chapter of the same split
          other = int(rng.integers(len(chapters) - 1))
          other_chapter = chapters[other + (other >= c)]
          b, label = other_chapter[int(rng.integers(len(other_chapter)))], 0
        if chapter[i]["text"] not in exclude and b["text"] not in exclude:
          texts.append((chapter[i]["text"], b["text"]))
          labels.append(label)
    return Examples(texts, np.asarray(labels, np.int32))
  train, dev, dev_texts = _chapter_splits()
  return pairs(train, dev_texts), pairs(dev, ()), ["not next", "next"]


_WORD = re.compile(r"^(\W*)(\w+)(\W*)$")  # punctuation around a word stays in place
_CORRUPT_RATE = 0.15


def word_pools(texts) -> dict[bool, list[str]]:
  """The words of `texts` (punctuation stripped), capitalised and lower-case apart, each as
  often as it occurs: drawing from a pool draws by frequency."""
  pools = {True: [], False: []}
  for m in (m for text in texts for m in map(_WORD.match, text.split()) if m):
    pools[m[2][0].isupper()].append(m[2])
  return pools


def corrupt(text: str, pools: dict[bool, list[str]], rng: np.random.Generator) -> str:
  """`text` with 15% of its words (at least one) replaced by words drawn from `pools`, each
  keeping its punctuation and case (a lower-case word starting a verse would give it away)."""
  words = text.split()
  replaceable = [i for i, w in enumerate(words) if _WORD.match(w)]
  k = min(len(replaceable), max(1, round(_CORRUPT_RATE * len(replaceable))))
  for i in rng.choice(replaceable, k, replace=False):
    before, word, after = _WORD.match(words[i]).groups()
    pool = pools[word[0].isupper()]
    words[i] = before + pool[int(rng.integers(len(pool)))] + after
  return " ".join(words)


def corrupted() -> tuple[Examples, Examples, list[str]]:
  rng = np.random.default_rng(_SEED)

  def examples(chapters, exclude):
    verses = [v["text"] for chapter in chapters for v in chapter if v["text"] not in exclude]
    pools = word_pools(verses)
    labels = (rng.random(len(verses)) < 0.5).astype(np.int32)
    texts = [(corrupt(text, pools, rng) if label else text,)
             for text, label in zip(verses, labels)]
    return Examples(texts, labels)
  train, dev, dev_texts = _chapter_splits()
  return examples(train, dev_texts), examples(dev, ()), ["as written", "corrupted"]


# Names, for the tasks below, are found in the text itself: the KJV capitalises names and
# little else but the first word of a sentence.
_NAME_MIN_COUNT = 3
# Lower-case occurrences a name may have, as a share of its capitalised ones: the text has a
# typo or two ("O israel", Hosea 14:1) that would otherwise cost the corpus's second most
# common name. "God" (58 "god" to 4,085) and "Amen" (1 "amen" to 77) stay out.
_NAME_MAX_LOWER_SHARE = 0.01
_SENTENCE_END = tuple(".!?:;")
_POSSESSIVE = re.compile(r"^(\W*)(\w+)'s(\W*)$")  # "Pharaoh's": _WORD takes no apostrophe


def names_gazetteer(verses=None) -> frozenset[str]:
  """The proper names of `verses` (texts or verse records; None: the built-in corpus, computed
  once): words (punctuation stripped, as in `word_pools`) that start with a capital, occur at
  least 3 times, never in lower case (`word.lower()`; but for typos, under 1% as often), and
  at least once where a capital says nothing, neither starting a verse nor after . ! ? : ;
  (so not "And", "The"). "I", "O" and words in capitals ("LORD") are not names."""
  if verses is None:
    return _builtin_gazetteer()
  counts = collections.Counter()
  mid_sentence = set()
  for verse in verses:
    previous = None
    for word in (verse if isinstance(verse, str) else verse["text"]).split():
      m = _WORD.match(word)
      if m:
        counts[m[2]] += 1
        if previous is not None and not previous.endswith(_SENTENCE_END):
          mid_sentence.add(m[2])
      previous = word
  return frozenset(
      w for w, n in counts.items()
      if w[0].isupper() and not w.isupper() and w not in ("I", "O") and n >= _NAME_MIN_COUNT
      and counts[w.lower()] < _NAME_MAX_LOWER_SHARE * n and w in mid_sentence)


@functools.lru_cache(maxsize=1)
def _builtin_gazetteer() -> frozenset[str]:
  return names_gazetteer(sources.builtin_verses())


def _name_runs(text: str, names) -> list[tuple[int, int, int, int]]:
  """The names in `text` as (first word, last word + 1, start, end): indices into
  `text.split()` and the name's characters in `text`. Name words with only a space between
  them ("Simon Peter") are one name; punctuation ends one ("Moses, Aaron"), and a possessive
  starts one: "Michal Saul's daughter" is two (so is "Simon Peter's", more rarely)."""
  runs = []
  joinable = False  # the previous word is a name with nothing after it
  for i, m in enumerate(re.finditer(r"\S+", text)):
    word = _WORD.match(m[0])
    core = word or _POSSESSIVE.match(m[0])
    if core is None or core[2] not in names:
      joinable = False
      continue
    start, end = m.start() + core.start(2), m.start() + core.end(2)
    if joinable and word and not word[1]:
      runs[-1] = (runs[-1][0], i + 1, runs[-1][2], end)
    else:
      runs.append((i, i + 1, start, end))
    joinable = end == m.end()
  return runs


ENTITY_TAGS = ["O", "B-NAME", "I-NAME"]


def entities() -> tuple[TaggedExamples, TaggedExamples, list[str]]:
  names = names_gazetteer()
  rng = np.random.default_rng(_SEED)

  def examples(chapters, exclude):
    verses = [v["text"] for chapter in chapters for v in chapter if v["text"] not in exclude]
    runs = [_name_runs(text, names) for text in verses]
    named = [i for i, r in enumerate(runs) if r]
    unnamed = [i for i, r in enumerate(runs) if not r]
    drawn = rng.choice(unnamed, min(len(named), len(unnamed)), replace=False)
    out = TaggedExamples([], [])
    for i in np.sort(np.concatenate([np.asarray(named, np.int64), drawn.astype(np.int64)])):
      words = verses[i].split()
      tags = ["O"] * len(words)
      for first, last, _, _ in runs[i]:
        tags[first:last] = ["B-NAME"] + ["I-NAME"] * (last - first - 1)
      out.words.append(words)
      out.tags.append(tags)
    return out
  train, dev, dev_texts = _chapter_splits()
  return examples(train, dev_texts), examples(dev, ()), list(ENTITY_TAGS)


_QA_WINDOW = 4  # verses per context
_QA_MIN_WINDOW = 2  # a chapter's last, shorter window needs this many
_UNANSWERABLE = 1 / 3
QA_BLANK = "[?]"  # stands for the name a question asks for


def qa() -> tuple[QAExamples, QAExamples, list[str]]:
  names = names_gazetteer()
  rng = np.random.default_rng(_SEED)

  def examples(chapters, exclude):
    runs = [[_name_runs(v["text"], names) for v in chapter] for chapter in chapters]
    named = [(c, i) for c, chapter_runs in enumerate(runs)
             for i, verse_runs in enumerate(chapter_runs) if verse_runs]
    out = QAExamples([], [], [], [])
    for c, chapter in enumerate(chapters):
      for first in range(0, len(chapter), _QA_WINDOW):
        window = chapter[first:first + _QA_WINDOW]
        candidates = [i for i in range(first, first + len(window)) if runs[c][i]]
        if len(window) < _QA_MIN_WINDOW or not candidates:
          continue
        texts = [v["text"] for v in window]
        context = " ".join(texts)
        if rng.random() < _UNANSWERABLE:
          # A verse of another chapter, asking for a name the context does not have (so not
          # one of its verses either): no answer.
          for _ in range(100):
            source, i = named[int(rng.integers(len(named)))]
            verse = chapters[source][i]["text"]
            fits = [r for r in runs[source][i] if not re.search(
                rf"\b{re.escape(verse[r[2]:r[3]])}\b", context)]
            if source != c and fits:
              break
          else:  # a split whose every name is in this context: none to ask
            continue
          run = fits[int(rng.integers(len(fits)))]
          answers = []
        else:
          i = candidates[int(rng.integers(len(candidates)))]
          verse = chapter[i]["text"]
          run = runs[c][i][int(rng.integers(len(runs[c][i])))]
          offset = sum(len(t) + 1 for t in texts[:i - first]) + run[2]
          answers = [(verse[run[2]:run[3]], offset)]
        if verse in exclude or any(t in exclude for t in texts):
          continue
        out.ids.append(f"{window[0]['book']} {window[0]['chapter']}:{window[0]['verse']}"
                       f"-{window[-1]['verse']}")  # one question per window
        out.questions.append(verse[:run[2]] + QA_BLANK + verse[run[3]:])
        out.contexts.append(context)
        out.answers.append(answers)
    return out
  train, dev, dev_texts = _chapter_splits()
  return examples(train, dev_texts), examples(dev, ()), []


_CHOICES = 4


def continuation() -> tuple[ChoiceExamples, ChoiceExamples, list[str]]:
  rng = np.random.default_rng(_SEED)

  def examples(chapters, exclude):
    pool = [(c, v["text"]) for c, chapter in enumerate(chapters) for v in chapter
            if v["text"] not in exclude]
    contexts, options, labels = [], [], []
    for c, chapter in enumerate(chapters):
      for i in range(len(chapter) - 1):
        verse, following = chapter[i]["text"], chapter[i + 1]["text"]
        if verse in exclude or following in exclude:
          continue
        choices = [following]
        while len(choices) < _CHOICES:  # distinct texts, none the context (the KJV repeats)
          other, text = pool[int(rng.integers(len(pool)))]
          if other != c and text != verse and text not in choices:
            choices.append(text)
        order = rng.permutation(_CHOICES)
        contexts.append(verse)
        options.append([choices[k] for k in order])
        labels.append(int(np.flatnonzero(order == 0)[0]))
    return ChoiceExamples(contexts, options, np.asarray(labels, np.int32))
  train, dev, dev_texts = _chapter_splits()
  return examples(train, dev_texts), examples(dev, ()), []


def retrieval() -> tuple[PairExamples, PairExamples, list[str]]:
  def pairs(chapters, exclude):
    out = PairExamples([], [])
    seen = set()
    for chapter in chapters:
      # Verses 1-2, 3-4, ...: a verse is never both an anchor and a positive, else retrieving
      # an anchor would find its own text among the positives (and a training batch would ask
      # a text to be unlike itself).
      for a, b in zip(chapter[0::2], chapter[1::2]):
        a, b = a["text"], b["text"]
        if a in exclude or b in exclude or a in seen or b in seen or a == b:
          continue
        out.anchors.append(a)
        out.positives.append(b)
        seen.update((a, b))
    return out
  train, dev, dev_texts = _chapter_splits()
  # Dev retrieves each anchor's positive among all dev positives: no text occurs twice, so each
  # anchor has exactly one right answer (train keeps the same rule).
  return pairs(train, dev_texts), pairs(dev, ()), []
