"""Host-side masking for MLM: every strategy, vectorised in numpy over a whole batch.

The `config.masking` keys are parsed and validated in masking_settings.py; word, span and
entity helpers live in mask_units.py.

Randomness. Every random number is a counter-based hash: dynamic strategies draw
`uniform(seed, stream, step, example id, column)`, so an example's mask is a pure function of
(seed, step, global example index): independent of the batch it sits in, of the process that
builds it, and of interruptions and resumes; a fresh mask every step (RoBERTa). `static` draws
`(seed, stream, sequence key, epoch % dupe_factor, position in the sequence)` instead.

Common to all strategies:
  * Maskable tokens: everything but [PAD]/[UNK]/[CLS]/[SEP]/[MASK] and segment 0 (padding).
  * Budget: k = min(max_predictions_per_seq, max(1, round(mask_rate * n))) tokens for a row with
    n maskable tokens (0 if n = 0). Strategies never select more than k; the ones that pick
    whole units (words, spans, entities) may end a little below k when no remaining unit fits
    (BERT's whole-word rule). A warning is logged once if many rows want more than
    max_predictions_per_seq (the cap then truncates the rate).
  * Replacement: each selected token becomes [MASK] with probability mask_token_prob, a random
    non-special token with random_token_prob, else stays; decided per token, except for
    `span` (per span). `replacement='uniform'` draws the random token uniformly, `'unigram'`
    proportionally to its corpus count (counts from `vocab_stats`; never-seen tokens are
    never drawn).
  * Words (whole_word, span, entity): a word starts at a piece that begins with U+2581, at a
    punctuation piece, at the piece after a punctuation piece, and after any special token or
    packed-sequence boundary; it continues through the following pieces. So punctuation is
    always a word of its own (as BERT's BasicTokenizer splits it): "don't" is [don]['][t],
    "God," is [God][,]. A piece that is exactly "▁" starts the word of the pieces after it.
    Words, spans and entities never cross a special token or a packed-sequence boundary.

Strategies (`masking.strategy`):
  random      k tokens uniformly without replacement (BERT, RoBERTa).
  whole_word  Words in random order; a word is taken whole if it fits in what is left of the
              budget, else skipped (BERT's whole-word masking). 80/10/10 is decided per piece.
  span        SpanBERT. Repeatedly: draw a length L in words from Geometric(span_p) truncated to
              1..span_max_words and renormalised, as SpanBERT's code does (p = 0.2, 10 words:
              mean 3.8 words, the paper's figure; clipping min(L, 10) would give 4.5); pick the
              first word uniformly among the words where L unselected words fit without crossing
              a boundary (if none, L is reduced to the longest such run); select those words.
              Until the budget is met; the last span is cut at the budget, possibly inside a word
              (as SpanBERT does), so rows get exactly k tokens. Spans never overlap. One
              80/10/10 decision per span (all its pieces become [MASK], or all random, or all
              stay).
  entity      ERNIE-style. Entity spans come from a gazetteer (`entity_gazetteer`) and/or the
              built-in heuristic (`entity_heuristic`); overlapping spans merge into one. Entity
              spans are taken whole in random order while they fit (skipped otherwise), then the
              budget is filled with single random tokens outside entity spans, so an entity is
              masked completely or not at all.
              Gazetteer: one phrase per line, encoded like a document and matched on token ids,
              case-sensitively, where the ids start at a word start and end at a word end
              inside one sequence. A phrase starts with "▁", so an occurrence tokenised
              differently (glued to a preceding quote or bracket, or split by sentencepiece's
              segmentation of an unusual context) is missed.
              Heuristic: maximal runs of >= 2 adjacent capitalised words (first letter
              uppercase; a leading bare "▁" piece is looked through) in one sequence, after
              dropping a run's first word when it starts a sentence: it is the sequence's first
              word, follows a special token (e.g. [UNK]), or, looking left past punctuation other
              than . ! ?, follows a sentence end. Catches "LORD God" in "the LORD God", "Simon
              Peter" in "Then Simon Peter went", "New York" in "to New York". Misses single-word
              names ("Moses"), names at a sentence start ("New York is big." -> only "York"
              remains: not a run), names broken by lowercase words or punctuation ("Kingdom of
              Heaven" is two single words, "Beth-el" is [Beth][-][el]), lowercase-initial names
              ("iPhone"), and function words of names ("the" in "the LORD"). Wrongly catches
              capitalised titles and headings, "I" before a name ("and I Daniel"), a capitalised
              word after a comma or colon followed by a name ("said, Behold Jesus Christ"), and
              takes an abbreviation's period for a sentence end ("Mr. John Smith": only "Smith"
              remains, so the name is missed).
  frequency   k tokens by weighted sampling without replacement, weight count**(-alpha)
              (`frequency_alpha`, counts from `vocab_stats`; unseen tokens count as 1). The first
              pick is proportional to the weight; each next one among the rest (Efraimidis-
              Spirakis). alpha = 0 is exactly `random`.
  mixture     Per example, one of the strategies in `mixture` ("random=0.5,span=0.3,
              whole_word=0.2"; weights are normalised) drawn from (seed, step, example id).
  static      BERT's original data: `dupe_factor` fixed masks per packed sequence, cycled by
              epoch (mask of epoch e = mask of epoch e % dupe_factor), made by `static_strategy`
              on each sequence alone. Needs batch keys segment_ids, positions, sequence_keys,
              epochs. The budget is per sequence, not per row (k from the sequence's own
              maskable count, at least 1), so a sequence gets the same mask wherever it is
              packed; a row of several sequences may thus get a few more or fewer predictions
              than the row-level k of the dynamic strategies. If a row's sequences together
              want more than max_predictions_per_seq, whole units (tokens, words, spans) are
              dropped in a static random order until they fit: only then does a mask depend on
              its row.
  adaptive    Like `frequency`, with per-token-id weights from `set_token_weights` (the trainer
              feeds a running per-token loss estimate back every adaptive_every_steps; the
              table lives in its checkpoint). Weight 0 = never selected. A table applies from a
              given step on (`from_step`), so masks do not depend on when it arrived. Before
              the first table it is exactly `random`.
"""

