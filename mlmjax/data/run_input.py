"""A run's input, built in one place for training, evaluation and the benchmark:

    config.data.source -> (train, held-out) documents -> tokenizer (trained once, saved) ->
    vocab stats (saved) -> gazetteer -> masker -> a training iterator per phase, eval batches

Prepared data (`prepared:DIR`) brings its split, tokenizer and stats; they are copied into the
workdir as a raw source's would be made there.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from absl import logging
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from mlmjax.data import masking
from mlmjax.data import mixture as mixture_lib
from mlmjax.data import pipeline
from mlmjax.data import prepared
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import entities
from mlmjax.errors import ConfigError, DataError


@dataclasses.dataclass
class RunInput:
  # Or a mixture of either kind (data.sources); None: evaluation only.
  train_source: sources.TextSource | prepared.PreparedSplit | mixture_lib.Mixture | None
  eval_source: sources.TextSource | prepared.PreparedSplit | mixture_lib.Mixture
  tokenizer: tokenizer_lib.Tokenizer  # or hf_tokenizer.HFTokenizer: the same methods
  stats: vocab_stats_lib.VocabStats
  gazetteer: entities.Gazetteer | None

  def masker(self, config, token_weights: Callable[[int], np.ndarray | None] | None = None,
             mask_rates: masking.RateSchedule | None = None) -> masking.Masker:
    return masking.Masker(config.masking, self.stats, self.gazetteer, token_weights,
                          span_boundaries=config.objective.span_boundary_weight > 0,
                          mask_rates=mask_rates)

  def train_iter(self, config, first_step: int = 0,
                 token_weights: Callable[[int], np.ndarray | None] | None = None,
                 mask_rates: masking.RateSchedule | None = None, phase: int = 0
                 ) -> pipeline.ShardedIterator:
    """Training batches of `config` (a phase's config) whose first trains step first_step+1;
    masked at `mask_rates` by step (None: masking.mask_rate); a mixture (data.sources) with
    phase `phase`'s weights."""
    source = self.train_source
    if isinstance(source, mixture_lib.Mixture):
      source = source.reweighted(mixture_lib.phase_weights(config.data, phase))
    return pipeline.make_train_iter(config, self.tokenizer, source,
                                    self.masker(config, token_weights, mask_rates),
                                    self.stats.word_start, first_step)

  def eval_batches(self, config):
    """The fixed held-out batches, masked at `eval.mask_rate` by their own masker (feedback
    never moves the eval set)."""
    config = held_out_config(config)
    return pipeline.make_eval_iter(config, self.tokenizer, self.eval_source, self.masker(config),
                                   self.stats.word_start)


def held_out_config(config) -> ml_collections.ConfigDict:
  """A copy of `config` (a phase's) masking at `eval.mask_rate`, with the prediction slots a
  full row needs at that rate (masking.budget, the masker's own formula)."""
  out = ml_collections.ConfigDict(config.to_dict())
  rate = config.eval.mask_rate
  _, wanted = masking.budget(config.data.seq_len - 2, rate, config.data.seq_len)
  out.masking.update(mask_rate=rate, max_predictions_per_seq=int(wanted))
  return out


def _process_0_first(make):
  """Process 0 makes (and saves in the shared workdir) what the others then load: one
  tokenizer per run, not one per process."""
  if jax.process_index() == 0:
    out = make()
  multihost_utils.sync_global_devices("mlmjax_process_0_first")
  return out if jax.process_index() == 0 else make()


def _text_field(config) -> str:
  # A finished run saved before data.text_field existed read the "text" field.
  return config.data.text_field if "text_field" in config.data else "text"


def held_out_input(config, tokenizer_path: str, stats_path: str, source: str = "") -> RunInput:
  """A finished run's evaluation input: its saved tokenizer and stats, and its held-out split,
  or every document of `source` (text the run never trained on) when given."""
  if source:
    _, eval_source = sources.load_splits(source, 1, config.data.max_document_chars,  # all
                                         _text_field(config))
  elif "sources" in config.data and config.data.sources:  # (runs saved before it: absent)
    _, eval_source, _, _ = _mixture(config, {}, "")
  elif prepared.is_prepared(config.data.source):
    eval_source = prepared.open_source(config.data.source).split("eval")
  else:
    _, eval_source = sources.load_splits(config.data.source, config.data.eval_every_nth_document,
                                         config.data.max_document_chars, _text_field(config))
  tok = tokenizer_lib.load(tokenizer_path)
  gazetteer = (entities.load_gazetteer(config.masking.entity_gazetteer, tok)
               if config.masking.entity_gazetteer else None)
  return RunInput(None, eval_source, tok, vocab_stats_lib.load(stats_path), gazetteer)


def _mixture(config, tokenizer_paths: dict[str, str], stats_path: str):
  """`data.sources` (mixture.py): (train, eval, prepared?, tokenizer_and_stats)."""
  entries = mixture_lib.parse(config.data.sources)
  weights, names = [w for w, _ in entries], [s for _, s in entries]
  kinds = {prepared.is_prepared(s) for s in names}
  if len(kinds) > 1:
    raise ConfigError("data.sources mixes prepared data and raw text; prepare them all (with"
                      " one tokenizer) or none")
  d = config.data
  if kinds == {True}:
    datas = [prepared.open_source(s) for s in names]
    for data in datas:
      data.check(config, 1)  # a mixture reads every file of its sources on every process
    if len({data.manifest["tokenizer"]["fingerprint"] for data in datas}) > 1:
      raise DataError("data.sources: its prepared sources were made with different tokenizers;"
                      " prepare them with one (--config.tokenizer.path=...)")
    splits = [(data.split("train"), data.split("eval")) for data in datas]

    def tokenizer_and_stats():
      return datas[0].tokenizer_and_stats(tokenizer_paths, stats_path)
  else:
    splits = [sources.load_splits(s, d.eval_every_nth_document, d.max_document_chars,
                                  d.text_field) for s in names]

    def tokenizer_and_stats():
      tok = tokenizer_lib.get_tokenizer(config.tokenizer, train, tokenizer_paths)
      return tok, vocab_stats_lib.get_vocab_stats(tok, train, stats_path,
                                                  config.masking.stats_max_documents)
  kind = mixture_lib.PreparedMixture if kinds == {True} else mixture_lib.Mixture
  train = kind(f"{d.sources}:train", [t for t, _ in splits], weights)
  held_out = kind(f"{d.sources}:eval", [e for _, e in splits], weights)
  return train, held_out, kinds == {True}, tokenizer_and_stats


def build(config, tokenizer_paths: dict[str, str], stats_path: str) -> RunInput:
  """Reads the sources and gets the run's tokenizer and vocab stats: the saved copies at
  these paths (the tokenizer's: one per kind, Workdir.tokenizers), else made (or, for prepared
  data, copied from it) and saved there."""
  if config.data.sources:
    train_source, eval_source, is_prepared, tokenizer_and_stats = _mixture(
        config, tokenizer_paths, stats_path)
  elif prepared.is_prepared(config.data.source):
    is_prepared = True
    data = prepared.open_source(config.data.source)
    data.check(config, pipeline.num_shards(config))
    train_source, eval_source = data.split("train"), data.split("eval")

    def tokenizer_and_stats():
      return data.tokenizer_and_stats(tokenizer_paths, stats_path)
  else:
    is_prepared = False
    train_source, eval_source = sources.load_splits(
        config.data.source, config.data.eval_every_nth_document, config.data.max_document_chars,
        config.data.text_field)

    def tokenizer_and_stats():
      tok = tokenizer_lib.get_tokenizer(config.tokenizer, train_source, tokenizer_paths)
      return tok, vocab_stats_lib.get_vocab_stats(tok, train_source, stats_path,
                                                  config.masking.stats_max_documents)
  logging.info("Data %r: %d training / %d held-out documents",
               config.data.sources or config.data.source, len(train_source), len(eval_source))
  if config.data.worker_count and not is_prepared:
    logging.warning("data.worker_count=%d with raw text: every worker tokenizes every document"
                    " (each builds every %d-th batch of one shared stream); prepare the data"
                    " once (python -m mlmjax.prepare) to gain from workers",
                    config.data.worker_count, config.data.worker_count)
  tok, stats = _process_0_first(tokenizer_and_stats)
  gazetteer = (entities.load_gazetteer(config.masking.entity_gazetteer, tok)
               if config.masking.entity_gazetteer else None)
  return RunInput(train_source, eval_source, tok, stats, gazetteer)
