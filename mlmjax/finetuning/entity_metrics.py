"""Entity-level precision, recall and F1 for tagging tasks (NER), as `seqeval.metrics` has them.

This reimplements seqeval's default mode (no `mode="strict"`, no `scheme`), which follows the
CoNLL `conlleval` script: entities are read off the tags by `get_entities` with seqeval's
`start_of_chunk` / `end_of_chunk` rules, and an entity counts as found only when a predicted
one has the same type, start and end. The rules accept IOB1, IOB2, IOE1/2 and IOBES alike,
and they forgive ill-formed sequences the way conlleval does: an I- tag after O (or after a
different type) starts an entity, and a change of type ends one.

  get_entities   [(type, start, end)] of one tag sequence, `end` inclusive
  score          micro precision / recall / F1 over all sentences, token accuracy, and
                 per-type precision / recall / F1 / support

Undefined ratios (no predicted or no gold entities) are 0, as seqeval with `zero_division=0`;
so is the accuracy of no tokens, where seqeval would divide by zero.
"""

from __future__ import annotations


def _split(tag: str) -> tuple[str, str]:
  """seqeval's split: the prefix is the first character and the type what follows the first
  "-". So "O" is ("O", "_") and a bare "PER" is ("P", "ER"): seqeval's quirks, kept so the
  numbers match."""
  return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
  """Whether an entity ended at the previous token."""
  if prev_tag in ("E", "S"):
    return True  # E- and S- close their entity themselves
  if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
    return True  # a new entity or an outside token follows
  # A type change ends any entity ("." is conlleval's sentence boundary, not an entity).
  return prev_tag not in ("O", ".") and prev_type != type_


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
  """Whether an entity starts at the current token."""
  if tag in ("B", "S"):
    return True
  if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
    return True  # an I-/E- with nothing open to continue begins one (IOB1, IOE, or an error)
  return tag not in ("O", ".") and prev_type != type_


def get_entities(tags: list[str]) -> list[tuple[str, int, int]]:
  """The entities of one tag sequence as (type, start, end), `end` inclusive, in order.

  >>> get_entities(["B-PER", "I-PER", "O", "B-LOC"])
  [('PER', 0, 1), ('LOC', 3, 3)]
  """
  prev_tag, prev_type, begin = "O", "", 0
  entities = []
  for i, full_tag in enumerate(list(tags) + ["O"]):  # the trailing O closes a final entity
    tag, type_ = _split(full_tag)
    if _end_of_chunk(prev_tag, tag, prev_type, type_):
      entities.append((prev_type, begin, i - 1))
    if _start_of_chunk(prev_tag, tag, prev_type, type_):
      begin = i
    prev_tag, prev_type = tag, type_
  return entities


def _flatten(sentences: list[list[str]]) -> list[str]:
  """All sentences in one sequence with an "O" after each, as seqeval joins them: entities can
  then be compared by position alone."""
  return [tag for sentence in sentences for tag in list(sentence) + ["O"]]


def _prf(true_pos: int, predicted: int, actual: int) -> tuple[float, float, float]:
  """Precision, recall and F1, the F1 computed from the two ratios as seqeval does (not as
  2tp / (predicted + actual)) so the last bits agree too."""
  precision = true_pos / predicted if predicted else 0.0
  recall = true_pos / actual if actual else 0.0
  denominator = precision + recall
  return precision, recall, (2.0 * precision * recall / denominator if denominator else 0.0)


def _by_type(entities: list[tuple[str, int, int]]) -> dict[str, set[tuple[int, int]]]:
  spans: dict[str, set[tuple[int, int]]] = {}
  for type_, start, end in entities:
    spans.setdefault(type_, set()).add((start, end))
  return spans


def _check_lengths(gold: list[list[str]], predicted: list[list[str]]) -> None:
  if len(gold) != len(predicted):
    raise ValueError(f"{len(predicted)} predicted sequences for {len(gold)} gold ones")
  for i, (g, p) in enumerate(zip(gold, predicted)):
    if len(g) != len(p):
      raise ValueError(f"sequence {i}: {len(p)} predicted tags for {len(g)} gold tags")


def score(gold: list[list[str]], predicted: list[list[str]]) -> dict:
  """Metrics of `predicted` tag sequences against `gold` ones, one list of tags per sentence.

  Returns `precision`, `recall`, `f1` (micro-averaged over entities) and `accuracy` (over
  tokens), fractions in 0..1, and `per_type`: {type: {precision, recall, f1, support}} for every
  type in either side, `support` being the number of gold entities of that type.
  """
  _check_lengths(gold, predicted)
  gold_spans = _by_type(get_entities(_flatten(gold)))
  pred_spans = _by_type(get_entities(_flatten(predicted)))
  per_type, totals = {}, [0, 0, 0]
  for type_ in sorted(set(gold_spans) | set(pred_spans)):
    g, p = gold_spans.get(type_, set()), pred_spans.get(type_, set())
    counts = (len(g & p), len(p), len(g))
    precision, recall, f = _prf(*counts)
    per_type[type_] = {"precision": precision, "recall": recall, "f1": f, "support": len(g)}
    totals = [t + c for t, c in zip(totals, counts)]
  precision, recall, f = _prf(*totals)
  tokens = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
  accuracy = sum(g == p for g, p in tokens) / len(tokens) if tokens else 0.0
  return {"precision": precision, "recall": recall, "f1": f, "accuracy": accuracy,
          "per_type": per_type}