from __future__ import annotations

import dataclasses

from absl import logging
import numpy as np

from mlmjax.data import mask_units
from mlmjax.data import masking_settings
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats as vocab_stats_lib

NS = tokenizer_lib.NUM_SPECIAL

# Independent random streams of one step. Eval uses its own seed offset (see pipeline.py).
_SELECT, _ACTION, _REPLACEMENT = 0, 1, 2
_SPAN_LENGTH, _SPAN_ANCHOR, _MIXTURE, _TRUNCATE = 3, 4, 5, 6

_M1, _M2, _GOLDEN = mask_units.M1, mask_units.M2, mask_units.GOLDEN
_STATIC_SALT = np.uint64(0x5A17C0DE00000000)
_WARN_MIN_ROWS, _WARN_FRACTION = 256, 0.05
_KEEP_TABLES = 4


# ---------------------------------------------------------------------------------------------
# Counter-based uniforms
# ---------------------------------------------------------------------------------------------

def _to_unit(bits: np.ndarray) -> np.ndarray:
  """Top 53 bits -> the middle of their interval: strictly inside (0, 1), so log(u) and
  log1p(-u) are always finite."""
  return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def uniform(seed: int, stream: int, step: int, example_ids: np.ndarray,
            length: int) -> np.ndarray:
  """[len(example_ids), length] float64 uniforms in (0, 1), a pure function of the arguments."""
  with np.errstate(over="ignore"):  # uint64 arithmetic wraps on purpose
    # + _GOLDEN: the mixer maps 0 to 0, so all-zero inputs must not reach it unchanged.
    key = mask_units.mix64(np.uint64(seed) * _GOLDEN + np.uint64(stream) + _GOLDEN)
    key = mask_units.mix64(key ^ (np.uint64(step) * _M1))
    rows = mask_units.mix64(key ^ (np.asarray(example_ids).astype(np.uint64) * _M2))
    cols = np.arange(length, dtype=np.uint64) * _GOLDEN
    return _to_unit(mask_units.mix64(rows[:, None] + cols[None, :]))


