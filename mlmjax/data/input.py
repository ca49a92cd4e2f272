"""A run's input, built in one place for training, evaluation and the benchmark:

    config.data.source -> (train, held-out) documents -> tokenizer (trained once, saved) ->
    vocab stats (saved) -> gazetteer -> masker -> a training iterator per phase, eval batches
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
from mlmjax.data import pipeline
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import entities


@dataclasses.dataclass
class RunInput:
  train_source: sources.TextSource | None  # None: evaluation only
  eval_source: sources.TextSource
  tokenizer: tokenizer_lib.Tokenizer
  stats: vocab_stats_lib.VocabStats
  gazetteer: entities.Gazetteer | None

  def masker(self, config, token_weights: Callable[[int], np.ndarray | None] | None = None
             ) -> masking.Masker:
    return masking.Masker(config.masking, self.stats, self.gazetteer, token_weights)

  def train_iter(self, config, first_step: int = 0,
                 token_weights: Callable[[int], np.ndarray | None] | None = None
                 ) -> pipeline.ShardedIterator:
    """Training batches of `config` (a phase's config) whose first trains step first_step+1."""
    return pipeline.make_train_iter(config, self.tokenizer, self.train_source,
                                    self.masker(config, token_weights), self.stats.word_start,
                                    first_step)

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


def held_out_input(config, tokenizer_path: str, stats_path: str, source: str = "") -> RunInput:
  """A finished run's evaluation input: its saved tokenizer and stats, and its held-out split,
  or every document of `source` (text the run never trained on) when given."""
  if source:
    _, eval_source = sources.load_splits(source, 1, config.data.max_document_chars)  # all
  else:
    _, eval_source = sources.load_splits(config.data.source, config.data.eval_every_nth_document,
                                         config.data.max_document_chars)
  tok = tokenizer_lib.Tokenizer.load(tokenizer_path)
  gazetteer = (entities.load_gazetteer(config.masking.entity_gazetteer, tok)
               if config.masking.entity_gazetteer else None)
  return RunInput(None, eval_source, tok, vocab_stats_lib.load(stats_path), gazetteer)


def build(config, tokenizer_path: str, stats_path: str) -> RunInput:
  """Reads the sources and gets the run's tokenizer and vocab stats: the saved copies at
  these paths, else made and saved there."""
  train_source, eval_source = sources.load_splits(
      config.data.source, config.data.eval_every_nth_document, config.data.max_document_chars)
  logging.info("Data %r: %d training / %d held-out documents", config.data.source,
               len(train_source), len(eval_source))

  def tokenizer_and_stats():
    tok = tokenizer_lib.get_tokenizer(config.tokenizer, train_source, tokenizer_path)
    return tok, vocab_stats_lib.get_vocab_stats(tok, train_source, stats_path,
                                                config.masking.stats_max_documents)
  tok, stats = _process_0_first(tokenizer_and_stats)
  gazetteer = (entities.load_gazetteer(config.masking.entity_gazetteer, tok)
               if config.masking.entity_gazetteer else None)
  return RunInput(train_source, eval_source, tok, stats, gazetteer)
