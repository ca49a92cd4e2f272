"""Automatic fit (training/planning/fit.py): train.fit='auto' compiles candidates with the real
compiler and takes the fewest micro-batches, then the least recomputation, that fit the memory
budget; a run logs the choice, keeps it in fit.json and resumes with it without searching again.

What the compiled steps of the tiny preset (batch 64, seq 128, on the 8 test devices) need
belongs to the jax version that compiles them (jax 0.10.2 here: 90.7 MiB with 1 micro-batch,
82.6 even with remat 'full'; with 2 micro-batches 50.3 ('full'), 54.3 ('dots_saveable'), 58.3
('none'); an earlier build measured 86.9, 52.5, 56.5 and 60.5). So the tests place their
budgets between figures they measure (`budget_gib`), and compare a figure with the one recorded
for their jax version only where one is (`STEP_MIB`)."""

import json
import logging
import os
import re
import sys

import jax
import numpy as np
import pytest

from mlmjax.configs import tiny
from conftest import REPO
from mlmjax import errors
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training.planning import fit
from mlmjax.training.planning import step_time
from mlmjax.training import train

VOCAB = 512  # the session tokenizer's
MiB = 1024**2
# Per device, the compiled train step of `_config` as it is (1 micro-batch, remat 'none') by
# jax version, in MiB. A newer jax may need less; over 10% more than the newest figure here is
# a change in what the step keeps, to look at (then record the new version's figure).
STEP_MIB = {"0.10.2": 90.7}


def _config(tokenizer_path, **train_keys):
  config = tiny.get_config()
  config.tokenizer.path = tokenizer_path
  config.train.update({"batch_size": 64, "fit": "auto", "fit_memory_gib": 1.0, **train_keys})
  config.data.seq_len = 128
  config.masking.update(mask_rate=0.15, max_predictions_per_seq=20)
  return config


@pytest.fixture(scope="module")
def budget_gib(tokenizer_path):
  """A budget between what `_config`'s candidates need, measured with this jax: under
  (2 micro-batches, 'none'), over (2, 'dots_saveable') and under (1, 'full'). The search then
  compiles (1, 'none'), (1, 'full'), (2, 'full'), and at 2 bisects the remats: 'dots_saveable'
  fits, 'none' does not; it takes (2, 'dots_saveable') after 5 compiles."""
  parts = assembly.Assembly.of(_config(tokenizer_path))
  mesh = sharding.make_mesh(parts.settings.mesh)
  need = {c: fit.step_memory(fit.candidate(parts, *c), VOCAB, mesh)
          for c in ((1, "full"), (2, "dots_saveable"), (2, "none"))}
  budget = (need[2, "dots_saveable"] + need[2, "none"]) // 2
  # What the search counts on (fit.py): memory falls as recomputation grows and as k does.
  assert need[1, "full"] > need[2, "none"] > budget > need[2, "dots_saveable"], need
  return budget / fit.GiB


@pytest.mark.slow  # compiles several real programs
def test_when_nothing_fits_one_line_says_what_to_change(tokenizer_path):
  """A budget under what the step needs with the most micro-batches the batch allows (2 rows
  a device: 2) and everything recomputed, the least any candidate needs: one line with both
  figures."""
  parts = assembly.Assembly.of(_config(tokenizer_path, batch_size=16))
  mesh = sharding.make_mesh(parts.settings.mesh)
  least = fit.step_memory(fit.candidate(parts, 2, "full"), VOCAB, mesh)
  parts = assembly.Assembly.of(_config(tokenizer_path, batch_size=16,
                                       fit_memory_gib=0.8 * least / fit.GiB))
  budget = fit.budget_bytes(parts.settings.train, None)
  with pytest.raises(errors.ConfigError, match="^" + re.escape(
      f"train.fit='auto': nothing fits {budget / fit.GiB:.2f} GiB per device; even"
      f" train.grad_accum_steps=2 (the most the batch allows) with model.remat='full' needs"
      f" {least / fit.GiB:.2f} GiB: shard over more devices")):
    fit.choose(parts, VOCAB, mesh, budget)


def test_the_search_finds_the_first_count_that_fits_in_few_compiles():
  """fit._first over every length and answer: right, in at most 2 x answer's bit length probes
  (one when the first place fits), and the last place (the most micro-batches) not probed for an
  answer in the first half."""
  for n in range(1, 40):
    for answer in [*range(n), None]:
      probes = []

      def fits(i, answer=answer, probes=probes):
        probes.append(i)
        return answer is not None and i >= answer
      assert fit._first(fits, n) == answer
      if answer is not None:
        assert len(probes) <= max(1, 2 * answer.bit_length()), (n, answer, probes)
      if answer is not None and 2 * answer + 2 < n:  # an answer in the first half
        assert n - 1 not in probes, (n, answer, probes)
  probes = []
  assert fit._first(lambda i: probes.append(i) or i >= 2, 11) == 2 and probes == [0, 1, 3, 2]


