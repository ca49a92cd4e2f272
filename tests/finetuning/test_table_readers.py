"""The readers of CoNLL-style NER (text, .jsonl, .parquet), multiple-choice files (SWAG .csv,
.jsonl) and embedding pairs: exact records from small files, and each error's one line."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from finetuning.files import jsonl, raises, write
from mlmjax.finetuning import choices
from mlmjax.finetuning import conll
from mlmjax.finetuning import pairs
from mlmjax.finetuning.records import TaggedExamples


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
  assert conll.read(write(tmp_path, "train.conll", _CONLL)) == expected
  assert conll.read(write(tmp_path, "train.txt", _CONLL + "\n\n")) == expected
  # .tsv: tab-separated, two columns, IOBES tags.
  tsv = "New\tB-LOC\nYork\tE-LOC\nis\tO\n\nParis\tS-LOC\n"
  assert conll.read(write(tmp_path, "dev.tsv", tsv)) == TaggedExamples(
      [["New", "York", "is"], ["Paris"]], [["B-LOC", "E-LOC", "O"], ["S-LOC"]])


def test_conll_jsonl_and_parquet(tmp_path):
  names = ["O", "B-PER", "I-PER", "B-LOC"]
  expected = TaggedExamples([["Ann", "Lee", "ran"], ["Oslo"]],
                            [["B-PER", "I-PER", "O"], ["B-LOC"]])
  strings = jsonl(tmp_path, "strings.jsonl", [
      {"id": "0", "tokens": ["Ann", "Lee", "ran"], "ner_tags": ["B-PER", "I-PER", "O"]},
      {"id": "1", "tokens": [], "ner_tags": []},  # empty: skipped
      {"id": "2", "tokens": ["Oslo"], "ner_tags": ["B-LOC"]}])
  assert conll.read(strings) == expected
  ids = jsonl(tmp_path, "ids.jsonl", [{"tokens": ["Ann", "Lee", "ran"], "ner_tags": [1, 2, 0]},
                                       {"tokens": ["Oslo"], "ner_tags": [3]}])
  assert conll.read(ids, names) == expected
  with raises(f"{ids}: record 1: ner_tags are class ids (1) and no tag names were given to map"
               " them"):
    conll.read(ids)
  with raises(f"{ids}: record 2: tag id 3 is out of range (3 tag names)"):
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
  with raises(f"{plain}: record 1: ner_tags are class ids (1) and no tag names were given"):
    conll.read(plain)
  no_tags = str(tmp_path / "no_tags.parquet")
  pq.write_table(table.drop_columns(["ner_tags"]), no_tags)
  with raises(f"{no_tags}: no column 'ner_tags' (it has id, tokens)"):
    conll.read(no_tags)
  not_parquet = write(tmp_path, "text.parquet", "tokens\n")
  with raises(f"{not_parquet}: not a Parquet file ("):
    conll.read(not_parquet)


def test_conll_errors(tmp_path):
  path = write(tmp_path, "one.conll", "EU B-ORG\n\nrejects\n")
  with raises(f"{path}:3: one column ('rejects'); expected a token and its tag in the last"
               " column"):
    conll.read(path)
  path = write(tmp_path, "bio.conll", "EU B-ORG\nPeter B_PER\n")
  with raises(f"{path}:2: tag 'B_PER' is not O or B-, I-, E-, S-TYPE (the BIO and IOBES"
               " schemes)"):
    conll.read(path)
  path = write(tmp_path, "typeless.conll", "EU B-\n")
  with raises(f"{path}:1: tag 'B-' is not O or B-"):
    conll.read(path)
  path = write(tmp_path, "docstart.conll", "-DOCSTART- -X- -X- O\n\n\n")
  with raises(f"{path}: no sentences"):
    conll.read(path)
  path = jsonl(tmp_path, "counts.jsonl", [{"tokens": ["a", "b"], "ner_tags": ["O"]}])
  with raises(f"{path}: record 1: tokens and ner_tags differ in length (2 and 1)"):
    conll.read(path)
  path = jsonl(tmp_path, "tag.jsonl", [{"tokens": ["a"], "ner_tags": ["PER"]}])
  with raises(f"{path}: record 1: tag 'PER' is not O or B-, I-, E-, S-TYPE"):
    conll.read(path)
  path = jsonl(tmp_path, "fields.jsonl", [{"words": ["a"], "ner_tags": ["O"]}])
  with raises(f"{path}: record 1 has no field 'tokens' (it has words, ner_tags)"):
    conll.read(path)
  path = jsonl(tmp_path, "text.jsonl", [{"tokens": "a b", "ner_tags": ["O", "O"]}])
  with raises(f"{path}: record 1: 'tokens' is not a list"):
    conll.read(path)
  path = write(tmp_path, "none.jsonl", "\n")
  with raises(f"{path}: no sentences"):
    conll.read(path)
  path = str(tmp_path / "train.csv")
  with raises(f"{path}: expected a CoNLL text file (.conll, .txt, .iob, .tsv), a .jsonl or a"
               " .parquet file"):
    conll.read(path)
  path = str(tmp_path / "nope.iob")
  with raises(f"{path}: no such file"):
    conll.read(path)


def test_conll_check_tags():
  train = TaggedExamples([["a", "b", "c"], ["d"]], [["B-PER", "I-PER", "O"], ["B-ORG"]])
  dev = TaggedExamples([["x"], ["y", "z"]], [["O"], ["B-PER", "B-ORG"]])
  assert conll.check_tags(train, dev, "--task=ner") == ["O", "B-ORG", "B-PER", "I-PER"]
  # "O" leads even where the training set has none.
  assert conll.check_tags(TaggedExamples([["a"]], [["S-LOC"]]), dev.take([0]), "c") == [
      "O", "S-LOC"]
  dev = TaggedExamples([["x"], ["y", "z"]], [["O"], ["B-LOC", "B-MISC"]])
  with raises("--task=ner: dev tag 'B-LOC' (sentence 2) never occurs in the training set (its"
               " tags: O, B-ORG, B-PER, I-PER)"):
    conll.check_tags(train, dev, "--task=ner")


# ---- multiple choice -----------------------------------------------------------------------------
def _assert_choices(examples, contexts, options, labels):
  assert (examples.contexts, examples.options) == (contexts, options)
  assert examples.labels.dtype == np.int32 and examples.labels.tolist() == labels


_SWAG_HEADER = ("video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
                "ending3,label\n")


def test_swag_csv(tmp_path):
  path = write(tmp_path, "train.csv", _SWAG_HEADER +
                "v1,5,\"Students lower. They\",Students lower their eyes.,They, gen,sit.,run.,"
                "\"sing, loudly.\",eat.,2\n"
                "v2,6,x, A man waves. ,He,gold,smiles.,cries.,leaves.,jumps.,0\n")
  _assert_choices(choices.read_file(path), ["Students lower their eyes.", "A man waves."],
                  [["They sit.", "They run.", "They sing, loudly.", "They eat."],
                   ["He smiles.", "He cries.", "He leaves.", "He jumps."]], [2, 0])
  path = write(tmp_path, "test.csv", _SWAG_HEADER + "v1,5,x,s1,s2,gen,a,b,c,d,-1\n")
  with raises(f"{path}: record 1: label '-1' is not an option's index, 0 to 3"):
    choices.read_file(path)
  path = write(tmp_path, "short.csv", _SWAG_HEADER + "v1,5,x,s1,s2,gen,a,b\n")
  with raises(f"{path}: record 1 has no value for 'ending2'"):
    choices.read_file(path)
  path = write(tmp_path, "one.csv", "sent1,sent2,ending0,label\ns1,s2,a,0\n")
  with raises(f"{path}: record 1 has no field 'ending1' (it has sent1, sent2, ending0, label)"):
    choices.read_file(path)
  path = write(tmp_path, "header.csv", _SWAG_HEADER)
  with raises(f"{path}: no examples"):
    choices.read_file(path)


def test_choices_jsonl(tmp_path):
  path = jsonl(tmp_path, "race.jsonl", [
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
    path = jsonl(tmp_path, f"case{i}.jsonl", records)
    with raises(message.format(path=path)):
      choices.read_file(path)
  path = write(tmp_path, "race.tsv", "")
  with raises(f"{path}: expected a .csv (SWAG's columns) or .jsonl file"):
    choices.read_file(path)
  path = write(tmp_path, "empty.jsonl", "")
  with raises(f"{path}: no examples"):
    choices.read_file(path)


# ---- pairs ---------------------------------------------------------------------------------------
def test_pairs(tmp_path):
  expected = (["how tall is it?", "a \"quoted\" query"], ["It is 3 m tall.", "doc"])
  path = write(tmp_path, "pairs.csv", "anchor,positive,score\n how tall is it? ,It is 3 m"
                " tall.,1\n\"a \"\"quoted\"\" query\",doc,0\n")
  examples = pairs.read_file(path)
  assert (examples.anchors, examples.positives) == expected
  path = write(tmp_path, "pairs.tsv", "query\tdocument\nhow tall is it?\tIt is 3 m tall.\n"
                "a \"quoted\" query\tdoc\n")
  examples = pairs.read_file(path, ("query", "document"))
  assert (examples.anchors, examples.positives) == expected
  path = jsonl(tmp_path, "pairs.jsonl", [{"anchor": "how tall is it?", "positive": "It is 3 m"
                                           " tall."}, {"anchor": "a \"quoted\" query",
                                                       "positive": "doc"}])
  examples = pairs.read_file(path)
  assert (examples.anchors, examples.positives) == expected
  assert len(examples.take([1])) == 1


def test_pairs_errors(tmp_path):
  path = write(tmp_path, "fields.csv", "query,positive\nq,d\n")
  with raises(f"{path}: record 1 has no field 'anchor' (it has query, positive)"):
    pairs.read_file(path)
  path = write(tmp_path, "empty_text.csv", "anchor,positive\nq,d\nq2,  \n")
  with raises(f"{path}: record 2 has an empty 'positive'"):
    pairs.read_file(path)
  path = write(tmp_path, "short.csv", "anchor,positive\nq\n")
  with raises(f"{path}: record 1 has no value for 'positive'"):
    pairs.read_file(path)
  path = write(tmp_path, "header.tsv", "anchor\tpositive\n")
  with raises(f"{path}: no pairs"):
    pairs.read_file(path)
  path = write(tmp_path, "bad.jsonl", "{\"anchor\": \"q\", \"positive\": \"d\"}\n\n[1, 2]\n")
  with raises(f"{path}:3: not a JSON object"):
    pairs.read_file(path)
  path = jsonl(tmp_path, "null.jsonl", [{"anchor": None, "positive": "d"}])
  with raises(f"{path}: record 1 has no value for 'anchor'"):
    pairs.read_file(path)
  with raises(f"{path}: name two fields, the anchor's and the positive's (not ('anchor',))"):
    pairs.read_file(path, ("anchor",))
  path = str(tmp_path / "pairs.parquet")
  with raises(f"{path}: expected a .csv, .tsv or .jsonl file"):
    pairs.read_file(path)
  path = str(tmp_path / "nope.csv")
  with raises(f"{path}: no such file"):
    pairs.read_file(path)
  path = str(tmp_path / "latin1.csv")
  (tmp_path / "latin1.csv").write_bytes(b"anchor,positive\nZ\xfcrich,d\n")
  with raises(f"{path}: not UTF-8 text (invalid start byte at byte 17)"):
    pairs.read_file(path)