def static_uniform(seed: int, stream: int, sequence_keys: np.ndarray, dupes: np.ndarray,
                   length: int) -> np.ndarray:
  """[R, length] uniforms of (seed, stream, sequence key, dupe index, column = position)."""
  with np.errstate(over="ignore"):
    key = mask_units.mix64(np.uint64(seed) * _GOLDEN + np.uint64(stream) + _STATIC_SALT)
    rows = mask_units.mix64(key ^ (np.asarray(dupes).astype(np.uint64) * _M1))
    rows = mask_units.mix64(rows ^ (np.asarray(sequence_keys).astype(np.uint64) * _M2))
    cols = np.arange(length, dtype=np.uint64) * _GOLDEN
    return _to_unit(mask_units.mix64(rows[:, None] + cols[None, :]))


class _Draws:
  """Uniforms for a set of rows: u(stream, n) -> [R, n]; column c is a pure function of c."""

  def __init__(self, seed, step=None, example_ids=None, sequence_keys=None, dupes=None):
    self.seed, self.step, self.example_ids = seed, step, example_ids
    self.sequence_keys, self.dupes = sequence_keys, dupes

  def u(self, stream: int, n: int) -> np.ndarray:
    if self.sequence_keys is None:
      return uniform(self.seed, stream, self.step, self.example_ids, n)
    return static_uniform(self.seed, stream, self.sequence_keys, self.dupes, n)


@dataclasses.dataclass
class _Rows:
  """The arrays a selection works on; rows may be real rows or single sequences (static)."""

  ids: np.ndarray       # [R, T] int32
  seg: np.ndarray       # [R, T] int32, 0 = padding
  draws: _Draws
  max_predictions: int
  mask_rate: float

  def __post_init__(self):
    self.maskable = (self.ids >= NS) & (self.seg > 0)
    n = self.maskable.sum(axis=1)
    want = np.maximum(1, np.floor(n * self.mask_rate + 0.5)).astype(np.int64)
    self.want = np.where(n > 0, want, 0)  # before the max_predictions cap
    self.budget = np.minimum(self.want, self.max_predictions)


@dataclasses.dataclass
class _Selection:
  selected: np.ndarray        # [R, T] bool
  head_col: np.ndarray        # [R, T] column of the token's unit head (valid where selected)
  per_unit_decision: bool     # one 80/10/10 decision per unit (span) instead of per token


