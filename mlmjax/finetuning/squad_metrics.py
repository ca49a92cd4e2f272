"""SQuAD's exact-match and F1 metrics, reimplemented from the official evaluation scripts.

The scripts are `evaluate-v1.1.py` and `evaluate-v2.0.py` from the SQuAD explorer
(https://rajpurkar.github.io/SQuAD-explorer/). HuggingFace's `squad_v2` metric and
`transformers.data.metrics.squad_metrics` copy them too. This module works on plain dicts
instead of the dataset JSON, so it gives the same numbers:

  normalize_answer   lower-case, drop punctuation, drop the articles a/an/the, squash whitespace
  exact_match        1.0 when the normalised strings are equal
  f1                 bag-of-tokens F1 of the normalised strings (v2.0: empty vs empty is 1.0)
  score              mean over questions of the best score over each question's gold answers,
                     as percentages, split into answerable / unanswerable questions as v2.0 does
  best_threshold     v2.0's `find_best_thresh`: the no-answer threshold that maximises the score

A question with no gold answers (`[]`) is unanswerable. Its only gold answer is then "", so
only an empty prediction scores 1 (v2.0). With only answerable questions the numbers are
v1.1's. One deliberate difference: a question with no prediction counts 0 and stays in the
total, as v1.1 does ("Unanswered question ... will receive score 0"). v2.0 leaves it out of
the total, which would raise a model's score for each question it skipped.
"""

from __future__ import annotations

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)  # ASCII only, like the official script