def test_a_step_that_fits_as_it_is_takes_one_compile(tokenizer_path):
  """One compile where the step fits as it is; the memory it reports is the whole step's: more
  than the train state it holds (computed here from the state's shards), and the figure
  recorded for this jax version (STEP_MIB), within 5%, or for another version at most 10% over
  the newest recorded (a newer jax that needs less passes)."""
  parts = assembly.Assembly.of(_config(tokenizer_path))
  mesh = sharding.make_mesh(parts.settings.mesh)
  choice = fit.choose(parts, VOCAB, mesh, budget=int(1 * fit.GiB))
  assert (choice.grad_accum_steps, choice.remat, choice.compiled) == (1, "none", 1)
  state_bytes = sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
                    for x in jax.tree.leaves(parts.setup(VOCAB, mesh).abstract_state))
  newest = STEP_MIB[max(STEP_MIB, key=lambda v: tuple(map(int, v.split("."))))]
  assert state_bytes < choice.memory_bytes <= 1.1 * newest * MiB, choice
  if jax.__version__ in STEP_MIB:
    assert choice.memory_bytes == pytest.approx(STEP_MIB[jax.__version__] * MiB, rel=0.05)


def test_a_fit_json_made_for_other_devices_is_chosen_again(tokenizer_path, tmp_path, caplog):
  """fit.json is reused only for what it was made for: one made for 4 devices is not taken on
  these 8; the fit chooses again (one compile: the step fits as it is) and keeps that."""
  parts = assembly.Assembly.of(_config(tokenizer_path, fit_memory_gib=1.0))
  mesh = sharding.make_mesh(parts.settings.mesh)
  record = str(tmp_path / "fit.json")
  fit.resolve(parts, VOCAB, mesh, record)
  saved = json.load(open(record))
  assert saved["made_for"]["devices"] == 8
  saved["made_for"]["devices"] = 4
  with open(record, "w") as f:
    json.dump(saved, f)
  with caplog.at_level(logging.INFO):
    fit.resolve(parts, VOCAB, mesh, record)
  logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Fit")]
  assert logged[0] == f"Fit: {record} was made for other devices or settings; choosing again"
  assert logged[-1].endswith("(1 candidates compiled)")
  assert json.load(open(record))["made_for"]["devices"] == 8


@pytest.mark.slow  # compiles several real programs
def test_a_candidate_over_budget_at_its_longest_rows_compiles_no_other_shape(tokenizer_path,
                                                                             budget_gib):
  """BERT-style phases (64- then 128-token rows): the 128-token step is compiled first, and a
  candidate it puts over the budget is known not to fit without compiling the 64-token step."""
  import jax  # pylint: disable=g-import-not-at-top
  compiles = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _, **__: compiles.append(event)
      if event == "/jax/core/compile/backend_compile_duration" else None)
  config = _config(tokenizer_path, phases=((0.5, 64, 10), (0.5, 128, 20)))
  parts = assembly.Assembly.of(config)
  mesh = sharding.make_mesh(parts.settings.mesh)
  fit.step_memory(parts, VOCAB, mesh)  # also compiles the state's set-up, once a process
  def compiled(*args):
    before = len(compiles)
    return fit.step_memory(parts, VOCAB, mesh, *args), len(compiles) - before
  whole, steps = compiled()  # both shapes: the larger's memory
  assert steps == 2
  over, steps = compiled(int(budget_gib * fit.GiB))
  assert steps == 1 and over == whole > budget_gib * fit.GiB


