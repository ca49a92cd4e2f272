"""benchmarks/strategies.py's table: mean ± sample standard deviation over the seeds in percent
(question answering's F1 already is), and a strategy measured with one seed shows its value
alone, with no spread it does not have. The advice is called ahead of or behind random only where
a paired t-test over the seeds, Holm-corrected across the rows, says so; a task that random
initialisation does as well on is flagged."""

import json
import math
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import strategies  # pylint: disable=g-import-not-at-top,wrong-import-position
import study_stats  # pylint: disable=g-import-not-at-top,wrong-import-position


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
  init = {**_row("random_init", 0, None, 20.0), "pretrain_steps": 0}
  assert strategies.table([init], ["kjv_qa"]).splitlines()[2] == "| random_init | 1 | 0 | - | 20.0 |"


def test_holm_multiplies_the_ith_smallest_by_m_minus_i_and_keeps_the_order():
  # Holm (1979) by hand, m = 3 tested (nan is no test): 0.01*3, 0.03*2, then max(0.06, 0.04*1).
  # Bonferroni would give 0.12 and 0.09.
  adjusted = study_stats.holm([0.01, 0.04, 0.03, float("nan")])
  assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06])
  assert adjusted[3] != adjusted[3]
  assert study_stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, never lower


def test_the_advice_is_a_paired_t_test_over_seeds_corrected_by_holm():
  rows = [_row("random", 0, 0.4, 40.0), _row("random", 1, 0.4, 42.0), _row("random", 2, 0.4, 44.0),
          _row("span", 0, 0.4, 44.0), _row("span", 1, 0.4, 46.0), _row("span", 2, 0.4, 49.0),
          _row("entity", 0, 0.4, 38.0), _row("entity", 1, 0.4, 44.0), _row("entity", 2, 0.4, 44.0)]
  # span - random, seed by seed: 4, 4, 5; t = mean / (sd / sqrt 3) = 13 with 2 degrees of
  # freedom, where the two-sided p is 1 - t / sqrt(2 + t^2) = 0.00587; Holm over the 2 tested
  # rows doubles it. The unpaired gap (4.3) is within the two spreads added (2.0 + 2.5), and
  # Welch's t-test gives p = 0.08: only the pairing shows it.
  p = 1 - 13 / math.sqrt(2 + 13**2)
  diffs, p_span = strategies.paired_p(rows, "span", "kjv_qa")
  assert diffs == pytest.approx([4.0, 4.0, 5.0]) and p_span == pytest.approx(p, rel=1e-6)
  lines = strategies.advice(rows, ["kjv_entities", "kjv_qa"]).splitlines()
  assert lines[0] == "| advice | task | strategy | random | paired gap | p | Holm p | verdict |"
  assert (f"| span for question answering | `kjv_qa` | 46.3 ± 2.5 | 42.0 ± 2.0 | 4.3 ± 0.6 |"
          f" {p:.3f} | {2 * p:.3f} | ahead |") in lines
  # entity - random: -2, 2, 0: no difference, p = 1.
  assert ("| entity for question answering | `kjv_qa` | 42.0 ± 3.5 | 42.0 ± 2.0 | 0.0 ± 2.0 |"
          " 1.000 | 1.000 | no difference shown |") in lines
  assert ("| span for NER | `kjv_entities` | - | - | - | - | - | fewer than 2 seeds: none yet |"
          in lines)
  assert len(strategies.advice(rows, ["kjv_qa"]).splitlines()) == 2 + 2  # span's, entity's


def test_a_task_that_pretraining_does_not_move_is_flagged_in_the_advice():
  rows = [_row("random", s, 0.4, f) for s, f in enumerate((40.0, 42.0, 44.0))]
  rows += [_row("span", s, 0.4, f) for s, f in enumerate((44.0, 46.0, 49.0))]
  moved = [_row("random_init", s, None, f) for s, f in enumerate((20.0, 21.0, 22.0))]
  still = [_row("random_init", s, None, f) for s, f in enumerate((39.0, 43.0, 45.0))]
  assert strategies.responds(rows + moved, "kjv_qa")[0] == pytest.approx(21.0)
  assert strategies.responds(rows + moved, "kjv_qa")[1] < 0.05
  assert "| `kjv_qa` | 21.0 ± 1.0 | 42.0 ± 2.0 | +21.0 |" in strategies.pretraining(
      rows + moved, ["kjv_qa"])
  assert "| no: it cannot tell strategies apart |" in strategies.pretraining(
      rows + still, ["kjv_qa"])
  assert strategies.advice(rows + moved, ["kjv_qa"]).splitlines()[2].endswith("| ahead |")
  assert strategies.advice(rows + still, ["kjv_qa"]).splitlines()[2].endswith(
      "| ahead; the task does not respond to pretraining |")


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


def test_the_detectable_difference_is_found_at_the_power_it_claims():
  """The study's power by its definition. The paired differences (span - random: 1, 2, 3;
  entity - random: 0, 2, 4) pool to a variance of (2 x 1 + 2 x 4) / 4 = 2.5; drawn at the
  detectable mean with that spread, three seeds at a time, a two-sided paired t-test at the
  level finds the difference in 80% of 200,000 draws."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from scipy import stats  # pylint: disable=g-import-not-at-top
  random = [40.0, 42.0, 44.0]
  rows = [_row("random", s, 0.4, f) for s, f in enumerate(random)]
  rows += [_row("span", s, 0.4, f + d) for s, (f, d) in enumerate(zip(random, (1, 2, 3)))]
  rows += [_row("entity", s, 0.4, f + d) for s, (f, d) in enumerate(zip(random, (0, 2, 4)))]
  level = 0.05 / 9
  sd, smallest = strategies.detectable(rows, "kjv_qa", 3, level)
  assert sd == pytest.approx(math.sqrt(2.5))
  draws = np.random.default_rng(0).normal(smallest, sd, (200_000, 3))
  t = draws.mean(1) / (draws.std(1, ddof=1) / math.sqrt(3))
  assert np.mean(2 * stats.t.sf(np.abs(t), 2) < level) == pytest.approx(study_stats.POWER,
                                                                       abs=0.005)


def test_welch_p_is_welchs_test_by_its_definition():
  """benchmarks/study_stats.py's Welch p (diffusion.py's columns, the pretraining check), from
  Welch (1947): t over the unpooled standard error, the Welch-Satterthwaite degrees of freedom.
  Student's pooled test gives another p on these unequal spreads (0.030 against 0.037)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  a, b = [1.0, 2.0, 3.0], [10.0, 20.0, 30.0, 40.0]
  va, vb = 1.0 / 3, (500.0 / 3) / 4  # sample variance over n, each side
  t = (2.0 - 25.0) / math.sqrt(va + vb)
  df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)
  assert study_stats.welch_p(a, b) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-12)
  assert math.isnan(study_stats.welch_p(a, [1.0]))
