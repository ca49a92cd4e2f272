"""benchmarks/strategies.py's table: mean ± sample standard deviation over the seeds in percent
(question answering's F1 already is), and a strategy measured with one seed shows its value
alone, with no spread it does not have. The advice is called ahead of or behind random only where
the gap is larger than both spreads together."""

import json
import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import strategies  # pylint: disable=g-import-not-at-top,wrong-import-position


def _row(strategy, seed, accuracy, qa_f1):
  return {"strategy": strategy, "seed": seed, "steps": 10, "mlm_accuracy": accuracy,
          "kjv_qa": {"headline": "f1", "kind": "question_answering", "f1": qa_f1}}


def test_the_table_gives_mean_and_sample_sd_and_one_seed_alone():
  rows = [_row("random", 0, 0.40, 40.0), _row("random", 1, 0.42, 44.0),
          _row("random", 2, 0.44, 48.0), _row("span", 0, 0.45, 50.0)]
  lines = strategies.table(rows, ["kjv_qa"]).splitlines()
  assert lines[0] == "| strategy | seeds | steps | held-out MLM accuracy | `kjv_qa` f1 |"
  assert lines[2] == "| random | 3 | 10 | 42.0 ± 2.0 | 44.0 ± 4.0 |"
  assert lines[3] == "| span | 1 | 10 | 45.0 | 50.0 |"


def test_the_advice_is_judged_only_where_the_gap_is_larger_than_both_spreads():
  rows = [_row("random", 0, 0.4, 40.0), _row("random", 1, 0.4, 42.0),  # 41.0 ± 1.4
          _row("span", 0, 0.4, 44.0), _row("span", 1, 0.4, 46.0),  # 45.0 ± 1.4: +4.0 > 2.8
          _row("entity", 0, 0.4, 38.0), _row("entity", 1, 0.4, 44.0)]  # 41.0 ± 4.2
  lines = strategies.advice(rows, ["kjv_entities", "kjv_qa"]).splitlines()
  assert lines[0] == "| advice | task | strategy | random | gap | verdict |"
  assert ("| span for question answering | `kjv_qa` | 45.0 ± 1.4 | 41.0 ± 1.4 | +4.0 |"
          " ahead |") in lines
  assert ("| entity for question answering | `kjv_qa` | 41.0 ± 4.2 | 41.0 ± 1.4 | +0.0 |"
          " within the spread (± 5.7) |") in lines
  assert "| span for NER | `kjv_entities` | - | - | - | fewer than 2 seeds: none yet |" in lines
  assert len(strategies.advice(rows, ["kjv_qa"]).splitlines()) == 2 + 2  # span's, entity's


def test_the_page_gives_the_command_the_table_and_the_arms_still_to_run(tmp_path, monkeypatch):
  rows, page = tmp_path / "rows.jsonl", tmp_path / "strategies.md"
  rows.write_text(json.dumps(_row("random", 0, 0.40, 40.0)) + "\n")
  monkeypatch.setattr(sys, "argv", [
      "strategies.py", "--table_only", "--strategies=random,span", "--seeds=0,1", "--steps=10",
      "--tasks=kjv_qa", f"--rows={rows}", f"--table={page}"])
  strategies.main()
  text = page.read_text()
  assert ("\n    python benchmarks/strategies.py --strategies=random,span --seeds=0,1 --steps=10"
          " --tasks=kjv_qa\n") in text
  assert "\n| random | 1 | 10 | 40.0 | 40.0 |\n" in text
  assert text.endswith("\nNot run yet (the command above goes on with them): span seed 0,"
                       " random seed 1, span seed 1.\n")
