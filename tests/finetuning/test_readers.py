"""The readers of SQuAD (its JSON files and tfds) and of tfds RACE: exact records from small
files, and each error's one line. The tfds datasets are tiny builders with squad's and race's
features, prepared offline in array_record format. (The table and tag files of the other
kinds: test_table_readers.py.)"""

import json

import numpy as np
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.features import feature as feature_lib

from finetuning.files import raises, write
from mlmjax.finetuning import choices
from mlmjax.finetuning import squad
from mlmjax.finetuning.records import QAExamples


# ---- tiny tfds datasets ------------------------------------------------------------------------
class MlmjaxTinySquad(tfds.core.GeneratorBasedBuilder):
  """squad/v1.1's and squad/v2.0's features (v2.0's without plausible_answers, unread)."""

  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="v1.1"), tfds.core.BuilderConfig(name="v2.0")]

  def _info(self):
    features = {"id": np.str_, "title": tfds.features.Text(), "context": tfds.features.Text(),
                "question": tfds.features.Text(),
                "answers": tfds.features.Sequence({"text": tfds.features.Text(),
                                                   "answer_start": np.int32})}
    if self.builder_config.name == "v2.0":
      features["is_impossible"] = np.bool_
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(False), "validation": self._generate_examples(True)}

  def _generate_examples(self, misplaced):
    v2 = self.builder_config.name == "v2.0"
    questions = [("q1", " Where? ", " Zürich is a city.", ["Zürich", "city"], [1, 13]),
                 ("q2", "Who?", "Bern is the capital.", ["Bern"], [1 if misplaced else 0])]
    if v2:
      questions.append(("q3", "Why?", "No reason.", [], []))
    for qid, question, context, texts, starts in questions:
      record = {"id": qid, "title": "T", "context": context, "question": question,
                "answers": {"text": texts, "answer_start": starts}}
      if v2:
        record["is_impossible"] = not texts
      yield qid, record


class MlmjaxTinyRace(tfds.core.GeneratorBasedBuilder):
  """race/high's and race/middle's features: per article its questions, options, answers."""

  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="high"), tfds.core.BuilderConfig(name="middle")]

  def _info(self):
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "article": text, "questions": tfds.features.Sequence(text),
        "answers": tfds.features.Sequence(text),
        "options": tfds.features.Sequence(tfds.features.Sequence(text)), "example_id": text}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(False), "dev": self._generate_examples(True)}

  def _generate_examples(self, bad):
    if self.builder_config.name == "high":
      yield "h1", {"article": " The sun rises. ", "questions": ["When?", "The sun _ daily."],
                   "answers": ["B", "E" if bad else "A"],
                   "options": [["at night", "at dawn", "never", "noon"],
                               ["rises", "sets", "sleeps", "sings"]], "example_id": "h1.txt"}
    else:
      yield "m1", {"article": "Cats purr.", "questions": ["Who purrs?"], "answers": ["C"],
                   "options": [["dogs", "fish", "cats", "birds"]], "example_id": "m1.txt"}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  """A data dir holding both tiny datasets, every config, prepared once."""
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  # tfds 4.9 serializes a nested Sequence (race's options) through tf.dtypes, which needs
  # tensorflow; numpy's dtype serves as well (reading never needs it).
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(feature_lib.TensorInfo, "dtype", property(lambda info: info.np_dtype))
    for builder, configs in ((MlmjaxTinySquad, ("v1.1", "v2.0")),
                             (MlmjaxTinyRace, ("high", "middle"))):
      for config in configs:
        builder(config=config, data_dir=data_dir,
                file_format="array_record").download_and_prepare()
  return data_dir


# ---- SQuAD ---------------------------------------------------------------------------------------
def _squad_file(tmp_path, qas, context="Denver won.", name="squad.json") -> str:
  data = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [
      {"context": context, "qas": qas}]}]}
  return write(tmp_path, name, json.dumps(data))