def normalize_answer(s: str) -> str:
  """The official order matters: punctuation goes before articles, so "the-end" → "theend"
  keeps its "the", and articles become spaces that the whitespace fix then squashes."""
  text = s.lower()
  text = "".join(ch for ch in text if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def _tokens(s: str) -> list[str]:
  return normalize_answer(s).split()


def exact_match(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
  """Token-overlap F1, counting repeated tokens as often as both sides have them."""
  pred_tokens, gold_tokens = _tokens(prediction), _tokens(gold)
  if not pred_tokens or not gold_tokens:
    # v2.0: an empty answer is right only against an empty gold (unanswerable question).
    return float(pred_tokens == gold_tokens)
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_tokens)
  recall = num_same / len(gold_tokens)
  return 2.0 * precision * recall / (precision + recall)


def _gold_texts(answers: list[str]) -> list[str]:
  """v2.0 drops gold answers that normalise to nothing (e.g. "the"); if none is left, the
  question's gold is "" so that abstaining is the right answer."""
  texts = [a for a in answers if normalize_answer(a)]
  return texts or [""]


def _raw_scores(predictions: dict[str, str], gold: dict[str, list[str]]
                ) -> tuple[dict[str, float], dict[str, float]]:
  """Per question, the best exact match and F1 over its gold answers; 0 with no prediction."""
  exact, f1s = {}, {}
  for qid, answers in gold.items():
    if qid not in predictions:
      exact[qid] = f1s[qid] = 0.0  # v1.1's rule; see the module docstring
      continue
    texts, prediction = _gold_texts(answers), predictions[qid]
    exact[qid] = max(exact_match(prediction, t) for t in texts)
    f1s[qid] = max(f1(prediction, t) for t in texts)
  return exact, f1s


def _percent(scores: dict[str, float], qids: list[str]) -> float:
  return 100.0 * sum(scores[q] for q in qids) / len(qids)


def score(predictions: dict[str, str], gold: dict[str, list[str]]) -> dict[str, float]:
  """`predictions` maps a question id to its predicted answer text ("" to abstain); `gold` maps
  every question id to its gold answer texts, `[]` for an unanswerable question.

  Returns percentages (0..100) `exact_match` and `f1` over all of `gold`, and `total`. When some
  questions are unanswerable, also `has_answer_total` and `no_answer_total`, and each group's
  `*_exact_match` and `*_f1` for a group that isn't empty (as v2.0 prints HasAns_/NoAns_).
  Predictions for ids not in `gold` are ignored.
  """
  if not gold:
    raise ValueError("no gold questions to score")
  exact, f1s = _raw_scores(predictions, gold)
  qids = list(gold)
  result: dict[str, float] = {"exact_match": _percent(exact, qids), "f1": _percent(f1s, qids),
                              "total": len(qids)}
  no_answer = [q for q in qids if not gold[q]]
  if not no_answer:
    return result  # a v1.1-style data set: nothing to split
  has_answer = [q for q in qids if gold[q]]
  result["has_answer_total"] = len(has_answer)
  result["no_answer_total"] = len(no_answer)
  for name, group in (("has_answer", has_answer), ("no_answer", no_answer)):
    if group:
      result[f"{name}_exact_match"] = _percent(exact, group)
      result[f"{name}_f1"] = _percent(f1s, group)
  return result


def _find_best_thresh(predictions: dict[str, str], scores: dict[str, float],
                      no_answer_scores: dict[str, float], gold: dict[str, list[str]]
                      ) -> tuple[float, float]:
  """v2.0's `find_best_thresh`, line for line in effect.

  Start with every question abstaining: each unanswerable one scores 1. Then, in increasing
  order of no-answer score, let one question at a time answer with its prediction, and keep the
  running total's best and the no-answer score where it was reached. Official quirks kept so
  the numbers match: the threshold starts at 0.0 (returned when abstaining everywhere is best,
  whatever the scores' range); an unanswerable question loses 1 when its raw prediction is not
  "" even if it normalises to ""; among tied no-answer scores the best may fall mid-tie, so
  applying the threshold (which moves a whole tie at once) may not reproduce it.
  """
  # A question without a prediction scores 0 whatever the threshold, so it takes no part.
  # The official script walks its na-prob file's keys: sorting them (stably) in their own
  # order makes tied scores come out in the same order, which can change the best score.
  answered = [q for q in no_answer_scores if q in gold and q in predictions]
  cur_score = sum(1 for q in answered if not gold[q])
  best_score, best_thresh = cur_score, 0.0
  for qid in sorted(answered, key=lambda q: no_answer_scores[q]):
    if gold[qid]:
      cur_score += scores[qid]
    else:
      cur_score += -1 if predictions[qid] else 0
    if cur_score > best_score:  # strictly: the earliest (lowest) threshold wins a tie
      best_score, best_thresh = cur_score, no_answer_scores[qid]
  return 100.0 * best_score / len(gold), best_thresh


def best_threshold(predictions: dict[str, str], no_answer_scores: dict[str, float],
                   gold: dict[str, list[str]]) -> tuple[float, float, float]:
  """The no-answer threshold that maximises F1 on `gold`, as v2.0 finds it with `--na-prob-file`.

  `predictions` holds each question's best non-empty answer; `no_answer_scores` its no-answer
  score (null score minus best non-null score: higher means more likely unanswerable), which
  must cover every predicted question in `gold`. The rule applied is: predict "" where the
  no-answer score is > threshold, else the prediction. A question of `gold` without a prediction
  counts 0, as in `score`.

  Returns `(best_f1, best_exact, threshold)`, percentages and the F1-optimal threshold. As in the
  official script `best_exact` is the best exact match at its own optimal threshold, which can
  differ from the F1 one, so the pair may not be reachable with one threshold.
  """
  if not gold:
    raise ValueError("no gold questions to score")
  missing = [q for q in gold if q in predictions and q not in no_answer_scores]
  if missing:  # the official script would fail on them too (a KeyError)
    raise ValueError(f"{len(missing)} predicted questions lack a no-answer score: {missing[0]!r}")
  exact, f1s = _raw_scores(predictions, gold)
  best_exact, _ = _find_best_thresh(predictions, exact, no_answer_scores, gold)
  best_f1, threshold = _find_best_thresh(predictions, f1s, no_answer_scores, gold)
  return best_f1, best_exact, threshold