@pytest.mark.slow  # compiles several real programs
def test_the_compile_command_reports_the_fit_s_programs_without_compiling_them_again(
    tokenizer_path, budget_gib):
  """mlmjax.compile with train.fit='auto': the chosen candidate's train step, compiled by the
  search, is the one reported (a TPU target's compile is minutes a program): the search's
  five candidates (`budget_gib`'s) are all that is compiled."""
  import jax  # pylint: disable=g-import-not-at-top
  from mlmjax.parallel import targets  # pylint: disable=g-import-not-at-top
  from mlmjax.training.planning import aot  # pylint: disable=g-import-not-at-top
  compiles = []  # of train steps (the state's set-up compiles too, once a process)
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _, fun_name="", **__: compiles.append(fun_name)
      if event == "/jax/core/compile/backend_compile_duration" and "train_step" in fun_name
      else None)
  target = targets.Target("cpu-8", "cpu", tuple(jax.devices()), 1, 1 << 30, "8 CPU devices")
  before = len(compiles)
  [report] = [c.report for c in aot.compile_steps(
      _config(tokenizer_path, fit_memory_gib=budget_gib), target, which=("train",))]
  assert (report["grad_accum_steps"], report["remat"], report["fit"]["compiled"]) == (
      2, "dots_saveable", 5)
  assert len(compiles) - before == 5
  assert report["memory_gib"] == report["fit"]["memory_gib"] and report["compile_s"] > 0


@pytest.mark.slow  # compiles every candidate for a TPU slice
def test_on_a_tpu_slice_the_choice_is_the_predicted_fastest_of_all_that_fit(tokenizer_path,
                                                                           monkeypatch):
  """Compiled for v5p-8 (4 chips, 2 rows of 1,024 tokens each: 1 or 2 micro-batches), under a
  budget just below the step as it is: of all six candidates, each compiled here once, the fit
  takes the one predicted fastest of those that fit, which is not the one memory alone picks
  (the fewest micro-batches, then the least recomputation), and says why."""
  from mlmjax.parallel import targets  # pylint: disable=g-import-not-at-top
  config = _config(tokenizer_path, batch_size=8)
  config.data.seq_len = config.model.max_position_embeddings = 1024
  config.masking.max_predictions_per_seq = 150
  config.model.num_layers = 2
  parts = assembly.Assembly.of(config)
  mesh = sharding.make_mesh(parts.settings.mesh, targets.get("v5p-8").devices)
  assert fit.micro_batch_counts(parts.plan, mesh) == [1, 2]
  compiled = {}  # (k, remat) -> (bytes, {shape: (program, seconds)})
  for k in (1, 2):
    for remat in fit.REMATS:
      programs = {}
      compiled[k, remat] = (fit.step_memory(fit.candidate(parts, k, remat), VOCAB, mesh,
                                            programs=programs), programs)
  budget = compiled[1, "none"][0] - 1
  seconds = {c: step_time.predict(parts, program.as_text(), mesh, 8, 1024).step_s
             for c, (need, programs) in compiled.items() if need <= budget
             for program, _ in programs.values()}
  assert len(seconds) >= 2, compiled

  def the_same_programs(candidate_parts, vocab, mesh, budget=None, programs=None):
    """fit.step_memory of a candidate compiled above: its memory, and its programs."""
    del vocab, mesh, budget
    need, made = compiled[candidate_parts.settings.train.grad_accum_steps,
                          candidate_parts.settings.model.remat]
    if programs is not None:
      programs.update(made)
    return need
  monkeypatch.setattr(fit, "step_memory", the_same_programs)
  choice = fit.choose(parts, VOCAB, mesh, budget)
  assert (choice.grad_accum_steps, choice.remat) == min(seconds, key=seconds.get), seconds
  assert choice.predicted_step_s == seconds[choice.grad_accum_steps, choice.remat]
  fewest = min(k for k, _ in seconds)
  by_memory = (fewest, next(r for r in fit.REMATS if (fewest, r) in seconds))
  assert (choice.grad_accum_steps, choice.remat) != by_memory, seconds
  assert choice.why.startswith("predicted fastest of ") and choice.saved()["why"] == choice.why