class Masker:
  """Turns packed batches into MLM batches with the configured strategy. Picklable.

  Required batch keys: `input_ids` always; `segment_ids` is used when present (else every
  non-[PAD] token is one segment); `static` also needs `positions`, `sequence_keys`, `epochs`.
  Other keys pass through unchanged.
  """

  def __init__(self, masking_config, stats: vocab_stats_lib.VocabStats,
               gazetteer: list[np.ndarray] | None = None):
    self._s = (masking_config if isinstance(masking_config, masking_settings.Settings)
               else masking_settings.Settings.from_config(masking_config))
    masking_settings.validate(self._s, stats, gazetteer is not None)
    self._stats = stats
    self._vocab_size = stats.vocab_size
    self._gazetteer = mask_units.Gazetteer(gazetteer) if gazetteer else None
    counts = np.asarray(stats.counts, np.float64)
    self._log_counts = np.log(np.maximum(counts, 1.0))
    tail = np.cumsum(counts[NS:])
    self._unigram_cdf = tail if tail[-1] > 0 else None
    self._weight_tables: list[tuple[int, np.ndarray]] = []  # adaptive: (from_step, [V])
    self._rows_seen = 0
    self._rows_truncated = 0
    self._warned = False
    s = self._s
    if "span" in {s.strategy, s.static_strategy} | {n for n, _ in s.mixture}:
      lens = np.arange(1, s.span_max_words + 1)
      pmf = s.span_p * (1.0 - s.span_p) ** (lens - 1)
      self._span_cdf = np.cumsum(pmf / pmf.sum())
      self._span_cdf[-1] = 1.0

  # -- public ---------------------------------------------------------------------------------

  @property
  def strategy(self) -> str:
    return self._s.strategy

  def span_length_pmf(self) -> np.ndarray:
    """[span_max_words] P(L = 1..max) of the span-length law (truncated, renormalised)."""
    return np.diff(self._span_cdf, prepend=0.0)

  def set_token_weights(self, weights: np.ndarray, *, from_step: int = 0) -> None:
    """adaptive: [V] selection weights >= 0 (0 = never selected), e.g. from per-token loss.

    The weights apply to masks of steps >= `from_step`; earlier steps keep the table they had
    (the last _KEEP_TABLES tables are kept). With a prefetching pipeline, pass a `from_step`
    beyond what it may already have masked (e.g. current step + prefetch depth + 1) so that the
    mask of every step is independent of timing and a resumed run reproduces it.
    """
    w = np.asarray(weights, np.float64)
    if w.shape != (self._vocab_size,):
      raise ValueError(f"token weights have shape {w.shape}, expected ({self._vocab_size},)")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w[NS:] > 0):
      raise ValueError("token weights must be finite, >= 0, and positive for some token")
    tables = [t for t in self._weight_tables if t[0] < from_step] + [(int(from_step), w.copy())]
    self._weight_tables = tables[-_KEEP_TABLES:]

  def _token_weights(self, step: int) -> np.ndarray | None:
    """The adaptive weight table in force at `step` (None: uniform)."""
    for from_step, w in reversed(self._weight_tables):
      if from_step <= step:
        return w
    return None

  def mixture_choice(self, *, seed: int, step: int, example_ids: np.ndarray) -> np.ndarray:
    """mixture: [B] index into the mixture's strategies chosen for each example."""
    cum = np.cumsum([w for _, w in self._s.mixture])
    u = uniform(seed, _MIXTURE, step, np.asarray(example_ids), 1)[:, 0]
    return np.minimum(np.searchsorted(cum, u, side="right"), len(cum) - 1)

  def __call__(self, batch: dict[str, np.ndarray], *, seed: int, step: int,
               example_ids: np.ndarray) -> dict[str, np.ndarray]:
    """-> a new dict: masked `input_ids`, plus `masked_positions` [B, P] int32 (ascending,
    padding slots last with position 0), `masked_ids` [B, P] int32 (original tokens) and
    `masked_weights` [B, P] float32 (1 real, 0 padding); P = max_predictions_per_seq."""
    ids = np.asarray(batch["input_ids"])
    example_ids = np.asarray(example_ids)
    if self._s.strategy == "mixture":
      selected = np.zeros(ids.shape, bool)
      new_ids = ids.copy()
      want = np.zeros(len(ids), np.int64)
      choice = self.mixture_choice(seed=seed, step=step, example_ids=example_ids)
      for i, (name, _) in enumerate(self._s.mixture):
        rows = np.nonzero(choice == i)[0]
        if len(rows):
          sub = {k: np.asarray(v)[rows] for k, v in batch.items() if _is_row_array(v, ids)}
          selected[rows], new_ids[rows], want[rows] = self._mask_rows(
              name, sub, seed, step, example_ids[rows])
    else:
      selected, new_ids, want = self._mask_rows(self._s.strategy, batch, seed, step,
                                                example_ids)
    self._note_truncation(want)
    return _outputs(batch, ids, new_ids, selected, self._s.max_predictions)

  def debug_selection(self, batch, *, seed: int, step: int, example_ids: np.ndarray,
                      strategy: str | None = None) -> dict[str, np.ndarray]:
    """For tests/analysis, one dynamic strategy: `selected`, `head_col` (column of each selected
    token's unit head) [B, T], `budget` [B]; span: `spans`, a record of every span placed
    (dict of 1-D arrays: row, head_col, drawn_words, words, tokens, full_tokens, room_clipped,
    round); entity: `entity_covered` / `entity_linked` [B, T] (token in an entity / in the same
    entity as its left neighbour)."""
    info: dict = {}
    strategy = strategy or self._s.strategy
    rows = self._rows(batch, _Draws(seed, step, np.asarray(example_ids)))
    sel = self._select(strategy, rows, info)
    out = {"selected": sel.selected, "head_col": sel.head_col, "budget": rows.budget}
    if strategy == "span":
      out["spans"] = {k: np.concatenate(v) for k, v in info.items()}
    if strategy == "entity":
      out["entity_covered"], out["entity_linked"] = self._entity_spans(
          rows, self._word_starts(rows))
    return out

  # -- per strategy ---------------------------------------------------------------------------

  def _rows(self, batch, draws) -> _Rows:
    ids = np.asarray(batch["input_ids"])
    seg = batch.get("segment_ids")
    seg = (ids != tokenizer_lib.PAD_ID).astype(np.int32) if seg is None else np.asarray(seg)
    return _Rows(ids, seg, draws, self._s.max_predictions, self._s.mask_rate)

  def _mask_rows(self, strategy, batch, seed, step, example_ids):
    """-> selected [R, T], new input ids [R, T], wanted count before the cap [R]."""
    if strategy == "static":
      return self._static(batch, seed)
    rows = self._rows(batch, _Draws(seed, step, example_ids))
    sel = self._select(strategy, rows)
    return sel.selected, self._replace(rows, sel), rows.want

  def _select(self, strategy: str, rows: _Rows, info: dict | None = None) -> _Selection:
    arange = np.broadcast_to(np.arange(rows.ids.shape[1]), rows.ids.shape)
    if rows.ids.shape[0] == 0:  # e.g. no sequence at all in a static batch
      return _Selection(np.zeros(rows.ids.shape, bool), arange, False)
    if strategy in ("random", "frequency", "adaptive"):
      u = rows.draws.u(_SELECT, rows.ids.shape[1])
      weights = self._token_weights(rows.draws.step) if strategy == "adaptive" else None
      if strategy == "random" or (strategy == "adaptive" and weights is None):
        score = u  # same order as log(-log1p(-u)), so unit weights reproduce `random` exactly
      else:
        with np.errstate(divide="ignore"):
          score = np.log(-np.log1p(-u))  # log of an Exp(1) draw: Efraimidis-Spirakis keys
          if strategy == "frequency":
            score = score + self._s.frequency_alpha * self._log_counts[rows.ids]
          else:
            score = score - np.log(weights[rows.ids])  # weight 0 -> +inf: never selected
      accepted = mask_units.greedy_units(score, rows.maskable, np.ones_like(rows.ids), rows.budget)
      return _Selection(accepted & rows.maskable, arange, False)
    starts = self._word_starts(rows)
    if strategy == "whole_word":
      head_col = mask_units.head_cols(starts)
      sizes = mask_units.unit_sizes(head_col, rows.maskable)
      accepted = mask_units.greedy_units(rows.draws.u(_SELECT, rows.ids.shape[1]), starts, sizes,
                               rows.budget)
      return _Selection(mask_units.expand(accepted, head_col, rows.maskable), head_col, False)
    if strategy == "entity":
      return self._entity(rows, starts)
    if strategy == "span":
      return self._span(rows, starts, info)
    raise ValueError(f"not a selection strategy: {strategy}")

  def _word_starts(self, rows: _Rows) -> np.ndarray:
    st = self._stats
    prev_ids = mask_units.shift_right(rows.ids, tokenizer_lib.PAD_ID)
    starts = (st.word_start[rows.ids] | st.punctuation[prev_ids]
              | ~mask_units.shift_right(rows.maskable, False)
              | (rows.seg != mask_units.shift_right(rows.seg, -1)))
    return starts & rows.maskable

  def _entity_spans(self, rows: _Rows, starts: np.ndarray):
    """-> covered, linked [R, T]: entity tokens, and tokens in the same entity as their left."""
    covered = np.zeros(rows.ids.shape, bool)
    linked = np.zeros(rows.ids.shape, bool)
    if self._gazetteer is not None:
      covered, linked = self._gazetteer.matches(rows.ids, rows.seg, starts, rows.maskable)
    if self._s.entity_heuristic:
      c, l = self._capitalized_runs(rows, starts)
      covered |= c
      linked |= l
    return covered, linked

  def _capitalized_runs(self, rows: _Rows, starts: np.ndarray):
    st, ids, maskable = self._stats, rows.ids, rows.maskable
    num_rows, length = ids.shape
    r = np.arange(num_rows)[:, None]
    word_col = mask_units.head_cols(starts)
    head = np.maximum(word_col, 0)
    nxt = np.minimum(head + 1, length - 1)
    first, second = ids[r, head], ids[r, nxt]
    second_ok = (head + 1 < length) & maskable[r, nxt] & ~starts[r, nxt]
    cap_word = st.capitalized[first] | (st.space_only[first] & second_ok & st.capitalized[second])
    # Sentence-initial heads: looking left past punctuation other than . ! ?, the first token is
    # a sentence end, a special/padding token, another segment, or the row start.
    anchor = ~maskable | ~st.punctuation[ids] | st.sentence_end[ids]
    prev = mask_units.shift_right(mask_units.head_cols(anchor), -1)
    p = np.maximum(prev, 0)
    initial = ((prev < 0) | ~maskable[r, p] | st.sentence_end[ids[r, p]]
               | (rows.seg[r, p] != rows.seg))
    eligible = maskable & (word_col >= 0) & cap_word & ~initial[r, head]
    linked = (eligible & mask_units.shift_right(eligible, False)
              & (rows.seg == mask_units.shift_right(rows.seg, -1)))
    run_col = mask_units.head_cols(eligible & ~linked)
    words = mask_units.unit_sizes(run_col, eligible & starts)  # words per run, at the run's head
    covered = eligible & (np.take_along_axis(words, np.maximum(run_col, 0), axis=1) >= 2)
    return covered, linked & covered

  def _entity(self, rows: _Rows, starts: np.ndarray) -> _Selection:
    covered, linked = self._entity_spans(rows, starts)
    heads = (covered & ~linked) | (rows.maskable & ~covered)
    head_col = mask_units.head_cols(heads)
    sizes = mask_units.unit_sizes(head_col, rows.maskable)
    # Entities first (scores in [0, 1)), then single tokens outside entities (in [1, 2)).
    score = rows.draws.u(_SELECT, rows.ids.shape[1]) + np.where(covered, 0.0, 1.0)
    accepted = mask_units.greedy_units(score, heads, sizes, rows.budget)
    return _Selection(mask_units.expand(accepted, head_col, rows.maskable), head_col, False)

  def _span(self, rows: _Rows, starts: np.ndarray, info: dict | None) -> _Selection:
    s = self._s
    ids = rows.ids
    num_rows, length = ids.shape
    r = np.arange(num_rows)[:, None]
    n_words = starts.sum(axis=1)
    nw = max(int(n_words.max()), 1)
    wcol = np.argsort(~starts, axis=1, kind="stable")[:, :nw]  # start column of each word
    wvalid = np.arange(nw) < n_words[:, None]
    widx = np.cumsum(starts, axis=1) - 1
    member = rows.maskable & (widx >= 0)
    size = np.bincount((r * nw + widx)[member], minlength=num_rows * nw).reshape(num_rows, nw)
    wseg = np.take_along_axis(rows.seg, wcol, axis=1)
    link = np.zeros((num_rows, nw), bool)  # word w+1 directly continues word w
    link[:, :-1] = (wvalid[:, 1:] & (wcol[:, :-1] + size[:, :-1] == wcol[:, 1:])
                    & (wseg[:, :-1] == wseg[:, 1:]))
    free = wvalid.copy()
    remaining = rows.budget.astype(np.int64).copy()
    rounds = max(int(remaining.max()), 1)
    u_len = rows.draws.u(_SPAN_LENGTH, rounds)
    u_anchor = rows.draws.u(_SPAN_ANCHOR, rounds)
    widx_range = np.arange(nw)
    j = np.arange(s.span_max_words)
    diff = np.zeros((num_rows, length + 1), np.int32)
    span_head = np.zeros((num_rows, length), bool)
    for k in range(rounds):
      cont = np.zeros_like(free)
      cont[:, :-1] = free[:, :-1] & link[:, :-1] & free[:, 1:]
      run_end = np.minimum.accumulate(np.where(cont, nw, widx_range)[:, ::-1], axis=1)[:, ::-1]
      runlen = np.where(free, run_end - widx_range + 1, 0)
      maxrun = runlen.max(axis=1)
      active = (remaining > 0) & (maxrun > 0)
      if not active.any():
        break
      drawn = 1 + np.searchsorted(self._span_cdf, u_len[:, k], side="right")
      span_len = np.minimum(drawn, maxrun)
      feasible = runlen >= span_len[:, None]
      n_feasible = np.maximum(feasible.sum(axis=1), 1)
      pick = np.floor(u_anchor[:, k] * n_feasible).astype(np.int64)
      anchor = np.argmax(np.cumsum(feasible, axis=1) > pick[:, None], axis=1)
      in_span = j < span_len[:, None]
      wj = np.minimum(anchor[:, None] + j, nw - 1)
      sz = np.where(in_span, size[r, wj], 0)
      cum = np.cumsum(sz, axis=1)
      full = cum[:, -1]
      take = np.where(active, np.minimum(full, remaining), 0)
      touched = in_span & (cum - sz < take[:, None])
      remaining -= take
      tr, tj = np.nonzero(touched)
      free[tr, anchor[tr] + tj] = False
      act = np.nonzero(take > 0)[0]
      start = wcol[act, anchor[act]]
      np.add.at(diff, (act, start), 1)
      np.add.at(diff, (act, start + take[act]), -1)
      span_head[act, start] = True
      if info is not None:
        for key, val in (("row", act), ("head_col", start), ("drawn_words", drawn[act]),
                         ("words", touched[act].sum(axis=1)), ("tokens", take[act]),
                         ("full_tokens", full[act]), ("room_clipped", (span_len < drawn)[act]),
                         ("round", np.full(len(act), k))):
          info.setdefault(key, []).append(val)
    selected = (np.cumsum(diff, axis=1)[:, :length] > 0) & rows.maskable
    return _Selection(selected, mask_units.head_cols(span_head), True)

  def _static(self, batch, seed):
    """Masks each packed sequence alone (placed at columns = its positions), keyed by
    (sequence key, epoch % dupe_factor), then maps back and truncates rows to the cap."""
    missing = [k for k in ("segment_ids", "positions", "sequence_keys", "epochs")
               if k not in batch]
    if missing:
      raise ValueError(f"masking.strategy='static' needs batch keys {missing}")
    ids = np.asarray(batch["input_ids"])
    seg = np.asarray(batch["segment_ids"])
    pos = np.asarray(batch["positions"]).astype(np.int64)
    num_rows, length = ids.shape
    tok = seg > 0
    tr, tc = np.nonzero(tok)
    vkey = tr * (int(seg.max()) + 1) + seg[tok]
    _, inv = np.unique(vkey, return_inverse=True)
    inv = inv.reshape(-1)
    nv = int(inv.max()) + 1 if len(inv) else 0
    vpos = pos[tok]
    vids = np.zeros((nv, length), ids.dtype)
    vids[inv, vpos] = ids[tok]
    vseg = np.zeros((nv, length), np.int32)
    vseg[inv, vpos] = 1
    keys = np.zeros(nv, np.uint64)
    keys[inv] = np.asarray(batch["sequence_keys"])[tok].astype(np.uint64)
    dupes = np.zeros(nv, np.int64)
    dupes[inv] = np.asarray(batch["epochs"])[tok].astype(np.int64) % self._s.dupe_factor
    vrows = _Rows(vids, vseg, _Draws(seed, sequence_keys=keys, dupes=dupes),
                  self._s.max_predictions, self._s.mask_rate)
    vsel = self._select(self._s.static_strategy, vrows)
    vnew = self._replace(vrows, vsel)
    vtrunc = vrows.draws.u(_TRUNCATE, length)
    selected = np.zeros(ids.shape, bool)
    selected[tok] = vsel.selected[inv, vpos]
    new_ids = ids.copy()
    new_ids[tok] = vnew[inv, vpos]
    head_col = np.full(ids.shape, -1, np.int64)
    head_col[tok] = tc - vpos + vsel.head_col[inv, vpos]
    trunc_score = np.ones(ids.shape)
    trunc_score[tok] = vtrunc[inv, vsel.head_col[inv, vpos].clip(0)]
    seq_row = np.zeros(nv, np.int64)
    seq_row[inv] = tr
    want = np.bincount(seq_row, weights=vrows.budget, minlength=num_rows)  # per-sequence budgets
    over = np.nonzero(selected.sum(axis=1) > self._s.max_predictions)[0]
    if len(over):
      sel_o, hc_o = selected[over], np.where(selected[over], head_col[over], -1)
      heads = sel_o & (hc_o == np.arange(length))
      sizes = mask_units.unit_sizes(hc_o, sel_o)
      accepted = mask_units.greedy_units(trunc_score[over], heads, sizes,
                               np.full(len(over), self._s.max_predictions))
      selected[over] = mask_units.expand(accepted, hc_o, sel_o)
      new_ids = np.where(selected, new_ids, ids)
    return selected, new_ids, want.astype(np.int64)

  # -- replacement ----------------------------------------------------------------------------

  def _replace(self, rows: _Rows, sel: _Selection) -> np.ndarray:
    """Input ids with the 80/10/10 replacement applied at the selected tokens."""
    ids = rows.ids
    length = ids.shape[1]
    action = rows.draws.u(_ACTION, length)
    if sel.per_unit_decision:
      action = np.take_along_axis(action, np.maximum(sel.head_col, 0), axis=1)
    u = rows.draws.u(_REPLACEMENT, length)
    if self._s.replacement == "unigram":
      cdf = self._unigram_cdf
      random_ids = NS + np.searchsorted(cdf, u * cdf[-1], side="right")
    else:
      random_ids = NS + np.floor(u * (self._vocab_size - NS)).astype(np.int64)
    pm, pr = self._s.mask_token_prob, self._s.random_token_prob
    replacement = np.where(action < pm, tokenizer_lib.MASK_ID,
                           np.where(action < pm + pr, random_ids, ids))
    return np.where(sel.selected, replacement, ids).astype(ids.dtype)

  def _note_truncation(self, want: np.ndarray) -> None:
    self._rows_seen += len(want)
    self._rows_truncated += int(np.sum(want > self._s.max_predictions))
    if (not self._warned and self._rows_seen >= _WARN_MIN_ROWS
        and self._rows_truncated > _WARN_FRACTION * self._rows_seen):
      self._warned = True
      logging.warning(
          "masking: %.0f%% of rows want more than masking.max_predictions_per_seq=%d"
          " predictions at mask_rate=%g and are capped, lowering the effective rate; raise"
          " max_predictions_per_seq to about mask_rate * data.seq_len",
          100.0 * self._rows_truncated / self._rows_seen, self._s.max_predictions,
          self._s.mask_rate)


