"""The readers of the other fine-tuning task kinds: SQuAD (JSON, tfds), CoNLL-style NER (text,
.jsonl, .parquet), multiple choice (SWAG .csv, .jsonl, tfds RACE) and embedding pairs: exact
records from small files, and each error's one line. The tfds datasets are tiny builders with
squad's and race's features, prepared offline in array_record format."""

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.features import feature as feature_lib

from mlmjax.errors import DataError
from mlmjax.finetuning import choices
from mlmjax.finetuning import conll
from mlmjax.finetuning import pairs
from mlmjax.finetuning import squad
from mlmjax.finetuning.records import QAExamples
from mlmjax.finetuning.records import TaggedExamples


def _raises(message):
  return pytest.raises(DataError, match=re.escape(message))


def _write(tmp_path, name: str, text: str) -> str:
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


def _jsonl(tmp_path, name: str, records) -> str:
  return _write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in records))


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
  return _write(tmp_path, name, json.dumps(data))


def test_squad_json(tmp_path):
  context = "  Denver Broncos won in 2016. "
  path = _write(tmp_path, "dev-v2.0.json", json.dumps({"version": "v2.0", "data": [
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
  with _raises(f"{missing}: no such file"):
    squad.read_json(missing)
  path = _write(tmp_path, "empty.json", " \n")
  with _raises(f"{path}: empty file; expected SQuAD's JSON"):
    squad.read_json(path)
  path = _write(tmp_path, "bad.json", "{\"data\": [")
  with _raises(f"{path}: not JSON (Expecting value: line 1 column 11 (char 10))"):
    squad.read_json(path)
  path = _write(tmp_path, "list.json", "[]")
  with _raises(f"{path}: expected SQuAD's JSON, an object with a \"data\" list"):
    squad.read_json(path)
  path = _write(tmp_path, "nodata.json", "{\"version\": \"1.1\"}")
  with _raises(f"{path} has no field 'data'"):
    squad.read_json(path)
  path = _write(tmp_path, "none.json", "{\"data\": []}")
  with _raises(f"{path}: no questions"):
    squad.read_json(path)
  path = _write(tmp_path, "paragraph.json", json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
  with _raises(f"{path}: article 1 paragraph 1 has no field 'context'"):
    squad.read_json(path)
  path = _write(tmp_path, "article.json", json.dumps({"data": [{"paragraphs": []}, "x"]}))
  with _raises(f"{path}: article 2 is not an object"):
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
    with _raises(message.format(path=path)):
      squad.read_json(path)
  path = _squad_file(tmp_path, [qa(), qa()])
  with _raises(f"{path}: question 'q1' occurs twice; question ids must be unique"):
    squad.read_json(path)
  path = _write(tmp_path, "latin1.json", "")
  (tmp_path / "latin1.json").write_bytes(b"{\"data\": \"Z\xfcrich\"}")
  with _raises(f"{path}: not UTF-8 text (invalid start byte at byte 11)"):
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
    with _raises(f"mlmjax_tiny_squad/{version}:validation: question 'q2': answer 'Bern' is not"
                 " at character 1 of its context (there: 'ern ')"):
      squad.read_tfds(f"mlmjax_tiny_squad/{version}", "validation")
  with _raises("--task=mlmjax_tiny_race/high: dataset 'mlmjax_tiny_race/high' has no feature"
               " 'id' (it has article, questions, answers, options, example_id); expected"
               " SQuAD's features"):
    squad.read_tfds("mlmjax_tiny_race/high", "train")
  with _raises("--task=mlmjax_tiny_squad/v2.0: Unknown split 'test'"):
    squad.read_tfds("mlmjax_tiny_squad/v2.0", "test")


# ---- CoNLL ---------------------------------------------------------------------------------------
_CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O


Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


def test_conll_text(tmp_path):
  expected = TaggedExamples([["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]],
                            [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]])
  assert conll.read(_write(tmp_path, "train.conll", _CONLL)) == expected
  assert conll.read(_write(tmp_path, "train.txt", _CONLL + "\n\n")) == expected
  # .tsv: tab-separated, two columns, IOBES tags.
  tsv = "New\tB-LOC\nYork\tE-LOC\nis\tO\n\nParis\tS-LOC\n"
  assert conll.read(_write(tmp_path, "dev.tsv", tsv)) == TaggedExamples(
      [["New", "York", "is"], ["Paris"]], [["B-LOC", "E-LOC", "O"], ["S-LOC"]])


def test_conll_jsonl_and_parquet(tmp_path):
  names = ["O", "B-PER", "I-PER", "B-LOC"]
  expected = TaggedExamples([["Ann", "Lee", "ran"], ["Oslo"]],
                            [["B-PER", "I-PER", "O"], ["B-LOC"]])
  strings = _jsonl(tmp_path, "strings.jsonl", [
      {"id": "0", "tokens": ["Ann", "Lee", "ran"], "ner_tags": ["B-PER", "I-PER", "O"]},
      {"id": "1", "tokens": [], "ner_tags": []},  # empty: skipped
      {"id": "2", "tokens": ["Oslo"], "ner_tags": ["B-LOC"]}])
  assert conll.read(strings) == expected
  ids = _jsonl(tmp_path, "ids.jsonl", [{"tokens": ["Ann", "Lee", "ran"], "ner_tags": [1, 2, 0]},
                                       {"tokens": ["Oslo"], "ner_tags": [3]}])
  assert conll.read(ids, names) == expected
  with _raises(f"{ids}: record 1: ner_tags are class ids (1) and no tag names were given to map"
               " them"):
    conll.read(ids)
  with _raises(f"{ids}: record 2: tag id 3 is out of range (3 tag names)"):
    conll.read(ids, names[:3])
  # HF datasets' parquet names its ClassLabel's ids in the schema's metadata.
  table = pa.table({"id": ["0", "2"], "tokens": [["Ann", "Lee", "ran"], ["Oslo"]],
                    "ner_tags": [[1, 2, 0], [3]]})
  hf = {"info": {"features": {
      "tokens": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
      "ner_tags": {"feature": {"names": names, "_type": "ClassLabel"}, "_type": "Sequence"}}}}
  with_names = str(tmp_path / "hf.parquet")
  pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps(hf)}), with_names)
  assert conll.read(with_names) == expected
  plain = str(tmp_path / "plain.parquet")
  pq.write_table(table, plain)
  assert conll.read(plain, names) == expected
  with _raises(f"{plain}: record 1: ner_tags are class ids (1) and no tag names were given"):
    conll.read(plain)
  no_tags = str(tmp_path / "no_tags.parquet")
  pq.write_table(table.drop_columns(["ner_tags"]), no_tags)
  with _raises(f"{no_tags}: no column 'ner_tags' (it has id, tokens)"):
    conll.read(no_tags)
  not_parquet = _write(tmp_path, "text.parquet", "tokens\n")
  with _raises(f"{not_parquet}: not a Parquet file ("):
    conll.read(not_parquet)


def test_conll_errors(tmp_path):
  path = _write(tmp_path, "one.conll", "EU B-ORG\n\nrejects\n")
  with _raises(f"{path}:3: one column ('rejects'); expected a token and its tag in the last"
               " column"):
    conll.read(path)
  path = _write(tmp_path, "bio.conll", "EU B-ORG\nPeter B_PER\n")
  with _raises(f"{path}:2: tag 'B_PER' is not O or B-, I-, E-, S-TYPE (the BIO and IOBES"
               " schemes)"):
    conll.read(path)
  path = _write(tmp_path, "typeless.conll", "EU B-\n")
  with _raises(f"{path}:1: tag 'B-' is not O or B-"):
    conll.read(path)
  path = _write(tmp_path, "docstart.conll", "-DOCSTART- -X- -X- O\n\n\n")
  with _raises(f"{path}: no sentences"):
    conll.read(path)
  path = _jsonl(tmp_path, "counts.jsonl", [{"tokens": ["a", "b"], "ner_tags": ["O"]}])
  with _raises(f"{path}: record 1: tokens and ner_tags differ in length (2 and 1)"):
    conll.read(path)
  path = _jsonl(tmp_path, "tag.jsonl", [{"tokens": ["a"], "ner_tags": ["PER"]}])
  with _raises(f"{path}: record 1: tag 'PER' is not O or B-, I-, E-, S-TYPE"):
    conll.read(path)
  path = _jsonl(tmp_path, "fields.jsonl", [{"words": ["a"], "ner_tags": ["O"]}])
  with _raises(f"{path}: record 1 has no field 'tokens' (it has words, ner_tags)"):
    conll.read(path)
  path = _jsonl(tmp_path, "text.jsonl", [{"tokens": "a b", "ner_tags": ["O", "O"]}])
  with _raises(f"{path}: record 1: 'tokens' is not a list"):
    conll.read(path)
  path = _write(tmp_path, "none.jsonl", "\n")
  with _raises(f"{path}: no sentences"):
    conll.read(path)
  path = str(tmp_path / "train.csv")
  with _raises(f"{path}: expected a CoNLL text file (.conll, .txt, .iob, .tsv), a .jsonl or a"
               " .parquet file"):
    conll.read(path)
  path = str(tmp_path / "nope.iob")
  with _raises(f"{path}: no such file"):
    conll.read(path)


def test_conll_check_tags():
  train = TaggedExamples([["a", "b", "c"], ["d"]], [["B-PER", "I-PER", "O"], ["B-ORG"]])
  dev = TaggedExamples([["x"], ["y", "z"]], [["O"], ["B-PER", "B-ORG"]])
  assert conll.check_tags(train, dev, "--task=ner") == ["O", "B-ORG", "B-PER", "I-PER"]
  # "O" leads even where the training set has none.
  assert conll.check_tags(TaggedExamples([["a"]], [["S-LOC"]]), dev.take([0]), "c") == [
      "O", "S-LOC"]
  dev = TaggedExamples([["x"], ["y", "z"]], [["O"], ["B-LOC", "B-MISC"]])
  with _raises("--task=ner: dev tag 'B-LOC' (sentence 2) never occurs in the training set (its"
               " tags: O, B-ORG, B-PER, I-PER)"):
    conll.check_tags(train, dev, "--task=ner")


# ---- multiple choice -----------------------------------------------------------------------------
def _assert_choices(examples, contexts, options, labels):
  assert (examples.contexts, examples.options) == (contexts, options)
  assert examples.labels.dtype == np.int32 and examples.labels.tolist() == labels


_SWAG_HEADER = ("video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
                "ending3,label\n")


def test_swag_csv(tmp_path):
  path = _write(tmp_path, "train.csv", _SWAG_HEADER +
                "v1,5,\"Students lower. They\",Students lower their eyes.,They, gen,sit.,run.,"
                "\"sing, loudly.\",eat.,2\n"
                "v2,6,x, A man waves. ,He,gold,smiles.,cries.,leaves.,jumps.,0\n")
  _assert_choices(choices.read_file(path), ["Students lower their eyes.", "A man waves."],
                  [["They sit.", "They run.", "They sing, loudly.", "They eat."],
                   ["He smiles.", "He cries.", "He leaves.", "He jumps."]], [2, 0])
  path = _write(tmp_path, "test.csv", _SWAG_HEADER + "v1,5,x,s1,s2,gen,a,b,c,d,-1\n")
  with _raises(f"{path}: record 1: label '-1' is not an option's index, 0 to 3"):
    choices.read_file(path)
  path = _write(tmp_path, "short.csv", _SWAG_HEADER + "v1,5,x,s1,s2,gen,a,b\n")
  with _raises(f"{path}: record 1 has no value for 'ending2'"):
    choices.read_file(path)
  path = _write(tmp_path, "one.csv", "sent1,sent2,ending0,label\ns1,s2,a,0\n")
  with _raises(f"{path}: record 1 has no field 'ending1' (it has sent1, sent2, ending0, label)"):
    choices.read_file(path)
  path = _write(tmp_path, "header.csv", _SWAG_HEADER)
  with _raises(f"{path}: no examples"):
    choices.read_file(path)


def test_choices_jsonl(tmp_path):
  path = _jsonl(tmp_path, "race.jsonl", [
      {"context": " The sun rises. ", "question": "When does it rise?",
       "options": ["at dawn", " at noon "], "label": 0},
      {"context": "Cats purr.", "question": "_ purr.", "options": ["Cats", "Dogs"], "label": 1},
      {"context": "Cats purr.", "options": ["yes", "no"], "label": 1}])
  _assert_choices(choices.read_file(path), ["The sun rises.", "Cats purr.", "Cats purr."],
                  [["When does it rise? at dawn", "When does it rise? at noon"],
                   ["Cats purr.", "Dogs purr."], ["yes", "no"]], [0, 1, 1])
  cases = [
      ([{"context": "c", "options": ["a", "b"], "label": 0},
        {"context": "c", "options": ["a", "b", "d"], "label": 0}],
       "{path}: record 2 has 3 options, the first example 2; every example needs the same"
       " number"),
      ([{"context": "c", "options": ["a"], "label": 0}],
       "{path}: record 1 has 1 options; a multiple-choice example needs at least 2"),
      ([{"context": "c", "options": ["a", "b"], "label": 2}],
       "{path}: record 1: label 2 is not an option's index, 0 to 1"),
      ([{"context": "c", "options": ["a", "b"], "label": 1.0}],
       "{path}: record 1: label 1.0 is not an option's index, 0 to 1"),
      ([{"context": "c", "options": ["a", "b"], "label": "B"}],
       "{path}: record 1: label 'B' is not an option's index, 0 to 1"),
      ([{"context": "c", "options": ["a", "b"]}],
       "{path}: record 1 has no field 'label' (it has context, options)"),
      ([{"context": "c", "options": "a b", "label": 0}],
       "{path}: record 1: 'options' is not a list"),
      ([{"options": ["a", "b"], "label": 0}],
       "{path}: record 1 has no field 'context' (it has options, label)"),
      ([{"context": ["c"], "options": ["a", "b"], "label": 0}],
       "{path}: record 1: 'context' is a list, not text"),
  ]
  for i, (records, message) in enumerate(cases):
    path = _jsonl(tmp_path, f"case{i}.jsonl", records)
    with _raises(message.format(path=path)):
      choices.read_file(path)
  path = _write(tmp_path, "race.tsv", "")
  with _raises(f"{path}: expected a .csv (SWAG's columns) or .jsonl file"):
    choices.read_file(path)
  path = _write(tmp_path, "empty.jsonl", "")
  with _raises(f"{path}: no examples"):
    choices.read_file(path)


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
  with _raises("mlmjax_tiny_race/high:dev: article 'h1.txt' question 2: answer 'E' is not an"
               " option's letter, A to D"):
    choices.read_race_tfds("mlmjax_tiny_race/all", "dev")
  with _raises("--task=mlmjax_tiny_squad/v1.1: dataset 'mlmjax_tiny_squad/v1.1' has no feature"
               " 'article' (it has id, title, context, question, answers); expected RACE's"
               " features"):
    choices.read_race_tfds("mlmjax_tiny_squad/v1.1", "train")
  # Records whose per-question sequences disagree (no tfds dataset holds such).
  with _raises("race:train: record 1 has 1 questions, 0 option lists and 1 answers"):
    choices._add_race_records(choices._Choices("race:train"), [  # pylint: disable=protected-access
        {"article": b"a", "questions": [b"q"], "options": [], "answers": [b"A"]}], "race:train")


# ---- pairs ---------------------------------------------------------------------------------------
def test_pairs(tmp_path):
  expected = (["how tall is it?", "a \"quoted\" query"], ["It is 3 m tall.", "doc"])
  path = _write(tmp_path, "pairs.csv", "anchor,positive,score\n how tall is it? ,It is 3 m"
                " tall.,1\n\"a \"\"quoted\"\" query\",doc,0\n")
  examples = pairs.read_file(path)
  assert (examples.anchors, examples.positives) == expected
  path = _write(tmp_path, "pairs.tsv", "query\tdocument\nhow tall is it?\tIt is 3 m tall.\n"
                "a \"quoted\" query\tdoc\n")
  examples = pairs.read_file(path, ("query", "document"))
  assert (examples.anchors, examples.positives) == expected
  path = _jsonl(tmp_path, "pairs.jsonl", [{"anchor": "how tall is it?", "positive": "It is 3 m"
                                           " tall."}, {"anchor": "a \"quoted\" query",
                                                       "positive": "doc"}])
  examples = pairs.read_file(path)
  assert (examples.anchors, examples.positives) == expected
  assert len(examples.take([1])) == 1


def test_pairs_errors(tmp_path):
  path = _write(tmp_path, "fields.csv", "query,positive\nq,d\n")
  with _raises(f"{path}: record 1 has no field 'anchor' (it has query, positive)"):
    pairs.read_file(path)
  path = _write(tmp_path, "empty_text.csv", "anchor,positive\nq,d\nq2,  \n")
  with _raises(f"{path}: record 2 has an empty 'positive'"):
    pairs.read_file(path)
  path = _write(tmp_path, "short.csv", "anchor,positive\nq\n")
  with _raises(f"{path}: record 1 has no value for 'positive'"):
    pairs.read_file(path)
  path = _write(tmp_path, "header.tsv", "anchor\tpositive\n")
  with _raises(f"{path}: no pairs"):
    pairs.read_file(path)
  path = _write(tmp_path, "bad.jsonl", "{\"anchor\": \"q\", \"positive\": \"d\"}\n\n[1, 2]\n")
  with _raises(f"{path}:3: not a JSON object"):
    pairs.read_file(path)
  path = _jsonl(tmp_path, "null.jsonl", [{"anchor": None, "positive": "d"}])
  with _raises(f"{path}: record 1 has no value for 'anchor'"):
    pairs.read_file(path)
  with _raises(f"{path}: name two fields, the anchor's and the positive's (not ('anchor',))"):
    pairs.read_file(path, ("anchor",))
  path = str(tmp_path / "pairs.parquet")
  with _raises(f"{path}: expected a .csv, .tsv or .jsonl file"):
    pairs.read_file(path)
  path = str(tmp_path / "nope.csv")
  with _raises(f"{path}: no such file"):
    pairs.read_file(path)
  path = str(tmp_path / "latin1.csv")
  (tmp_path / "latin1.csv").write_bytes(b"anchor,positive\nZ\xfcrich,d\n")
  with _raises(f"{path}: not UTF-8 text (invalid start byte at byte 17)"):
    pairs.read_file(path)
