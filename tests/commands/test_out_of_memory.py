"""Running out of memory ends a command in one `error:` line with what was needed and what to
do (errors.out_of_memory, caught in cli.py), exit status 1, no traceback."""

import resource
import subprocess
import sys

import pytest

from conftest import user_env
from mlmjax import errors

ADVICE = ("`python -m mlmjax.compile --config=bert:base --target=TARGET` shows what a config"
          " needs on a TPU slice or GPU node before a run; to fit this machine:"
          " --config.train.fit=auto (micro-batches and rematerialisation chosen by compiling;"
          " on a CPU also --config.train.fit_memory_gib=GIB), a smaller"
          " --config.train.batch_size, or a smaller preset (tiny, bert:mini)")


@pytest.mark.parametrize("exception,need", [
    # the CPU and GPU runtimes' words
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 54793508752 bytes."),
     ": a step needed 51.03 GiB at once"),
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2147483648"
                  " bytes."), ": a step needed 2.00 GiB at once"),
    # a TPU compile's
    (RuntimeError("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in"
                  " memory space hbm. Used 20.53G of 15.48G hbm. Exceeded hbm capacity by"
                  " 5.05G."), ": a step needed 20.53 GiB of 15.48 GiB"),
    (MemoryError(), ""),  # the host's, no size
])
def test_out_of_memory_says_what_was_needed_and_what_to_do(exception, need):
  assert errors.out_of_memory(exception, "bert:base") == f"out of memory{need}. {ADVICE}"


@pytest.mark.parametrize("exception", [
    RuntimeError("INTERNAL: something else"), ValueError("RESOURCE_EXHAUSTED: not jax's"),
    RuntimeError("an error that mentions RESOURCE_EXHAUSTED later")])
def test_other_errors_are_not_out_of_memory(exception):
  assert errors.out_of_memory(exception) is None


def _limit_memory():
  """12 GB of address space: jax and the data start, BERT-base's step (51 GiB on this CPU at
  the preset's batch) does not."""
  resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))


@pytest.mark.slow  # a subprocess compiles BERT-base's step (~20 s)
def test_bert_base_on_a_small_machine_ends_in_one_error_line(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "mlmjax.main", "--config=bert:base", f"--workdir={tmp_path}"],
      env=user_env(), preexec_fn=_limit_memory, capture_output=True, text=True, timeout=300,
      check=False)
  assert proc.returncode == 1, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: out of memory: a step needed ") and last.endswith(ADVICE)
  assert "Traceback" not in proc.stderr