def _is_row_array(v, ids) -> bool:
  return isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == ids.shape[0]


def _outputs(batch, ids, new_ids, selected, max_predictions) -> dict[str, np.ndarray]:
  num_rows, length = ids.shape
  order = np.argsort(~selected, axis=1, kind="stable")[:, :max_predictions]  # selected first
  if order.shape[1] < max_predictions:  # rows shorter than P
    order = np.pad(order, ((0, 0), (0, max_predictions - order.shape[1])))
  valid = np.arange(max_predictions)[None, :] < selected.sum(axis=1)[:, None]
  positions = np.where(valid, order, 0).astype(np.int32)
  original = np.where(valid, ids[np.arange(num_rows)[:, None], positions], 0).astype(np.int32)
  out = dict(batch)
  out.update(
      input_ids=new_ids.astype(np.int32),
      masked_positions=positions,
      masked_ids=original,
      masked_weights=valid.astype(np.float32),
  )
  return out


def mask_batch(batch: dict[str, np.ndarray], *, seed: int, step: int, example_ids: np.ndarray,
               vocab_size: int, mask_rate: float, mask_token_prob: float,
               random_token_prob: float, max_predictions: int) -> dict[str, np.ndarray]:
  """Strategy `random` with uniform replacement, without vocab stats (the original API)."""
  settings = masking_settings.Settings(
      strategy="random", mask_rate=mask_rate, mask_token_prob=mask_token_prob,
      random_token_prob=random_token_prob, max_predictions=max_predictions,
      replacement="uniform", span_p=0.2, span_max_words=10, entity_gazetteer="",
      entity_heuristic=False, frequency_alpha=0.0, mixture=(), dupe_factor=1,
      static_strategy="random")
  zeros = np.zeros(vocab_size, bool)
  stats = vocab_stats_lib.VocabStats(word_start=zeros, punctuation=zeros, capitalized=zeros,
                                     sentence_end=zeros, counts=np.zeros(vocab_size, np.int64))
  return Masker(settings, stats)(batch, seed=seed, step=step, example_ids=example_ids)
