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
import numpy as np

from mlmjax.data import masking
from mlmjax.data import pipeline
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats as vocab_stats_lib
from mlmjax.data.masking import entities


@dataclasses.dataclass
class RunInput:
  train_source: sources.TextSource
  eval_source: sources.TextSource
  tokenizer: tokenizer_lib.Tokenizer  # or hf_tokenizer.HFTokenizer: the same methods
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
    """The fixed held-out batches (their own masker: feedback never moves the eval set)."""
    return pipeline.make_eval_iter(config, self.tokenizer, self.eval_source, self.masker(config),
                                   self.stats.word_start)


def _process_0_first(make):
  """Process 0 makes (and saves in the shared workdir) what the others then load: one
  tokenizer per run, not one per process."""
  if jax.process_index() == 0:
    out = make()
  multihost_utils.sync_global_devices("mlmjax_process_0_first")
  return out if jax.process_index() == 0 else make()


def build(config, tokenizer_paths: dict[str, str], stats_path: str) -> RunInput:
  """Reads the sources and gets the run's tokenizer and vocab stats: the saved copies at
  these paths (the tokenizer's: one per kind, Workdir.tokenizers), else made and saved there."""
  train_source, eval_source = sources.load_splits(
      config.data.source, config.data.eval_every_nth_document, config.data.max_document_chars)
  logging.info("Data %r: %d training / %d held-out documents", config.data.source,
               len(train_source), len(eval_source))

  def tokenizer_and_stats():
    tok = tokenizer_lib.get_tokenizer(config.tokenizer, train_source, tokenizer_paths)
    return tok, vocab_stats_lib.get_vocab_stats(tok, train_source, stats_path,
                                                config.masking.stats_max_documents)
  tok, stats = _process_0_first(tokenizer_and_stats)
  gazetteer = (entities.load_gazetteer(config.masking.entity_gazetteer, tok)
               if config.masking.entity_gazetteer else None)
  return RunInput(train_source, eval_source, tok, stats, gazetteer)
