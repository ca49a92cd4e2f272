"""The command line, run as a user runs it: subprocesses from the repository root. (Training,
resuming, evaluating and predicting as a user who installed the wheel does:
tests/project/test_install.py.)"""

import glob
import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, user_env


def _run(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=user_env(),
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args,status,message", [
    (["--config=configs/tiny.py", "--config.train.stepz=3"], 2,
     "error: --config.train.stepz: no such config key (did you mean --config.train.steps?)"),
    pytest.param(["--config=tiny", "--config.masking.strategy=syntax",
                  "--config.masking.nlp_pipeline=no_such_pipeline"], 1,  # this machine lacks it
                 "error: masking.nlp_pipeline='no_such_pipeline': no spaCy pipeline of that name"
                 " or path is installed: pip install 'mlmjax[nlp]' (spaCy and en_core_web_sm),"
                 " or for another pipeline pip install spacy && python -m spacy download NAME",
                 marks=pytest.mark.slow),  # loads spaCy
])
def test_cli_config_errors_are_one_line(tmp_path, args, status, message):
  """In a real `python -m` process (tests/commands/test_command_lines.py has every command and
  every kind of bad input): one line, its exit status, nothing written."""
  proc = _run("mlmjax.main", *args, f"--workdir={tmp_path}")
  assert proc.returncode == status
  assert proc.stderr.strip() == message
  assert not os.listdir(tmp_path)  # nothing written


@pytest.mark.slow
def test_cli_selects_strategy_format_and_preset(tmp_path, tokenizer_path):
  """A preset file with a size argument, plus strategy and format switches on the command line."""
  workdir = str(tmp_path / "run")
  proc = _run("mlmjax.main", "--config=configs/bert.py:tiny", f"--workdir={workdir}",
              f"--config.tokenizer.path={tokenizer_path}", "--config.masking.strategy=span",
              "--config.data.format=sop", "--config.train.phases=((0.5, 32, 5), (0.5, 64, 10))",
              "--config.train.steps=4", "--config.train.batch_size=8",
              "--config.train.log_every_steps=2", "--config.train.eval_every_steps=4",
              "--config.train.eval_batches=1", "--config.optimizer.warmup_steps=1")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "nsp_acc" in proc.stderr and "nsp_accuracy" in proc.stderr
  assert "Phase 1 from step 2: MLM, seq_len 64, max_predictions 10" in proc.stderr
  saved = json.load(open(os.path.join(workdir, "config.json")))
  assert saved["masking"]["strategy"] == "span" and saved["data"]["format"] == "sop"


@pytest.mark.slow
def test_bench_prints_its_numbers(tokenizer_path, tmp_path):
  proc = _run("mlmjax.bench", "--config=configs/tiny.py", "--steps=2", "--input_seconds=0.5",
              "--loop_steps=10", "--eval_steps=2", f"--trace={tmp_path}",
              f"--config.tokenizer.path={tokenizer_path}", "--config.model.num_layers=1",
              "--config.train.batch_size=8")
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result["config"] == "configs/tiny.py" and result["batch"] == 8
  for key in ("parameters", "step_ms_median", "step_ms_min", "tokens_per_sec", "flops_per_step",
              "model_tflops_per_sec", "matmul_peak_tflops_measured", "mfu_measured_peak",
              "compile_s", "compiled_memory_bytes_per_device", "input_tokens_per_sec",
              "eval_step_ms_median", "eval_compiled_memory_bytes_per_device"):
    assert 0 < result[key] < float("inf"), (key, result)
  assert result["step_ms_min"] <= result["step_ms_median"]
  assert 0 <= result["input_wait_fraction"] < 1
  assert result["rated_peak_tflops"] is None  # a CPU has no datasheet peak
  # --trace: a profile of 3 more train steps
  trace, = glob.glob(str(tmp_path / "plugins/profile/*/perfetto_trace.json.gz"))
  with gzip.open(trace) as f:
    events = json.load(f)["traceEvents"]
  assert sum("train_step" in e.get("name", "") and e.get("ph") == "X" for e in events) >= 3


def test_gpu_script_stops_where_there_is_no_gpu(tmp_path):
  """benchmarks/gpu.sh measures nothing on a machine without a GPU: it says so and exits 1."""
  proc = subprocess.run(["bash", "benchmarks/gpu.sh", str(tmp_path), "data/none"], cwd=REPO,
                        env={**user_env(), "PYTHON": sys.executable}, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "AssertionError: no GPU: nothing to measure" in proc.stdout
  assert sorted(os.listdir(tmp_path)) == ["device.txt"]


def test_user_dir_imports_a_file_or_a_package_once_and_a_failure_is_one_line(tmp_path,
                                                                             monkeypatch):
  """--user_dir and a run's user_dir (user_code.load): a .py file as the module of its name, a
  package folder from its parent; imported once (kept where its file is gone); what its code
  raises, one ConfigError line."""
  from mlmjax import errors  # pylint: disable=g-import-not-at-top
  from mlmjax import user_code  # pylint: disable=g-import-not-at-top
  load = lambda path: user_code.load(path, f"--user_dir={path}")
  monkeypatch.setattr(sys, "path", list(sys.path))
  (tmp_path / "mine_file.py").write_text(
      "import sys\nsys.mine_imported = getattr(sys, 'mine_imported', 0) + 1\n")
  (tmp_path / "mine_pkg").mkdir()
  (tmp_path / "mine_pkg" / "__init__.py").write_text("VALUE = 3\n")
  (tmp_path / "broken.py").write_text("1 / 0\n")
  try:
    load(str(tmp_path / "mine_file.py"))
    load(str(tmp_path / "mine_file.py"))
    load(str(tmp_path / "moved" / "mine_file.py"))  # gone, but imported already
    assert sys.mine_imported == 1 and sys.modules["mine_file"].__file__.endswith("mine_file.py")
    load(str(tmp_path / "mine_pkg") + "/")
    assert sys.modules["mine_pkg"].VALUE == 3
    with pytest.raises(errors.ConfigError) as e:
      load(str(tmp_path / "broken.py"))
    assert str(e.value) == (f"--user_dir={tmp_path / 'broken.py'}: cannot be imported:"
                            " ZeroDivisionError: division by zero")
    assert "broken" not in sys.modules
  finally:
    for name in ("mine_file", "mine_pkg"):
      sys.modules.pop(name, None)
    del sys.mine_imported
