"""What `python -m mlmjax.show_masks` shows: a config's first training batch with its masks,
and the summary that tells strategies apart (the rendering: data/masking/display.py).

Entities and noun chunks come from spaCy (`masking.nlp_pipeline`) whatever the strategy, when
spaCy and the pipeline are installed (else those shares are None); the n-grams from the run's
co-occurrence statistics, counted here over at most 1,000 documents when the strategy has none.
"""

from __future__ import annotations

import dataclasses

from absl import logging

from mlmjax.data.corpora import mixture
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import display
from mlmjax.data import pipeline
from mlmjax.data.prepared import reader
from mlmjax.data.text import annotation
from mlmjax.training import assembly
from mlmjax.training.run import workdir as workdir_lib

_NGRAM_DOCUMENTS = 1000  # documents counted for the n-gram share when the run counts none


def _annotator(masking_settings) -> annotation.Annotator | None:
  """spaCy's parse and entities for the summary, or None where spaCy or the pipeline is not
  installed (the masking itself needs neither)."""
  try:
    annotation.load_pipeline(masking_settings.nlp_pipeline, parse=True, ner=True)
  except annotation.AnnotatorError as e:
    logging.warning("%s: the entity and noun-chunk shares are left out", e)
    return None
  return annotation.Annotator(masking_settings.nlp_pipeline)


def show(parts: assembly.Assembly, workdir: str, count: int, step: int = 0
         ) -> tuple[list[dict], dict]:
  """(the first `count` rows, the summary of the whole batch) of the run's first batch, its
  rows masked as at `step`."""
  # one batch: no worker processes
  parts = parts.with_settings(parts.settings.replace(data={"worker_count": 0}))
  settings = parts.settings
  run_dir = workdir_lib.Workdir(workdir)
  inp = parts.input(run_dir.tokenizers, run_dir.vocab_stats)
  annotator = _annotator(settings.masking)
  source = inp.train_source
  # Raw text (not a mixture, whose weights apply to its parts): annotated as it is read.
  if annotator is not None and not isinstance(source, (mixture.Mixture, reader.PreparedSplit)):
    source = pipeline.DocumentReader(source, inp.tokenizer.to_bytes(), annotator)
  host = dataclasses.replace(inp, train_source=source).train_iter(parts.plan.whole_run)
  host.masks_late = True  # take the batch unmasked, then mask it keeping its annotations
  batch = next(host)
  host.close()
  out = host.masking.with_host_keys(batch, step)
  table = inp.cooccurrence or cooccurrence.compute(
      pipeline.tokenized(inp.train_source, inp.tokenizer), inp.stats,
      min(settings.masking.stats_max_documents, _NGRAM_DOCUMENTS),
      settings.masking.pmi_ngrams, settings.masking.pmi_min_count,
      settings.masking.pmi_length_shares, settings.masking.pmi_coverage,
      settings.masking.pmi_score)
  original = batch["input_ids"]
  ngrams = display.ngram_unit_ids(original, batch["segment_ids"], inp.stats, table)
  rows = display.rows(out, original, inp.tokenizer.word_pieces(), count)
  summary = display.summary(out, original, batch.get("annotations"), ngrams)
  # The PMI vocabulary those n-grams come from: its size, and the share of the sample's words
  # inside an occurrence of one (masking.pmi_coverage's aim).
  summary["pmi_ngrams"] = len(table.ngrams)
  summary["pmi_coverage"] = None if table.coverage != table.coverage else round(table.coverage, 4)
  return rows, summary