def test_squad_json(tmp_path):
  context = "  Denver Broncos won in 2016. "
  path = write(tmp_path, "dev-v2.0.json", json.dumps({"version": "v2.0", "data": [
      {"title": "Super_Bowl", "paragraphs": [
          {"context": context, "qas": [
              {"id": "q1", "question": " Who won? ", "is_impossible": False,
               "answers": [{"text": "Denver Broncos", "answer_start": 2},
                           {"text": " Broncos", "answer_start": 8}]},
              {"id": "q2", "question": "Who lost?", "is_impossible": True, "answers": [],
               "plausible_answers": [{"text": "Denver", "answer_start": 2}]}]},
          {"context": "Zürich is in Switzerland.", "qas": [
              {"id": "q3", "question": "Where?", "is_impossible": False,
               "answers": [{"text": "Switzerland", "answer_start": 13}]}]}]},
      {"title": "Other", "paragraphs": [
          {"context": "A b c.", "qas": [{"id": "q0", "question": "Which?", "is_impossible": True}]}
      ]}]}, ensure_ascii=False))
  examples = squad.read_json(path)
  assert examples == QAExamples(
      ["q1", "q2", "q3", "q0"], ["Who won?", "Who lost?", "Where?", "Which?"],
      ["Denver Broncos won in 2016.", "Denver Broncos won in 2016.", "Zürich is in Switzerland.",
       "A b c."],
      [[("Denver Broncos", 0), ("Broncos", 7)], [], [("Switzerland", 13)], []])
  # The offsets still point at the answers in the stripped contexts.
  for context, answers in zip(examples.contexts, examples.answers):
    assert all(context[start:start + len(text)] == text for text, start in answers)
  # v1.1: no is_impossible.
  v1 = _squad_file(tmp_path, [{"id": "a", "question": "Who?",
                               "answers": [{"text": "Denver", "answer_start": 0}]}])
  assert squad.read_json(v1) == QAExamples(["a"], ["Who?"], ["Denver won."], [[("Denver", 0)]])


