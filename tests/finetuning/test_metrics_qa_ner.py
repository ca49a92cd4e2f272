"""SQuAD's exact match / F1 / no-answer threshold and seqeval's entity F1, on worked examples.

The SQuAD numbers are worked by hand from the official v2.0 script's rules; the entity numbers
are what seqeval 1.2.2 gives for the same inputs (seqeval is not a dependency)."""

from __future__ import annotations

import pytest

from mlmjax.finetuning import entity_metrics
from mlmjax.finetuning import squad_metrics


# --- SQuAD -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, normalized", [
    ("The Cat  sat!", "cat sat"),                 # case, punctuation, article, whitespace
    ("An apple a day", "apple day"),              # all three articles go, as whole words only
    ("  Hello,\tWorld\n", "hello world"),
    ("theatre anthem", "theatre anthem"),         # "the"/"an" inside a word stay
    ("the-end", "theend"),                        # punctuation goes first, so this "the" stays
    ("Levi's Stadium.", "levis stadium"),
    ("the", ""),
])
def test_squad_normalize_answer(text, normalized):
  assert squad_metrics.normalize_answer(text) == normalized


def test_squad_exact_match_and_f1_of_partial_overlaps():
  assert squad_metrics.exact_match("The Cat!", "cat") == 1.0
  assert squad_metrics.exact_match("cats", "cat") == 0.0
  # [big, cat] vs [cat, sat, down]: 1 common token, precision 1/2, recall 1/3 → F1 0.4.
  assert squad_metrics.f1("the big cat", "a cat sat down") == pytest.approx(0.4)
  # Repeats count as often as both sides have them: 2 common, precision 2/3, recall 1 → 0.8.
  assert squad_metrics.f1("cat cat cat", "cat cat") == pytest.approx(0.8)
  assert squad_metrics.f1("dog", "cat") == 0.0
  # v2.0: empty (after normalising) is right only against empty.
  assert squad_metrics.f1("", "") == 1.0
  assert squad_metrics.f1("the", "") == 1.0
  assert squad_metrics.f1("cat", "") == 0.0
  assert squad_metrics.f1("", "cat") == 0.0


def test_squad_score_takes_the_best_gold_answer():
  gold = {"q1": ["Denver Broncos", "The Broncos"],
          "q2": ["Santa Clara, California", "Levi's Stadium"],
          "q3": ["1966"]}
  predictions = {"q1": "broncos", "q2": "Levi's Stadium in Santa Clara", "q3": "1967",
                 "other": "ignored"}
  # q1: exact against "The Broncos" (F1 2/3 against "Denver Broncos"). q2: 5 predicted tokens,
  # F1 1/2 against "santa clara california" and 4/7 against "levis stadium". q3: 0.
  result = squad_metrics.score(predictions, gold)
  assert result == {"exact_match": pytest.approx(100 / 3),
                    "f1": pytest.approx(100 * (1 + 4 / 7) / 3), "total": 3}


def test_squad_score_unanswerable_questions():
  gold = {"a": ["Paris"], "b": [], "c": []}
  predictions = {"a": "paris", "b": "", "c": "London"}  # b abstains rightly, c answers wrongly
  result = squad_metrics.score(predictions, gold)
  assert result == pytest.approx({
      "exact_match": 200 / 3, "f1": 200 / 3, "total": 3,
      "has_answer_exact_match": 100.0, "has_answer_f1": 100.0, "has_answer_total": 1,
      "no_answer_exact_match": 50.0, "no_answer_f1": 50.0, "no_answer_total": 2})
  # With no answerable question there is no has-answer score, only its count.
  only_no = squad_metrics.score({"b": ""}, {"b": []})
  assert only_no["has_answer_total"] == 0 and "has_answer_f1" not in only_no
  assert only_no["no_answer_f1"] == 100.0
  # A gold answer that normalises to nothing is dropped, so abstaining is right (v2.0).
  assert squad_metrics.score({"q": ""}, {"q": ["The"]})["exact_match"] == 100.0


def test_squad_missing_prediction_counts_zero():
  gold = {"a": ["x y"], "b": ["z"]}
  assert squad_metrics.score({"a": "x y"}, gold)["exact_match"] == 50.0
  with pytest.raises(ValueError):
    squad_metrics.score({}, {})


def test_squad_best_threshold():
  gold = {"q1": ["Paris"], "q2": ["blue whale"], "q3": [], "q4": []}
  predictions = {"q1": "Paris", "q2": "whale", "q3": "Rome", "q4": "Berlin"}
  no_answer = {"q1": -2.0, "q2": -1.0, "q3": 1.0, "q4": 0.5}
  # Answering everything: F1 (1 + 2/3 + 0 + 0) / 4.
  assert squad_metrics.score(predictions, gold)["f1"] == pytest.approx(100 * (5 / 3) / 4)
  # Walk up the no-answer scores from "all abstain" (2 right): q1 +1 → 3, q2 +2/3 → 11/3,
  # q4 −1, q3 −1. F1 peaks at 11/3 after q2, threshold −1.0; exact match peaks at 3 after q1
  # (q2 adds 0), which is its own best even though the returned threshold is F1's.
  best_f1, best_exact, threshold = squad_metrics.best_threshold(predictions, no_answer, gold)
  assert (best_f1, best_exact, threshold) == (pytest.approx(100 * 11 / 12), 75.0, -1.0)
  # Abstaining where the no-answer score is > threshold gives that F1.
  applied = {q: ("" if no_answer[q] > threshold else p) for q, p in predictions.items()}
  assert squad_metrics.score(applied, gold)["f1"] == pytest.approx(best_f1)


