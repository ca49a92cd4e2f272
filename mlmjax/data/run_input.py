"""A run's input, built in one place for training, evaluation and the benchmark:

    data.source -> (train, held-out) documents -> tokenizer (trained once, saved) ->
    vocab stats (saved) -> gazetteer, co-occurrence tables (saved) -> masker -> a training
    iterator per phase, eval batches

Prepared data (`prepared:DIR`) brings its split, tokenizer and stats; they are copied into the
workdir as a raw source's would be made there.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Protocol

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from mlmjax.data.text import annotation
from mlmjax.data import masking
from mlmjax.data.corpora import mixture as mixture_lib
from mlmjax.data import pipeline
from mlmjax.data.prepared import reader
from mlmjax.data.prepared import writer
from mlmjax.data.corpora import sources
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import cooccurrence as cooccurrence_lib
from mlmjax.data.masking import entities
from mlmjax.data.settings import InputSettings
from mlmjax.data.text.settings import TokenizerSettings
from mlmjax.errors import ConfigError, DataError
from mlmjax.models import batch_schema


@dataclasses.dataclass(frozen=True)
class HeldOut:
  """How held-out batches are made: at `mask_rate` (eval.mask_rate), `batches` of them
  (train.eval_batches)."""

  mask_rate: float
  batches: int


class Shape(Protocol):
  """What a phase sets of its input (training/planning/phases.py's Phase has these and more)."""

  index: int  # of the phase: a mixture's weights may differ per phase
  seq_len: int
  max_predictions: int
  batch_size: int  # global rows per step
  seed: int  # document order, packing, masks
  masker: str  # how its objective masks: models/batch_schema.py's MLM_ or DIFFUSION_MASKING


@dataclasses.dataclass
class RunInput:
  """A run's sources, tokenizer, statistics and gazetteer, with the settings every phase's
  input shares, bound once: a phase's iterator then needs only the phase."""

  # Or a mixture of either kind (data.sources); None: evaluation only.
  train_source: sources.TextSource | reader.PreparedSplit | mixture_lib.Mixture | None
  eval_source: sources.TextSource | reader.PreparedSplit | mixture_lib.Mixture
  tokenizer: tokenizer_lib.Tokenizer  # or hf_tokenizer.HFTokenizer: the same methods
  stats: vocab_stats_lib.VocabStats
  gazetteer: entities.Gazetteer | None
  data: InputSettings
  masking: masking.Settings
  held_out: HeldOut
  span_boundaries: bool  # the masker also says where each masked unit begins and ends (SBO)
  cooccurrence: cooccurrence_lib.Cooccurrence | None = None  # semantic, contextual masking

  def masker(self, max_predictions: int, mask_rate: float | None = None,
             token_weights: Callable[[int], np.ndarray | None] | None = None,
             mask_rates: masking.RateSchedule | None = None,
             diffusion: bool = False) -> masking.Masker:
    """A masker with `max_predictions` slots per row, at `mask_rate` (default
    masking.mask_rate) or `mask_rates` by step, or as the diffusion objective masks."""
    settings = dataclasses.replace(
        self.masking, max_predictions_per_seq=max_predictions,
        mask_rate=self.masking.mask_rate if mask_rate is None else mask_rate)
    return masking.Masker(settings, self.stats, self.gazetteer, token_weights,
                          span_boundaries=self.span_boundaries, mask_rates=mask_rates,
                          cooccurrence=self.cooccurrence,
                          diffusion=self.masking.diffusion() if diffusion else None)

  def train_iter(self, shape: Shape, first_step: int = 0,
                 token_weights: Callable[[int], np.ndarray | None] | None = None,
                 mask_rates: masking.RateSchedule | None = None) -> pipeline.ShardedIterator:
    """Training batches of `shape` (a phase: training/planning/phases.py) whose first trains step
    first_step+1; masked at `mask_rates` by step (None: masking.mask_rate); a mixture
    (data.sources) with the phase's weights."""
    source = self.train_source
    if isinstance(source, mixture_lib.Mixture):
      source = source.reweighted(mixture_lib.phase_weights(self.data, shape.index))
    return pipeline.make_train_iter(
        self.data, self.tokenizer, source,
        self.masker(shape.max_predictions, None, token_weights, mask_rates,
                    shape.masker == batch_schema.DIFFUSION_MASKING),
        batch_size=shape.batch_size, seq_len=shape.seq_len, seed=shape.seed,
        word_start=self.stats.word_start, first_step=first_step)

  def eval_batches(self, shape: Shape, batch_size: int | None = None,
                   diffusion_sample: int | None = None):
    """The fixed held-out batches of `shape`'s row length and seed (`batch_size` rows, default
    the shape's), masked at `eval.mask_rate` with the slots a full row needs at that rate, by
    their own masker: feedback never moves the eval set. With `diffusion_sample` k: the same
    rows masked as the diffusion objective masks, the k-th draw (a Monte Carlo sample of its
    bound)."""
    rate = self.held_out.mask_rate
    diffusion = diffusion_sample is not None
    slots = shape.seq_len if diffusion else held_out_max_predictions(shape.seq_len, rate)
    masker = self.masker(slots, rate, diffusion=diffusion)
    return pipeline.make_eval_iter(
        self.data, self.tokenizer, self.eval_source, masker,
        batch_size=batch_size or shape.batch_size, seq_len=shape.seq_len, seed=shape.seed,
        num_batches=self.held_out.batches, word_start=self.stats.word_start,
        first_step=(diffusion_sample or 0) * self.held_out.batches)


def held_out_max_predictions(seq_len: int, mask_rate: float) -> int:
  """The slots a full row of `seq_len` needs at `mask_rate` (masking.budget, the masker's own
  formula)."""
  return int(masking.budget(seq_len - 2, mask_rate, seq_len)[1])


def _process_0_first(make):
  """Process 0 makes (and saves in the shared workdir) what the others then load: one
  tokenizer per run, not one per process."""
  if jax.process_index() == 0:
    out = make()
  multihost_utils.sync_global_devices("mlmjax_process_0_first")
  return out if jax.process_index() == 0 else make()


def held_out_input(data: InputSettings, masking_settings: masking.Settings, held_out: HeldOut,
                   span_boundaries: bool, tokenizer_path: str, stats_path: str,
                   source: str = "") -> RunInput:
  """A finished run's evaluation input: its saved tokenizer and stats, and its held-out split,
  or every document of `source` (text the run never trained on) when given."""
  if source:
    _, eval_source = sources.load_splits(source, 1, data.max_document_chars,  # all
                                         data.text_field)
  elif data.sources:
    _, eval_source, _, _ = _mixture(data, None, masking_settings, {}, "")
  elif reader.is_prepared(data.source):
    eval_source = reader.open_source(data.source).split("eval")
  else:
    _, eval_source = sources.load_splits(data.source, data.eval_every_nth_document,
                                         data.max_document_chars, data.text_field)
  tok = tokenizer_lib.load(tokenizer_path)
  cooccurrence = None
  if masking_settings.counts_cooccurrence():
    cooccurrence = cooccurrence_lib.load(cooccurrence_lib.path_beside(stats_path))
  return RunInput(None, eval_source, tok, vocab_stats_lib.load(stats_path),
                  _gazetteer(masking_settings, tok), data, masking_settings, held_out,
                  span_boundaries, cooccurrence)


def _gazetteer(masking_settings: masking.Settings, tok) -> entities.Gazetteer | None:
  path = masking_settings.entity_gazetteer
  return entities.load_gazetteer(path, tok) if path else None


def _mixture(data: InputSettings, tokenizer: TokenizerSettings | None,
             masking_settings: masking.Settings, tokenizer_paths: dict[str, str],
             stats_path: str):
  """`data.sources` (mixture.py): (train, eval, prepared?, tokenizer_and_stats)."""
  entries = mixture_lib.parse(data.sources)
  weights, names = [w for w, _ in entries], [s for _, s in entries]
  kinds = {reader.is_prepared(s) for s in names}
  if len(kinds) > 1:
    raise ConfigError("data.sources mixes prepared data and raw text; prepare them all (with"
                      " one tokenizer) or none")
  if kinds == {True}:
    datas = [reader.open_source(s) for s in names]
    for prepared_data in datas:  # a mixture reads every file of its sources on every process
      prepared_data.check(data.eval_every_nth_document, tokenizer.path if tokenizer else "", 1)
    if len({d.manifest["tokenizer"]["fingerprint"] for d in datas}) > 1:
      raise DataError("data.sources: its prepared sources were made with different tokenizers;"
                      " prepare them with one (--config.tokenizer.path=...)")
    splits = [(d.split("train"), d.split("eval")) for d in datas]

    def tokenizer_and_stats():
      return datas[0].tokenizer_and_stats(tokenizer_paths, stats_path)
  else:
    splits = [sources.load_splits(s, data.eval_every_nth_document, data.max_document_chars,
                                  data.text_field) for s in names]

    def tokenizer_and_stats():
      tok = tokenizer_lib.get_tokenizer(tokenizer, train, tokenizer_paths)
      return tok, vocab_stats_lib.get_vocab_stats(tok, train, stats_path,
                                                  masking_settings.stats_max_documents)
  kind = mixture_lib.PreparedMixture if kinds == {True} else mixture_lib.Mixture
  train = kind(f"{data.sources}:train", [t for t, _ in splits], weights)
  held_out = kind(f"{data.sources}:eval", [e for _, e in splits], weights)
  return train, held_out, kinds == {True}, tokenizer_and_stats


def build(data: InputSettings, tokenizer: TokenizerSettings, masking_settings: masking.Settings,
          held_out: HeldOut, span_boundaries: bool, tokenizer_paths: dict[str, str],
          stats_path: str) -> RunInput:
  """Reads the sources and gets the run's tokenizer and vocab stats: the saved copies at
  these paths (the tokenizer's: one per kind, Workdir.tokenizers), else made (or, for prepared
  data, copied from it) and saved there."""
  if data.sources:
    train_source, eval_source, is_prepared, tokenizer_and_stats = _mixture(
        data, tokenizer, masking_settings, tokenizer_paths, stats_path)
  elif reader.is_prepared(data.source):
    is_prepared = True
    prepared_data = reader.open_source(data.source)
    prepared_data.check(data.eval_every_nth_document, tokenizer.path,
                        pipeline.num_shards(data))
    train_source, eval_source = prepared_data.split("train"), prepared_data.split("eval")

    def tokenizer_and_stats():
      return prepared_data.tokenizer_and_stats(tokenizer_paths, stats_path)
  else:
    is_prepared = False
    train_source, eval_source = sources.load_splits(
        data.source, data.eval_every_nth_document, data.max_document_chars, data.text_field)

    def tokenizer_and_stats():
      tok = tokenizer_lib.get_tokenizer(tokenizer, train_source, tokenizer_paths)
      return tok, vocab_stats_lib.get_vocab_stats(tok, train_source, stats_path,
                                                  masking_settings.stats_max_documents)
  annotator = masking_settings.annotator()
  if annotator is not None and not is_prepared:
    # Text is annotated as it is read: a missing spaCy pipeline fails here, in one line, not
    # in a worker. Prepared data carries its annotations: training from it needs no spaCy.
    annotation.load_pipeline(annotator.pipeline, annotator.parse, annotator.ner)
  logging.info("Data %r: %d training / %d held-out documents",
               data.sources or data.source, len(train_source), len(eval_source))
  if data.worker_count and not is_prepared:
    logging.warning("data.worker_count=%d with raw text: every worker tokenizes every document"
                    " (each builds every %d-th batch of one shared stream); prepare the data"
                    " once (python -m mlmjax.prepare) to gain from workers",
                    data.worker_count, data.worker_count)
  tok, stats = _process_0_first(tokenizer_and_stats)
  cooccurrence = None
  if masking_settings.counts_cooccurrence():
    cooccurrence = _process_0_first(lambda: cooccurrence_lib.get(
        pipeline.tokenized(train_source, tok), stats, cooccurrence_lib.path_beside(stats_path),
        masking_settings.stats_max_documents, masking_settings.pmi_ngrams,
        masking_settings.pmi_min_count, masking_settings.pmi_length_shares,
        masking_settings.pmi_coverage, masking_settings.pmi_score))
  return RunInput(train_source, eval_source, tok, stats, _gazetteer(masking_settings, tok), data,
                  masking_settings, held_out, span_boundaries, cooccurrence)


def preparation_plan(data: InputSettings, tokenizer: TokenizerSettings,
                     masking_settings: masking.Settings, source: str, num_files: int
                     ) -> writer.Plan:
  """The plan of preparing `source` into `num_files` files per split (python -m
  mlmjax.prepare) for a run with these settings: masking's token count sample, and word
  annotations if its strategy reads them (all of them: any annotating strategy can then train
  from the folder)."""
  return writer.Plan(source, data.text_field, data.eval_every_nth_document,
                     data.max_document_chars, masking_settings.stats_max_documents, num_files,
                     tokenizer,
                     masking_settings.nlp_pipeline if masking_settings.annotates() else "")