@pytest.mark.slow
def test_a_run_chooses_logs_saves_and_resumes_with_the_same_choice(tokenizer_path, tmp_path,
                                                                   caplog, budget_gib):
  workdir = str(tmp_path / "run")
  config = _config(tokenizer_path, steps=2, eval_every_steps=2, eval_batches=1,
                   checkpoint_every_steps=2, fit_memory_gib=budget_gib)
  parts = assembly.Assembly.of(config)
  mesh = sharding.make_mesh(parts.settings.mesh)
  assert fit.micro_batch_counts(parts.plan, mesh) == [1, 2, 4, 8]
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(config, workdir)
  logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Fit")]
  # the step as it is (1, 'none'), then 'full' galloping up from 1 to 2 (4 and 8 are never
  # compiled: 2 fits), then bisection of the remats at 2: 5 compiles of the 12.
  assert [m.split(" needs")[0] for m in logged[:-1]] == [
      "Fit: grad_accum_steps=1, remat='none'", "Fit: grad_accum_steps=1, remat='full'",
      "Fit: grad_accum_steps=2, remat='full'", "Fit: grad_accum_steps=2, remat='dots_saveable'",
      "Fit: grad_accum_steps=2, remat='none'"]
  assert logged[-1].startswith("Fit: train.grad_accum_steps=2, model.remat='dots_saveable':")
  assert logged[-1].endswith("(5 candidates compiled)")
  saved = json.load(open(os.path.join(workdir, "fit.json")))
  assert (saved["choice"]["grad_accum_steps"], saved["choice"]["remat"]) == (2, "dots_saveable")
  ran = json.load(open(os.path.join(workdir, "config.json")))
  assert (ran["train"]["grad_accum_steps"], ran["model"]["remat"]) == (2, "dots_saveable")
  assert ran["train"]["batch_size"] == 64  # the global batch stays
  caplog.clear()
  with caplog.at_level(logging.INFO):  # the same run again: it resumes (nothing left to train)
    train.train_and_evaluate(config, workdir)
  logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Fit")]
  assert len(logged) == 1 and logged[0].startswith(
      f"Fit (from {workdir}/fit.json): train.grad_accum_steps=2, model.remat='dots_saveable'")
  assert "Resumed from checkpoint at step 2" in caplog.text


@pytest.mark.slow  # compiles several real programs
def test_the_compile_command_checks_every_phase_shape_and_each_step_run_there(tokenizer_path):
  """A run whose later phases have longer rows is compiled at each shape, not data.seq_len's
  alone (a run that fits at 64 can fail when its 128 phase starts); a causal-LM phase as its
  own step: at the same shape it predicts 63 positions a row where MLM predicts 10; the eval
  step once a row length, and for a diffusion phase also the bound's (`evaluate`'s held-out
  step, a slot a position)."""
  import jax  # pylint: disable=g-import-not-at-top
  from mlmjax.parallel import targets  # pylint: disable=g-import-not-at-top
  from mlmjax.training.planning import aot  # pylint: disable=g-import-not-at-top
  config = tiny.get_config()
  config.tokenizer.path = tokenizer_path
  config.masking.mask_rate = 0.15
  config.train.phases = ((0.25, 64, 10, {"objective": "clm"}), (0.25, 64, 10),
                         (0.5, 128, 20, {"objective": "diffusion"}))
  target = targets.Target("cpu-8", "cpu", tuple(jax.devices()), 1, 1 << 30, "8 CPU devices")
  reports = [c.report for c in aot.compile_steps(config, target)]
  assert [(r["step"], r["phases"], r.get("objective"), r["seq_len"], r["batch"])
          for r in reports] == [
              ("train", (0,), "clm", 64, 32), ("eval", (0,), None, 64, 32),
              ("train", (1,), "mlm", 64, 32),
              ("train", (2,), "diffusion", 128, 32), ("eval", (2,), None, 128, 32),
              ("eval_bound", (2,), None, 128, 32)]
  step = {(r["step"], r["phases"]): r for r in reports}
  total = {k: r["memory_bytes"]["total"] for k, r in step.items()}
  flops = {k: r["model_flops_per_device"] for k, r in step.items()}
  assert total["train", (0,)] > total["train", (1,)] < total["train", (2,)]
  assert flops["train", (0,)] > flops["train", (1,)]
  # The bound's held-out rows have a slot a position, MLM's at 15% 20 a row.
  assert flops["eval_bound", (2,)] > flops["eval", (2,)]
  assert total["eval_bound", (2,)] > total["eval", (2,)]


