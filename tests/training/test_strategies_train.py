"""Every masking strategy and input format trains end to end and resumes bit-identically
(in-process, micro model)."""

import json

import numpy as np
import pytest

from conftest import assert_resumes_exactly
from masking_cases import NLP
from mlmjax.data.rows import formats
from mlmjax.training import train

pytestmark = pytest.mark.slow  # every test trains and resumes

# Each strategy once, each format at least once.
CASES = [
    ("random", "full_sentences"),
    ("whole_word", "segment_pair"),
    ("span", "doc_sentences"),
    ("entity", "sentence_pair"),
    ("frequency", "sop"),
    ("mixture", "full_sentences"),  # of the strategies that read language
    ("static", "segment_pair"),
    ("adaptive", "doc_sentences"),
]


@pytest.mark.parametrize("strategy,data_format", CASES)
def test_strategy_and_format_train_and_resume_exactly(tmp_path, micro_config, strategy,
                                                      data_format, caplog):
  c = micro_config
  c.masking.strategy = strategy
  c.data.format = data_format
  c.masking.adaptive_every_steps = 2
  if strategy == "span":  # SpanBERT: with its span-boundary objective
    c.objective.span_boundary_weight = 1.0
  if strategy == "mixture":
    # syntax, semantic, contextual and entity from spaCy's recogniser, one per row, the words
    # annotated as documents are read (the other strategies mix in tests/data/test_masker.py).
    c.masking.update(mixture="syntax=1,semantic=1,contextual=1,entity=1",
                     syntax_unit="noun_chunk", entity_ner=True, entity_heuristic=False,
                     nlp_pipeline=NLP, pmi_min_count=2, stats_max_documents=300)
  if strategy == "entity":
    gazetteer = tmp_path / "names.txt"
    gazetteer.write_text("the LORD\nthe children of Israel\n", encoding="utf-8")
    c.masking.entity_gazetteer = str(gazetteer)
  metrics = train.train_and_evaluate(c, str(tmp_path / "run"))
  assert np.isfinite(metrics["eval/loss"]) and metrics["eval/loss"] > 0
  if strategy == "mixture":
    assert (tmp_path / "run" / "tokenizer_stats_cooccurrence.npz").exists()
  rows = [json.loads(l) for l in open(tmp_path / "run" / "metrics.jsonl")]
  train_rows = [r for r in rows if "loss" in r]
  assert [r["step"] for r in train_rows] == [2, 4, 6, 8]
  pair = formats.has_pair_labels(data_format)
  assert ("eval/nsp_accuracy" in metrics) == pair
  assert all(("nsp_loss" in r) == pair for r in train_rows)
  assert all(("sbo_loss" in r) == (strategy == "span") for r in train_rows)
  if pair:
    assert 0.0 <= metrics["eval/nsp_accuracy"] <= 1.0 and np.isfinite(metrics["eval/nsp_loss"])
  # Interrupted after step 5 (mid checkpoint interval) and resumed: the same end, bit for bit.
  assert_resumes_exactly(c, str(tmp_path / "run"), str(tmp_path / "split"), 5, caplog)