def test_squad_best_threshold_official_edge_cases():
  # Abstaining everywhere is best: the official script reports its starting threshold, 0.0.
  assert squad_metrics.best_threshold({"q": "x"}, {"q": -5.0}, {"q": []}) == (100.0, 100.0, 0.0)
  with pytest.raises(ValueError, match="no-answer score"):
    squad_metrics.best_threshold({"q": "x"}, {}, {"q": ["x"]})


# --- entities (seqeval) ------------------------------------------------------------------------

@pytest.mark.parametrize("tags, entities", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    (["O", "I-PER", "I-PER", "O"], [("PER", 1, 2)]),                      # I- after O starts one
    (["I-PER", "I-PER", "B-PER", "I-LOC"],                                # IOB1
     [("PER", 0, 1), ("PER", 2, 2), ("LOC", 3, 3)]),
    (["B-PER", "I-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 2, 3)]),  # type change splits
    (["B-PER", "I-LOC", "E-PER"], [("PER", 0, 0), ("LOC", 1, 1), ("PER", 2, 2)]),
    (["S-PER", "B-LOC", "I-LOC", "E-LOC", "S-ORG", "O"],                  # IOBES
     [("PER", 0, 0), ("LOC", 1, 3), ("ORG", 4, 4)]),
    (["I-PER", "E-PER", "I-PER", "E-PER"], [("PER", 0, 1), ("PER", 2, 3)]),  # IOE: E- closes
    (["B-PER", "B-PER", "S-PER", "I-PER"],
     [("PER", 0, 0), ("PER", 1, 1), ("PER", 2, 2), ("PER", 3, 3)]),
    (["B", "I", "O"], [("_", 0, 1)]),                                     # no type: "_"
    (["MISC", "MISC", "O"], [("ISC", 0, 1)]),  # bare "MISC": prefix M, type ISC
    (["O", "O"], []),
    ([], []),
])
def test_get_entities_as_seqeval(tags, entities):
  assert entity_metrics.get_entities(tags) == entities


def test_entity_score_seqeval_documented_example():
  gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  predicted = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  result = entity_metrics.score(gold, predicted)
  assert (result["precision"], result["recall"], result["f1"]) == (0.5, 0.5, 0.5)
  assert result["accuracy"] == pytest.approx(0.8)
  assert result["per_type"] == {
      "MISC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
      "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}}


def test_entity_score_mixed_schemes_and_boundaries():
  # Gold in IOBES, predictions in IOB2: the MISC spans agree, a LOC is predicted as PER.
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["S-ORG", "O", "B-MISC", "E-MISC"]]
  predicted = [["B-PER", "I-PER", "O", "B-PER"], ["S-ORG", "O", "B-MISC", "I-MISC"]]
  result = entity_metrics.score(gold, predicted)
  assert (result["precision"], result["recall"], result["f1"]) == (0.75, 0.75, 0.75)
  assert result["accuracy"] == 0.75
  assert result["per_type"]["PER"] == pytest.approx(
      {"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
  assert result["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
  # A span one token short is wrong; an I- after O is still an entity (here a right one).
  gold = [["B-PER", "I-PER", "I-PER", "O", "B-LOC", "O"]]
  predicted = [["B-PER", "I-PER", "O", "O", "I-LOC", "O"]]
  result = entity_metrics.score(gold, predicted)
  assert (result["precision"], result["recall"], result["f1"]) == (0.5, 0.5, 0.5)
  assert result["accuracy"] == pytest.approx(4 / 6)
  # Entities do not run on across sentences: two gold PERs, both found.
  result = entity_metrics.score([["B-PER"], ["I-PER"]], [["B-PER"], ["B-PER"]])
  assert (result["f1"], result["accuracy"], result["per_type"]["PER"]["support"]) == (1.0, 0.5, 2)


def test_entity_score_undefined_ratios_are_zero():
  result = entity_metrics.score([["B-PER", "O"]], [["B-LOC", "O"]])
  assert (result["precision"], result["recall"], result["f1"], result["accuracy"]) == (0, 0, 0, 0.5)
  assert result["per_type"]["LOC"]["support"] == 0  # a type only predicted still appears
  result = entity_metrics.score([["O", "O"]], [["O", "O"]])
  assert (result["f1"], result["accuracy"], result["per_type"]) == (0.0, 1.0, {})


def test_entity_score_rejects_length_mismatches():
  with pytest.raises(ValueError):
    entity_metrics.score([["O", "B-PER"]], [["O"]])
  with pytest.raises(ValueError):
    entity_metrics.score([["O"], ["O"]], [["O"]])
