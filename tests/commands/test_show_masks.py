"""`python -m mlmjax.show_masks`: a config's first batch as text with its masks marked, and the
summary that tells strategies apart (mlmjax/data/masking/display.py)."""

import json
import re

import numpy as np
import pytest

from masking_cases import NLP
from mlmjax.data.masking import display
from mlmjax.training import assembly
from mlmjax.training import masks_preview


def test_a_hand_made_row_is_shown_with_its_replacements():
  """The quick brown fox jumps: "quick" kept, then a run of two masked pieces, "fox" [MASK] and
  "jump" replaced by "dog" (adjacent masked pieces show as one run), "s" untouched."""
  pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581The", "\u2581quick",
            "\u2581brown", "\u2581fox", "\u2581jump", "s", "\u2581dog"]
  original = np.array([[2, 5, 6, 7, 8, 9, 10, 3]])
  out = {"input_ids": np.array([[2, 5, 6, 7, 4, 11, 10, 3]]),
         "segment_ids": np.array([[1] * 8]),
         "masked_positions": np.array([[2, 4, 5, 0]]), "masked_weights": np.array([[1, 1, 1, 0.]])}
  [row] = display.rows(out, original, pieces, 1)
  assert row["text"] == "The {quick=kept} brown {fox jump=[MASK]/random:dog}s"
  assert row["masked"] == [{"text": "quick", "replacement": "kept"},
                           {"text": "fox jump", "replacement": "[MASK]/random:dog"}]
  summary = display.summary(out, original, None, None)
  assert summary["masked_fraction"] == round(3 / 6, 4)
  assert summary["replacement"] == {"[MASK]": 1, "kept": 1, "random": 1}
  assert summary["inside_entities"] is None and summary["whole_ngrams"] is None


@pytest.mark.slow
def test_entity_masks_shown_whole_and_counted(micro_config, tmp_path):
  c = micro_config
  c.masking.update(strategy="entity", entity_ner=True, entity_heuristic=False, nlp_pipeline=NLP,
                   mask_rate=0.3, max_predictions_per_seq=12, stats_max_documents=200)
  rows, summary = masks_preview.show(assembly.Assembly.of(c), str(tmp_path), 3)
  assert [r["row"] for r in rows] == [0, 1, 2]
  for r in rows:
    json.dumps(r)
    for run in r["masked"]:
      assert f"{{{run['text']}=" in r["text"]
      assert all(k == "[MASK]" or k == "kept" or k.startswith("random:")
                 for k in run["replacement"].split("/"))
  assert summary["rows"] == 16 and abs(summary["masked_fraction"] - 0.3) < 0.03
  # Every entity the masks touch is masked whole; more of the masks lie in entities than
  # random masking puts there.
  assert summary["whole_entities"] == 1.0 and summary["inside_entities"] > 0.1
  assert summary["inside_noun_chunks"] is not None and summary["inside_ngrams"] is not None
  c.masking.strategy = "random"
  _, plain = masks_preview.show(assembly.Assembly.of(c), str(tmp_path), 0)
  assert plain["inside_entities"] < summary["inside_entities"]
  assert plain["whole_entities"] < 1.0


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["semantic", "contextual", "entity"])
def test_linguistic_masks_are_whole_words_and_change_from_step_to_step(micro_config, tmp_path,
                                                                       strategy):
  """No masked run is a lone piece of a longer word (a letter right before or after it, as in
  {c=[MASK]}ircumcise), and the same rows masked as at step 1 differ from step 0."""
  c = micro_config
  c.masking.update(strategy=strategy, mask_rate=0.3, max_predictions_per_seq=12,
                   stats_max_documents=200, pmi_min_count=3)
  shown = [masks_preview.show(assembly.Assembly.of(c), str(tmp_path), 4, step)
           for step in (0, 1)]
  texts = [[r["text"] for r in rows] for rows, _ in shown]
  for text in texts[0] + texts[1]:
    assert not re.search(r"[A-Za-z]\{|\}[A-Za-z]", text), text
  assert texts[0] != texts[1]
  # The PMI vocabulary the n-grams come from, sized to masking.pmi_coverage (half the words).
  summary = shown[0][1]
  assert summary["pmi_ngrams"] > 0 and 0.5 <= summary["pmi_coverage"] <= 0.6, summary
