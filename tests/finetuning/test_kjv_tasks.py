"""The offline tasks kjv_tasks.py builds for each fine-tuning kind (token classification,
extractive QA, multiple choice, retrieval): their sizes, that dev is only the chapters
pretraining holds out and train shares no verse with them, that they never change, and what
each kind's examples must be.

Run as a script (`python test_kjv_tasks.py TASK...`), this file prints a digest of each task
built in that order: how the tests compare builds made in other processes."""

import collections
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from mlmjax.data.corpora import sources
from mlmjax.finetuning import kjv_tasks
from mlmjax.finetuning import records

TASKS = ("entities", "qa", "continuation", "retrieval")  # test_tasks.py has the others


def _digest(task: tuple[records.Records, records.Records, list[str]]) -> str:
  """sha256 of a built task's (train, dev, label names): every field of every example, arrays
  with their dtype, in order."""
  def plain(r: records.Records):
    return [type(r).__name__] + [
        [str(v.dtype), v.tolist()] if isinstance(v, np.ndarray) else v
        for v in (getattr(r, f.name) for f in dataclasses.fields(r))]
  train, dev, names = task
  text = json.dumps([plain(train), plain(dev), names], ensure_ascii=False)
  return hashlib.sha256(text.encode()).hexdigest()


def _digests(order) -> list[list[str]]:
  """[[task, digest]] of each task built in `order` (a task may come twice)."""
  return [[name, _digest(getattr(kjv_tasks, name)())] for name in order]


@pytest.fixture(scope="module")
def corpus():
  """Verse texts of the chapters pretraining trains on and holds out, their consecutive pairs,
  and each chapter's verses by its name ("Genesis 1")."""
  splits = sources.load_splits("builtin", kjv_tasks.PRETRAINING_EVAL_EVERY)
  trained, held_out = ([doc.split("\n") for doc in split] for split in splits)
  chapters = collections.defaultdict(list)
  for v in sources.builtin_verses():
    chapters[f"{v['book']} {v['chapter']}"].append(v["text"])
  return types.SimpleNamespace(
      trained={v for c in trained for v in c}, held_out={v for c in held_out for v in c},
      trained_pairs={p for c in trained for p in zip(c, c[1:])},
      held_out_pairs={p for c in held_out for p in zip(c, c[1:])}, chapters=chapters)


@pytest.fixture(scope="module")
def built():
  """The tasks built here, and the digests of the same tasks built in two other processes,
  started first so that they build while this one does: PYTHONHASHSEED=1 in TASKS' order,
  PYTHONHASHSEED=2 backwards and then forwards again (each task's second build in the same
  process)."""
  others = {
      seed: subprocess.Popen(
          [sys.executable, os.path.abspath(__file__), *order],
          env={**os.environ, "PYTHONHASHSEED": seed}, stdout=subprocess.PIPE,
          stderr=subprocess.PIPE, text=True)
      for seed, order in (("1", TASKS), ("2", TASKS[::-1] + TASKS))}
  try:
    kjv_tasks.names_gazetteer()  # computed once; not part of any one task's time
    here = {}
    for name in TASKS:
      start = time.perf_counter()
      here[name] = getattr(kjv_tasks, name)()
      seconds = time.perf_counter() - start
      print(f"{name}: train {len(here[name][0])}, dev {len(here[name][1])}, {seconds:.2f} s")
    yield types.SimpleNamespace(here=here, others=others)
  finally:  # a test that did not wait for them (e.g. run alone)
    for process in others.values():
      if process.poll() is None:
        process.kill()
        process.communicate()


def test_names_gazetteer_finds_the_names_in_the_text():
  names = kjv_tasks.names_gazetteer()
  assert kjv_tasks.names_gazetteer() is names  # computed once
  assert 1000 < len(names) < 2000
  assert {"Moses", "Jerusalem", "Egypt", "Jesus", "Simon", "Peter", "Pharaoh"} <= names
  # Hosea 14:1 writes "O israel": a typo does not make Israel a common word.
  assert "Israel" in names
  # Sentence-initial words, I and O, words in capitals, words also written in lower case.
  assert not {"And", "The", "Then", "LORD", "I", "O", "God", "Amen", "Lord", "Spirit"} & names
  verses = ["Abner came and saw Abner", "Then Abner went. Gath saw; Gath wept", "Gath. Dan!",
            "so Dan came, and Dan and Gog saw Seir; seir.", "and Gog saw Gog; for I AM Seir",
            "I AM saw I AM Seir", "Tola saw Tola"]
  # Abner, Dan, Gog: 3 times, some mid-sentence; Gath: 3, never mid-sentence; Seir: 3 but
  # also "seir"; Tola: twice; I, AM: capitals.
  assert kjv_tasks.names_gazetteer(verses) == {"Abner", "Dan", "Gog"}
  assert kjv_tasks.names_gazetteer([{"text": v} for v in verses]) == {"Abner", "Dan", "Gog"}


