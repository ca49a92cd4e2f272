"""benchmarks/strategies.py's table: mean ± sample standard deviation over the seeds in percent
(question answering's F1 already is), and a strategy measured with one seed shows its value
alone, with no spread it does not have."""

import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import strategies  # pylint: disable=g-import-not-at-top,wrong-import-position


def _row(strategy, seed, accuracy, qa_f1):
  return {"strategy": strategy, "seed": seed, "steps": 10, "mlm_accuracy": accuracy,
          "kjv_qa": {"headline": "f1", "kind": "question_answering", "f1": qa_f1}}


def test_the_table_gives_mean_and_sample_sd_and_one_seed_alone(capsys):
  rows = [_row("random", 0, 0.40, 40.0), _row("random", 1, 0.42, 44.0),
          _row("random", 2, 0.44, 48.0), _row("span", 0, 0.45, 50.0)]
  strategies.print_table(rows, ["kjv_qa"])
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[0] == "| strategy | seeds | steps | held-out MLM accuracy | `kjv_qa` f1 |"
  assert lines[2] == "| random | 3 | 10 | 42.0 ± 2.0 | 44.0 ± 4.0 |"
  assert lines[3] == "| span | 1 | 10 | 45.0 | 50.0 |"
