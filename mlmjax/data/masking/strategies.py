"""The base masking strategies: one selection function each, registered in `SELECTORS`, the
single source of the strategy names. A selection function takes the rows to mask and the
masker's context and returns which tokens are selected (and their units, for replacement).

Common to all: maskable tokens are everything but [PAD]/[UNK]/[CLS]/[SEP]/[MASK] and segment 0
(padding); a row selects at most its budget (units.budget), and exactly its budget where it
picks single tokens. Strategies that pick whole units (words, entities) may end a little below
it when no remaining unit fits (BERT's whole-word rule).

  random      budget tokens uniformly without replacement (BERT, RoBERTa).
  whole_word  words (units.py) in random order; a word is taken whole if it fits in what is
              left of the budget, else skipped (BERT's whole-word masking).
  span        SpanBERT (spans.py); one 80/10/10 decision per span.
  entity      ERNIE-style: each entity is drawn with probability masking.entity_probability
              at every step, the drawn ones taken whole in random order while they fit, then
              the budget filled with whole words outside entities, so an entity is masked
              completely or not at all (1.0: entities first, every one that fits). Entities
              from a named-entity recogniser (masking.entity_ner; syntax.py), a gazetteer
              and/or a heuristic (entities.py).
  syntax      syntax-aware: whole words, noun chunks or small dependency subtrees, weighted by
              POS and dependency relation (syntax.py).
  semantic    PMI-Masking: correlated word n-grams as units, other words whole, one 80/10/10
              decision per unit (cooccurrence.py).
  contextual  InforMask: of several random whole-word masks, the one whose hidden words their
              context predicts best (sample-and-score, cooccurrence.py).
  frequency   weighted sampling without replacement, weight count**(-frequency_alpha)
              (counts from vocab_stats; unseen tokens count as 1). The first pick is
              proportional to the weight, each next one among the rest (Efraimidis-Spirakis).
              alpha = 0 is exactly `random`.
  adaptive    like frequency, with per-token-id weights fed back from the training loss (see
              training/run/masking_feedback.py); weight 0 = never selected; exactly `random`
              before the first table.

Composites (masker.py): `mixture` (one base strategy per example) and `static` (BERT's fixed
masks, made by a base strategy).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import cooccurrence as cooccurrence_lib
from mlmjax.data.masking import entities
from mlmjax.data.masking import settings as settings_lib
from mlmjax.data.masking import spans
from mlmjax.data.masking import syntax
from mlmjax.data.masking import uniforms
from mlmjax.data.masking import units
from mlmjax.models import special_ids


@dataclasses.dataclass
class Rows:
  """The arrays a selection works on: real rows, or single packed sequences (static)."""

  ids: np.ndarray       # [R, T] int32
  seg: np.ndarray       # [R, T] int32, 0 = padding
  draws: uniforms.Draws
  maskable: np.ndarray  # [R, T] bool
  budget: np.ndarray    # [R] predictions to make
  want: np.ndarray      # [R] the budget before the max_predictions cap
  annotations: np.ndarray | None = None  # [R, T, F] word features (data/text/annotation.py)

  @classmethod
  def make(cls, ids, seg, draws, mask_rate: float, max_predictions: int,
           annotations: np.ndarray | None = None) -> "Rows":
    maskable = (ids >= special_ids.NUM_SPECIAL) & (seg > 0)
    budget, want = units.budget(maskable.sum(axis=1), mask_rate, max_predictions)
    return cls(ids, seg, draws, maskable, budget, want, annotations)

  def annotated(self, strategy: str) -> np.ndarray:
    if self.annotations is None:  # the pipeline annotates when the settings ask for it
      raise ValueError(f"masking strategy {strategy!r} needs the batch's word annotations")
    return self.annotations


@dataclasses.dataclass
class Selection:
  selected: np.ndarray        # [R, T] bool
  head_col: np.ndarray        # [R, T] column of the token's unit head (valid where selected)
  per_unit_decision: bool     # one 80/10/10 decision per unit (span) instead of per token


def no_weights(step: int) -> None:
  """The token weights of a run without adaptive feedback: none (uniform)."""
  del step


@dataclasses.dataclass
class Context:
  """What selections read besides the rows: settings, vocabulary tables, gazetteer, the
  co-occurrence tables (semantic, contextual), and the adaptive weight table in force at a step
  (None: uniform)."""

  settings: settings_lib.Settings
  stats: vocab_stats_lib.VocabStats
  gazetteer: entities.Gazetteer | None = None
  token_weights: Callable[[int], np.ndarray | None] = no_weights
  cooccurrence: cooccurrence_lib.Cooccurrence | None = None

  def __post_init__(self):
    s = self.settings
    self.log_counts = np.log(np.maximum(np.asarray(self.stats.counts, np.float64), 1.0))
    self.span_cdf = spans.length_cdf(s.span_p, s.span_max_words)
    self.pos_weights, self.dep_weights = syntax.parse_weights(s.syntax_weights)
    self.entity_codes = syntax.parse_labels(s.entity_labels)


def _tokens(rows: Rows, score: np.ndarray) -> Selection:
  """Single tokens in ascending score, up to the budget."""
  accepted = units.greedy_units(score, rows.maskable, np.ones_like(rows.ids), rows.budget)
  return Selection(accepted & rows.maskable, np.broadcast_to(
      np.arange(rows.ids.shape[1]), rows.ids.shape), False)


def _exponential_keys(rows: Rows) -> np.ndarray:
  """log of Exp(1) draws: subtracting log(weight) gives Efraimidis-Spirakis keys."""
  with np.errstate(divide="ignore"):
    return np.log(-np.log1p(-rows.draws.u(uniforms.SELECT, rows.ids.shape[1])))


def select_random(rows: Rows, ctx: Context) -> Selection:
  del ctx
  return _tokens(rows, rows.draws.u(uniforms.SELECT, rows.ids.shape[1]))


def select_frequency(rows: Rows, ctx: Context) -> Selection:
  return _tokens(rows, _exponential_keys(rows)
                 + ctx.settings.frequency_alpha * ctx.log_counts[rows.ids])


def select_adaptive(rows: Rows, ctx: Context) -> Selection:
  weights = ctx.token_weights(rows.draws.step)
  if weights is None:  # same order as the keys below with unit weights: exactly `random`
    return select_random(rows, ctx)
  with np.errstate(divide="ignore"):  # weight 0 -> +inf: never selected
    return _tokens(rows, _exponential_keys(rows) - np.log(weights[rows.ids]))


def _whole_units(rows: Rows, heads: np.ndarray, score: np.ndarray) -> Selection:
  head_col = units.head_cols(heads)
  sizes = units.unit_sizes(head_col, rows.maskable)
  accepted = units.greedy_units(score, heads, sizes, rows.budget)
  return Selection(units.expand(accepted, head_col, rows.maskable), head_col, False)


def _word_starts(rows: Rows, ctx: Context) -> np.ndarray:
  return units.word_starts(rows.ids, rows.seg, rows.maskable, ctx.stats)


def select_whole_word(rows: Rows, ctx: Context) -> Selection:
  return _whole_units(rows, _word_starts(rows, ctx),
                      rows.draws.u(uniforms.SELECT, rows.ids.shape[1]))


def select_entity(rows: Rows, ctx: Context) -> Selection:
  covered, linked = entities.entity_spans(
      rows.ids, rows.seg, rows.maskable, _word_starts(rows, ctx), ctx.stats, ctx.gazetteer,
      ctx.settings.entity_heuristic)
  if ctx.settings.entity_ner:  # overlapping spans of several sources merge into one
    c, l = syntax.ner_spans(rows.annotated("entity"), rows.seg, rows.maskable,
                            ctx.entity_codes)
    linked |= l
    covered |= c
  heads = (covered & ~linked) | (_word_starts(rows, ctx) & ~covered)
  # Each entity is drawn this step with probability masking.entity_probability (a draw at its
  # first piece); the drawn ones come first (scores in [0, 1)), then the words outside
  # entities (in [1, 2)); an entity not drawn waits for another step.
  length = rows.ids.shape[1]
  drawn = rows.draws.u(uniforms.ENTITY, length) < ctx.settings.entity_probability
  u = rows.draws.u(uniforms.SELECT, length)
  return _whole_units(rows, heads, np.where(covered, np.where(drawn, u, np.inf), u + 1.0))


def select_syntax(rows: Rows, ctx: Context) -> Selection:
  s = ctx.settings
  heads, weight = syntax.units_and_weights(
      rows.annotated("syntax"), rows.seg, rows.maskable, s.syntax_unit, s.phrase_max_words,
      ctx.pos_weights, ctx.dep_weights)
  with np.errstate(divide="ignore"):  # weight 0 -> +inf: never selected
    return _whole_units(rows, heads, _exponential_keys(rows) - np.log(weight))


def _co_table(ctx: Context, strategy: str) -> cooccurrence_lib.Cooccurrence:
  if ctx.cooccurrence is None:  # run_input.py counts them when the settings ask for them
    raise ValueError(f"masking strategy {strategy!r} needs the co-occurrence statistics")
  return ctx.cooccurrence


def select_semantic(rows: Rows, ctx: Context) -> Selection:
  table = _co_table(ctx, "semantic")
  length = rows.ids.shape[1]
  starts, hashes = cooccurrence_lib.word_hashes(rows.ids, rows.seg, rows.maskable, ctx.stats)
  heads, _ = cooccurrence_lib.ngram_units(starts, hashes, rows.seg, rows.maskable, table,
                                          rows.draws.u(uniforms.OVERLAP, length))
  selection = _whole_units(rows, heads, rows.draws.u(uniforms.SELECT, length))
  return dataclasses.replace(selection, per_unit_decision=True)  # 80/10/10 per unit


def select_contextual(rows: Rows, ctx: Context) -> Selection:
  """InforMask's sample-and-score: of masking.contextual_candidates random whole-word masks of
  a row, the one of the highest informative relevance (cooccurrence.py)."""
  table = _co_table(ctx, "contextual")
  num_rows, length = rows.ids.shape
  starts, hashes = cooccurrence_lib.word_hashes(rows.ids, rows.seg, rows.maskable, ctx.stats)
  pairs = cooccurrence_lib.word_pairs(starts, hashes, rows.seg, table)
  head_col = units.head_cols(starts)  # the words, the same for every candidate
  sizes = units.unit_sizes(head_col, rows.maskable)
  best, best_score = None, np.full(num_rows, -np.inf)
  for k in range(ctx.settings.contextual_candidates):
    accepted = units.greedy_units(rows.draws.u(uniforms.CANDIDATES + k, length), starts, sizes,
                                  rows.budget)  # a random whole-word mask: the words it takes
    score = cooccurrence_lib.informative_relevance(pairs, accepted[starts], num_rows)
    better = score > best_score  # ties keep the earlier candidate
    best_score = np.where(better, score, best_score)
    best = accepted if best is None else np.where(better[:, None], accepted, best)
  return Selection(units.expand(best, head_col, rows.maskable), head_col, False)


def select_span(rows: Rows, ctx: Context) -> Selection:
  selected, head_col = spans.select(rows.ids, rows.seg, rows.maskable, _word_starts(rows, ctx),
                                    rows.budget, rows.draws, ctx.span_cdf)
  return Selection(selected, head_col, True)


SELECTORS: dict[str, Callable[[Rows, Context], Selection]] = {
    "random": select_random,
    "whole_word": select_whole_word,
    "span": select_span,
    "entity": select_entity,
    "frequency": select_frequency,
    "adaptive": select_adaptive,
    "syntax": select_syntax,
    "semantic": select_semantic,
    "contextual": select_contextual,
}