def test_entities(built, corpus):
  train, dev, tags = built.here["entities"]
  assert isinstance(train, records.TaggedExamples) and tags == ["O", "B-NAME", "I-NAME"]
  assert len(train) > 20000 and len(dev) > 400
  names = kjv_tasks.names_gazetteer()
  for split, verses in ((train, corpus.trained - corpus.held_out), (dev, corpus.held_out)):
    verses = {" ".join(v.split()) for v in verses}  # one verse has two spaces in a row
    with_name = 0
    for words, word_tags in zip(split.words, split.tags):
      assert " ".join(words) in verses
      assert len(words) == len(word_tags) and set(word_tags) <= set(tags)
      for i, tag in enumerate(word_tags):  # BIO: I only continues a name
        assert tag != "I-NAME" or word_tags[i - 1] in ("B-NAME", "I-NAME")
        if tag != "O":
          assert re.fullmatch(r"\W*(\w+)(?:'s)?\W*", words[i])[1] in names, words[i]
      with_name += "B-NAME" in word_tags
    assert with_name == len(split) - with_name  # as many verses with a name as without
  tagged = {(tuple(w), tuple(t)) for w, t in zip(train.words, train.tags)}
  # A run of two names is one entity ("Simon Peter's" is two: a possessive ends a name).
  simon = next(w for w, _ in sorted(tagged)
               if any(a == "Simon" and b == "Peter" for a, b in zip(w, w[1:])))
  i = next(i for i in range(len(simon) - 1) if simon[i:i + 2] == ("Simon", "Peter"))
  assert dict(tagged)[simon][i:i + 2] == ("B-NAME", "I-NAME")


def _source_verses(question: str, verses) -> list[str]:
  """The verses that `question` can be with its blank filled."""
  before, after = question.split(kjv_tasks.QA_BLANK)
  return [v for v in verses if v.startswith(before) and v.endswith(after)
          and len(v) > len(before) + len(after)]


def test_qa(built, corpus):
  train, dev, names = built.here["qa"]
  assert isinstance(train, records.QAExamples) and names == []
  assert len(train) > 4000 and len(dev) > 80
  for split, verses in ((train, corpus.trained - corpus.held_out), (dev, corpus.held_out)):
    unanswerable = sum(not answers for answers in split.answers) / len(split)
    print(f"qa: {unanswerable:.3f} of {len(split)} without an answer")
    assert 0.25 <= unanswerable <= 0.42
    assert len(set(split.ids)) == len(split)
    by_end = collections.defaultdict(list)  # finds an unanswerable question's verse quickly
    for v in verses:
      by_end[v[-12:]].append(v)
    for qid, question, context, answers in zip(split.ids, split.questions, split.contexts,
                                                split.answers):
      chapter, first, last = re.fullmatch(r"(.+):(\d+)-(\d+)", qid).groups()
      window = corpus.chapters[chapter][int(first) - 1:int(last)]
      assert context == " ".join(window) and 2 <= len(window) <= 4
      assert all(v in verses for v in window)
      assert question.count(kjv_tasks.QA_BLANK) == 1
      if answers:
        [(text, start)] = answers
        assert context[start:start + len(text)] == text
        assert question.replace(kjv_tasks.QA_BLANK, text) in window
        assert text.split()[0] in kjv_tasks.names_gazetteer()
      else:  # a verse of another chapter of the split, its name nowhere in the context
        before, after = question.split(kjv_tasks.QA_BLANK)
        candidates = _source_verses(question, by_end[after[-12:]] if len(after) >= 12 else verses)
        assert candidates and not set(candidates) & set(window), question
        asked = [v[len(before):len(v) - len(after)] for v in candidates]
        assert any(not re.search(rf"\b{re.escape(name)}\b", context) for name in asked)


def test_continuation(built, corpus):
  train, dev, names = built.here["continuation"]
  assert isinstance(train, records.ChoiceExamples) and names == []
  assert len(train) > 25000 and len(dev) > 500
  for split, verses, pairs, spread in (
      (train, corpus.trained - corpus.held_out, corpus.trained_pairs, 0.03),
      (dev, corpus.held_out, corpus.held_out_pairs, 0.1)):
    shares = np.bincount(split.labels, minlength=4) / len(split)
    print(f"continuation: the right option's index shares {np.round(shares, 3)}")
    assert np.all(np.abs(shares - 0.25) < spread)
    for context, options, label in zip(split.contexts, split.options, split.labels):
      assert len(options) == len(set(options)) == 4 and context not in options
      assert context in verses and all(o in verses for o in options)
      assert (context, options[label]) in pairs  # the right one is the next verse


def test_retrieval(built, corpus):
  train, dev, names = built.here["retrieval"]
  assert isinstance(train, records.PairExamples) and names == []
  assert len(train) > 12000 and len(dev) > 250
  assert all(p in corpus.trained_pairs and not set(p) & corpus.held_out
             for p in zip(train.anchors, train.positives))
  assert all(p in corpus.held_out_pairs for p in zip(dev.anchors, dev.positives))
  # Dev retrieves each anchor's positive among all dev positives: each text once in a split,
  # as an anchor or as a positive (else an anchor would find its own text).
  for split in (train, dev):
    assert len(set(split.anchors) | set(split.positives)) == 2 * len(split)


def test_every_task_is_the_same_in_every_process(built):
  """A task never changes: not between two builds in one process, not with the order the tasks
  are built in, and not between processes, where what Python randomises per process differs
  (str hashes: a set's order, a hash()-seeded draw). Compared by digest, built here and in two
  processes of other hash seeds."""
  digests = {}
  for seed, process in built.others.items():
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    digests[seed] = json.loads(out)
  forward, backward_then_forward = digests["1"], digests["2"]
  assert [name for name, _ in forward] == list(TASKS)
  by_task = collections.defaultdict(set)
  for name, digest in forward + backward_then_forward:
    by_task[name].add(digest)
  for name in TASKS:
    by_task[name].add(_digest(built.here[name]))
  # {task: how many different builds}
  assert {name: len(d) for name, d in by_task.items()} == {name: 1 for name in TASKS}


if __name__ == "__main__":
  print(json.dumps(_digests(sys.argv[1:])))
