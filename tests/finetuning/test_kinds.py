"""The task kinds' own parts, without training: how examples become rows (words to their first
piece, QA windows and their targets, option groups), how outputs are decoded back (answer text
from the original context, tags per word), and the retrieval metrics."""

import jax.numpy as jnp
import numpy as np
import pytest

from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import embeddings
from mlmjax.finetuning import multiple_choice
from mlmjax.finetuning import question_answering
from mlmjax.finetuning import records
from mlmjax.finetuning import token_classification
from mlmjax.finetuning.settings import FinetuneSettings
from mlmjax.models import special_ids


@pytest.fixture(scope="module")
def sp(tokenizer_path):
  return tokenizer_lib.Tokenizer.load(tokenizer_path)


def _settings(**qa):
  config = finetune_config.get_config()
  config.qa.update(**qa)
  return FinetuneSettings.from_config(config)


@pytest.mark.parametrize("which", ["sentencepiece", "wordpiece"])
def test_a_word_is_labelled_at_its_first_piece(which, sp, wordpiece):
  tok = sp if which == "sentencepiece" else wordpiece
  words = ["And", "Nebuchadnezzar", "king", "of", "Babylon,", "said:", "\u201cBehold\u201d"]
  tags = ["O", "B-NAME", "O", "O", "B-NAME", "O", "O"]
  kind = token_classification.TokenClassification(["O", "B-NAME", "I-NAME"])
  enc = kind.encode(records.TaggedExamples([words], [tags]), tok, 64, "test")
  ids, starts, ends = tok.encode_offsets([" ".join(words)])[0]
  first = token_classification.first_pieces(words, starts, ends)
  text = " ".join(words)
  for w, p in enumerate(first):  # each word's first piece starts inside that word
    assert text[starts[p]:ends[p]].strip() and words[w].lower().startswith(
        text[starts[p]:ends[p]].strip().lower().lstrip("\u2581")[:1])
  row = enc.rows
  assert row["input_ids"][0, 0] == special_ids.CLS_ID
  assert row["input_ids"][0, len(ids) + 1] == special_ids.SEP_ID
  labelled = np.nonzero(row["weights"][0])[0]
  assert labelled.tolist() == (first + 1).tolist()  # one label a word, after [CLS]
  assert row["labels"][0, labelled].tolist() == [0, 1, 0, 0, 1, 0, 0]
  # Decoding: logits that favour the gold tag at each first piece give the gold tags back;
  # a row cut short predicts "O" for the words it lost.
  logits = np.zeros((1, 64, 3), np.float32)
  logits[0, labelled, row["labels"][0, labelled]] = 5.0
  assert kind.predict(logits, enc.host["word_position"], [7]) == [tags]
  short = kind.encode(records.TaggedExamples([words], [tags]), tok, first[4] + 2, "test")
  assert short.host["word_position"][0, 4:].tolist() == [-1, -1, -1]
  assert kind.predict(np.zeros((1, first[4] + 2, 3)), short.host["word_position"], [7])[0][4] == "O"


CONTEXT = ("In the beginning God created the heaven and the earth. And the earth was without"
           " form, and void; and darkness was upon the face of the deep. And the Spirit of God"
           " moved upon the face of the waters. And God said, Let there be light: and there was"
           " light.")


def test_qa_windows_targets_and_decoding(sp):
  answer = "darkness"
  start = CONTEXT.index(answer)
  examples = records.QAExamples(["q1", "q2"], ["What was upon the face of the deep?", "Who?"],
                                [CONTEXT, CONTEXT], [[(answer, start)], []])
  kind = question_answering.QuestionAnswering(_settings(max_query_length=8, doc_stride=10).qa,
                                              unanswerable=True)
  enc = kind.encode(examples, sp, 32, "test")
  rows, host = enc.rows, enc.host
  n_windows = int((host["example_index"] == 0).sum())
  assert n_windows > 3 and (host["example_index"] == 1).sum() == n_windows
  # Windows overlap by stride: every context token is in some window; the answer is the target
  # of exactly the windows that hold all of it, [CLS] (0) elsewhere and for the unanswerable.
  holding = 0
  for r in range(len(enc)):
    s, e = rows["start_positions"][r], rows["end_positions"][r]
    if host["example_index"][r] == 1:
      assert s == e == 0
      continue
    if s:
      holding += 1
      assert CONTEXT[host["offsets"][r, s, 0]:host["offsets"][r, e, 1]] == answer
    q = sp.encode([examples.questions[0]])[0][:8]
    assert rows["input_ids"][r, :len(q) + 2].tolist() == [special_ids.CLS_ID, *q,
                                                         special_ids.SEP_ID]
    assert rows["token_type_ids"][r, len(q) + 2] == 1
  assert holding >= 1
  # Decoding: logits peaked at the answer's tokens in one window give the answer back, cut
  # from the original text; the unanswerable question's [CLS] wins by a margin.
  logits = np.zeros((len(enc), 32, 2), np.float32)
  r = int(np.nonzero(rows["start_positions"])[0][0])
  logits[r, rows["start_positions"][r], 0] = logits[r, rows["end_positions"][r], 1] = 9.0
  q2 = np.nonzero(host["example_index"] == 1)[0]
  logits[q2, 0, :] = 6.0
  texts, no_answer = kind.decode(logits, enc, examples)
  assert texts["q1"] == answer and no_answer["q1"] < 0 < no_answer["q2"]
  metrics = kind.score(logits, enc, examples)
  assert metrics["exact_match"] == metrics["f1"] == 100.0
  assert metrics["no_answer_f1"] == metrics["has_answer_f1"] == 100.0
  # Without unanswerable questions (SQuAD 1.1) the best span is always the answer.
  kind.unanswerable = False
  assert kind.predict(texts, no_answer, 0.0)["q2"] == texts["q2"]