def test_squad_json_errors(tmp_path):
  def qa(**fields):
    return {"id": "q1", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}],
            **fields}
  missing = str(tmp_path / "nope.json")
  with raises(f"{missing}: no such file"):
    squad.read_json(missing)
  path = write(tmp_path, "empty.json", " \n")
  with raises(f"{path}: empty file; expected SQuAD's JSON"):
    squad.read_json(path)
  path = write(tmp_path, "bad.json", "{\"data\": [")
  with raises(f"{path}: not JSON (Expecting value: line 1 column 11 (char 10))"):
    squad.read_json(path)
  path = write(tmp_path, "list.json", "[]")
  with raises(f"{path}: expected SQuAD's JSON, an object with a \"data\" list"):
    squad.read_json(path)
  path = write(tmp_path, "nodata.json", "{\"version\": \"1.1\"}")
  with raises(f"{path} has no field 'data'"):
    squad.read_json(path)
  path = write(tmp_path, "none.json", "{\"data\": []}")
  with raises(f"{path}: no questions"):
    squad.read_json(path)
  path = write(tmp_path, "paragraph.json", json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
  with raises(f"{path}: article 1 paragraph 1 has no field 'context'"):
    squad.read_json(path)
  path = write(tmp_path, "article.json", json.dumps({"data": [{"paragraphs": []}, "x"]}))
  with raises(f"{path}: article 2 is not an object"):
    squad.read_json(path)
  cases = [
      (qa(id=None), "{path}: article 1 paragraph 1 question 1: 'id' is null, not a string"),
      ({"question": "Who?"}, "{path}: article 1 paragraph 1 question 1 has no field 'id'"),
      (qa(question=None), "{path}: question 'q1': 'question' is null, not a string"),
      ({"id": "q1", "question": "Who?"}, "{path}: question 'q1' has no field 'answers'"),
      (qa(answers=[]), "{path}: question 'q1' has no answers and is not is_impossible (SQuAD"
                       " 2.0's unanswerable questions)"),
      (qa(answers=[], is_impossible=False), "{path}: question 'q1' has no answers and is not"
                                            " is_impossible"),
      (qa(is_impossible=True), "{path}: question 'q1' is_impossible but has 1 answers"),
      (qa(is_impossible="yes"), "{path}: question 'q1': 'is_impossible' is \"yes\", not true or"
                                " false"),
      (qa(answers=[{"text": "Denver", "answer_start": 3}]),
       "{path}: question 'q1': answer 'Denver' is not at character 3 of its context (there:"
       " 'ver wo')"),
      (qa(answers=[{"text": "won", "answer_start": -1}]),
       "{path}: question 'q1': answer 'won' is not at character -1 of its context (there: '')"),
      (qa(answers=[{"text": " ", "answer_start": 6}]),
       "{path}: question 'q1': an empty answer at character 6"),
      (qa(answers=[{"text": "Denver"}]),
       "{path}: question 'q1': answer 1 has no field 'answer_start'"),
      (qa(answers=[{"text": "Denver", "answer_start": "0"}]),
       "{path}: question 'q1': answer 1: 'answer_start' is \"0\", not an integer"),
      (qa(answers=["Denver"]), "{path}: question 'q1': answer 1 is not an object"),
  ]
  for i, (question, message) in enumerate(cases):
    path = _squad_file(tmp_path, [question], name=f"case{i}.json")
    with raises(message.format(path=path)):
      squad.read_json(path)
  path = _squad_file(tmp_path, [qa(), qa()])
  with raises(f"{path}: question 'q1' occurs twice; question ids must be unique"):
    squad.read_json(path)
  path = write(tmp_path, "latin1.json", "")
  (tmp_path / "latin1.json").write_bytes(b"{\"data\": \"Z\xfcrich\"}")
  with raises(f"{path}: not UTF-8 text (invalid start byte at byte 11)"):
    squad.read_json(path)


def test_squad_tfds(tfds_dir, monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", tfds_dir)
  for version in ("v1.1", "v2.0"):
    examples = squad.read_tfds(f"mlmjax_tiny_squad/{version}", "train")
    order = np.argsort(examples.ids)  # tfds orders records by a hash of their keys
    expected = QAExamples(["q1", "q2"], ["Where?", "Who?"],
                          ["Zürich is a city.", "Bern is the capital."],
                          [[("Zürich", 0), ("city", 12)], [("Bern", 0)]])
    if version == "v2.0":
      expected = QAExamples(expected.ids + ["q3"], expected.questions + ["Why?"],
                            expected.contexts + ["No reason."], expected.answers + [[]])
    assert examples.take(order) == expected
    with raises(f"mlmjax_tiny_squad/{version}:validation: question 'q2': answer 'Bern' is not"
                 " at character 1 of its context (there: 'ern ')"):
      squad.read_tfds(f"mlmjax_tiny_squad/{version}", "validation")
  with raises("--task=mlmjax_tiny_race/high: dataset 'mlmjax_tiny_race/high' has no feature"
               " 'id' (it has article, questions, answers, options, example_id); expected"
               " SQuAD's features"):
    squad.read_tfds("mlmjax_tiny_race/high", "train")
  with raises("--task=mlmjax_tiny_squad/v2.0: Unknown split 'test'"):
    squad.read_tfds("mlmjax_tiny_squad/v2.0", "test")


def _assert_choices(examples, contexts, options, labels):
  assert (examples.contexts, examples.options) == (contexts, options)
  assert examples.labels.dtype == np.int32 and examples.labels.tolist() == labels


def test_race_tfds(tfds_dir, monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", tfds_dir)
  high = (["The sun rises.", "The sun rises."],
          [["When? at night", "When? at dawn", "When? never", "When? noon"],
           ["The sun rises daily.", "The sun sets daily.", "The sun sleeps daily.",
            "The sun sings daily."]], [1, 0])
  middle = (["Cats purr."], [["Who purrs? dogs", "Who purrs? fish", "Who purrs? cats",
                              "Who purrs? birds"]], [2])
  _assert_choices(choices.read_race_tfds("mlmjax_tiny_race/high", "train"), *high)
  _assert_choices(choices.read_race_tfds("mlmjax_tiny_race/middle", "train"), *middle)
  # race/all: high, then middle.
  _assert_choices(choices.read_race_tfds("mlmjax_tiny_race/all:1.0.0", "train"),
                  *(h + m for h, m in zip(high, middle)))
  with raises("mlmjax_tiny_race/high:dev: article 'h1.txt' question 2: answer 'E' is not an"
               " option's letter, A to D"):
    choices.read_race_tfds("mlmjax_tiny_race/all", "dev")
  with raises("--task=mlmjax_tiny_squad/v1.1: dataset 'mlmjax_tiny_squad/v1.1' has no feature"
               " 'article' (it has id, title, context, question, answers); expected RACE's"
               " features"):
    choices.read_race_tfds("mlmjax_tiny_squad/v1.1", "train")
  # Records whose per-question sequences disagree (no tfds dataset holds such).
  with raises("race:train: record 1 has 1 questions, 0 option lists and 1 answers"):
    choices._add_race_records(choices._Choices("race:train"), [  # pylint: disable=protected-access
        {"article": b"a", "questions": [b"q"], "options": [], "answers": [b"A"]}], "race:train")


