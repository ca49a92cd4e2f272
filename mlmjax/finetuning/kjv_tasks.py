"""Offline fine-tuning tasks made from the built-in corpus (the King James Bible), so a user can
see what pretraining bought without downloading anything.

  kjv_testament   one verse -> Old (0) or New (1) Testament; both classes equally often (every
                  New Testament verse of the split and as many Old Testament ones, drawn).
  kjv_next_verse  two verses -> 1 if B is the verse right after A in the same chapter, 0 if B
                  is a verse drawn from another chapter of the same split; half each.
  kjv_corrupted   one verse -> 0 as written, 1 with 15% of its words (at least one) replaced
                  by words drawn from the split's text (so by their frequency; punctuation and
                  capitalisation kept); half each. Telling them apart takes knowing what fits a context:
                  exactly what masked-language-model pretraining learns.

The split is by chapter: dev takes the chapters that pretraining on the built-in corpus holds
out with the default `data.eval_every_nth_document` (every 50th, by the same rule, in
sources.TextSource), so a model pretrained on the corpus never trained on a dev chapter; train
takes all the others, less the examples with a verse that occurs word for word in a dev chapter
too (the KJV repeats some, e.g. "And the LORD spake unto Moses, saying,"). Draws use a fixed
seed, never the fine-tuning seed: every run, pretrained or not, sees the same examples.
"""

from __future__ import annotations

import re

import numpy as np

from mlmjax.data import sources
from mlmjax.finetuning.examples import Examples

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