def test_qa_answer_longer_than_max_answer_length_is_not_decoded(sp):
  answer = "the face of the deep"
  examples = records.QAExamples(["q"], ["Where?"], [CONTEXT], [[(answer, CONTEXT.index(answer))]])
  kind = question_answering.QuestionAnswering(_settings(max_answer_length=2).qa, False)
  enc = kind.encode(examples, sp, 128, "test")
  assert len(enc) == 1 and enc.rows["start_positions"][0] > 0
  logits = np.zeros((1, 128, 2), np.float32)
  logits[0, enc.rows["start_positions"][0], 0] = logits[0, enc.rows["end_positions"][0], 1] = 9
  assert kind.decode(logits, enc, examples)[0]["q"] != answer
  kind = question_answering.QuestionAnswering(_settings().qa, False)
  assert kind.decode(logits, enc, examples)[0]["q"] == answer


def test_choices_are_grouped_pairs_and_scored_per_example(sp):
  examples = records.ChoiceExamples(["In the beginning", "And God said"],
                                    [["God created", "Moses spake", "the end"],
                                     ["Let there be light", "Amen", "Selah"]],
                                    np.array([0, 0], np.int32))
  kind = multiple_choice.MultipleChoice()
  enc = kind.encode(examples, sp, 16, "test")
  assert enc.rows["input_ids"].shape == (2, 3, 16) and enc.rows["labels"].tolist() == [0, 0]
  a, b = sp.encode(["And God said", "Amen"])
  assert enc.rows["input_ids"][1, 1, :len(a) + len(b) + 3].tolist() == [
      special_ids.CLS_ID, *a, special_ids.SEP_ID, *b, special_ids.SEP_ID]
  scores = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
  metrics = kind.score(scores, enc, examples)
  assert metrics["accuracy"] == 0.5
  assert metrics["loss"] == pytest.approx(np.mean([-np.log(np.exp(2) / (np.exp(2) + np.e + 1)),
                                                   -np.log(1 / (1 + np.exp(3) + np.e))]))


def test_retrieval_metrics_and_the_in_batch_loss():
  anchors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.3]])
  # By cosine, anchor 0's own positive ranks 1st, anchor 1's 2nd (behind positive 2), anchor
  # 2's 3rd (behind positives 0 and 1).
  positives = np.array([[1.0, 0.0], [1.0, 1.0], [0.1, 1.0]])
  m = embeddings.retrieval_metrics(anchors, positives, scale=20.0)
  assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
  assert (m["recall@1"], m["recall@5"]) == (pytest.approx(1 / 3), 1.0)
  # The train objective's loss on the same batch is the dev loss: cross-entropy of each
  # anchor's own positive among the batch's positives.
  kind = embeddings.Embedding(temperature=0.05)
  emb = jnp.asarray(np.stack([anchors, positives], 1), jnp.float32)
  sums = kind.objective().sums(emb, {"weights": jnp.ones(3), "pair_ids": jnp.arange(3)})
  assert float(sums["loss_sum"]) / 3 == pytest.approx(m["loss"], rel=1e-5)
  assert float(sums["correct"]) == 1.0
  # The same pair twice in a batch (batches run across epoch ends) is not its own negative:
  # alone in a batch, its loss is 0, not log 2.
  twice = jnp.concatenate([emb[:1], emb[:1]])
  sums = kind.objective().sums(twice, {"weights": jnp.ones(2), "pair_ids": jnp.array([7, 7])})
  assert float(sums["loss_sum"]) == pytest.approx(0.0, abs=1e-6) and float(sums["correct"]) == 2