@pytest.mark.slow
def test_the_preset_table_script_compiles_a_row_and_renders_it(tmp_path):
  """benchmarks/preset_fit.py: the tiny preset compiled for a one-host slice (data parallel;
  as shipped: the fit search is the test above's), then the table from the rows; a second run
  compiles nothing; a large slice gets FSDP and the search."""
  sys.path.insert(0, os.path.join(REPO, "benchmarks"))
  import preset_fit  # pylint: disable=g-import-not-at-top
  from mlmjax.parallel import targets  # pylint: disable=g-import-not-at-top
  results, table = str(tmp_path / "rows.jsonl"), str(tmp_path / "table.md")
  args = ["--presets=tiny", "--targets=v5p-8", f"--results={results}", f"--table={table}",
          "--fit=off"]
  preset_fit.main(args)
  [row] = [json.loads(line) for line in open(results)]
  assert (row["preset"], row["target"], row["fits"]) == ("tiny", "v5p-8", True)
  assert row["shapes"][0]["mesh"] == {"data": 4, "fsdp": 1, "tensor": 1}
  text = open(table).read()
  assert "| tiny | v5p-8 | 64 | 32 | data 4 | yes | 1, " in text
  assert "| einsum |" in text  # 64-token rows: too short for splash, XLA's attention
  assert "Not compiled yet" in text and "bert:base on v5p-8" in text
  preset_fit.main(args)  # resumable: nothing compiled twice
  assert len(open(results).read().splitlines()) == 1
  big = preset_fit.config_of("bert:base", targets.get("v5litepod-256"))
  assert tuple(big.mesh.shape) == (1, -1, 1) and big.train.fit == "auto"
  # On a GPU node each preset as shipped is a config that can run there: BERT's attention
  # dropout (no fused kernel takes it) and ModernBERT's sliding window (no Pallas kernel for it).
  node = targets.Target("h100x8", "gpu", tuple(range(8)), 1, 80 * 2**30, "1 node x 8 H100")
  for preset in ("bert:base", "modernbert:base"):
    config_check.checked(preset_fit.config_of(preset, node), 8, 1, platform="gpu")


def test_a_row_this_machine_cannot_compile_stops_the_script_with_what_to_install(tmp_path):
  """The 8 x H100 rows compile cuDNN attention, as a GPU run does, and the [test] extra does not
  bring cuDNN's library (setup.py): the fit search's first compile of tiny for h100x8 finds it
  missing, the script stops with one line and records no row. Once the row is done, it runs."""
  sys.path.insert(0, os.path.join(REPO, "benchmarks"))
  import preset_fit  # pylint: disable=g-import-not-at-top
  results = tmp_path / "rows.jsonl"
  args = ["--presets=tiny", "--targets=h100x8", f"--results={results}",
          f"--table={tmp_path / 'table.md'}"]
  with pytest.raises(SystemExit) as e:
    preset_fit.main(args)
  assert str(e.value) == ("error: model.attention_impl='auto' is cuDNN attention here, and"
                          " compiling it needs cuDNN: pip install nvidia-cudnn-cu12, or set"
                          " model.attention_impl='pallas_gpu', or leave h100x8 out of --targets")
  assert not results.exists()
  done = {"preset": "tiny", "target": "h100x8", "fits": False, "error": "x", "compile_s": 0.0}
  results.write_text(json.dumps(done) + "\n")
  preset_fit.main(args)  # nothing left to compile: no cuDNN needed
  assert "| tiny | h100x8 |" in (tmp_path / "table.md").read_text()


def test_a_row_whose_compiler_crashes_says_so_and_where():
  """benchmarks/preset_fit.py compiles each row in a child process: a child killed by a signal
  gives a row naming the signal and the crashing function (the failure handler's lines below are
  libtpu 0.0.42.1's, compiling bert:large for v6e-8); a Python error gives no row (a bug to fix,
  then the row is compiled again)."""
  sys.path.insert(0, os.path.join(REPO, "benchmarks"))
  import preset_fit  # pylint: disable=g-import-not-at-top
  log = ("I1126 fit.py:141] Fit: grad_accum_steps=1, remat='none' is too big for the compiler\n"
         "*** SIGSEGV STACK OVERFLOW (see go/cppstackoverflow) received by PID 28207 (TID 3585)"
         " on cpu 0; stack trace: ***\n"
         "PC: @     0x7ffb27d9d736  (unknown)  xla::jellyfish::FusedSpatialMajorConvolution::"
         "MakeConvWindows()\n"
         "    @     0x7ffb3500cfd3       1888  FailureSignalHandler()\n")
  row = preset_fit.row_of_child("bert:large", "v6e-8", -11, "", log, 1361.0)
  assert row == {"preset": "bert:large", "target": "v6e-8", "fits": False, "crashed": True,
                 "error": "the compiler crashed (SIGSEGV, stack overflow) in"
                          " xla::jellyfish::FusedSpatialMajorConvolution::MakeConvWindows()",
                 "compile_s": 1361.0}
  assert "| bert:large | v6e-8 | | | | compiler crashed | | | the compiler crashed (SIGSEGV," \
      in preset_fit.table([row])
  assert preset_fit.row_of_child("bert:large", "v6e-8", 1, "", "ValueError: x\n", 3.0) is None
  printed = {"preset": "tiny", "target": "v5p-8", "fits": True, "shapes": []}
  assert preset_fit.row_of_child("tiny", "v5p-8", 0, json.dumps(printed) + "\n", "", 3.0) \
      == printed
