"""Never lose a step: SIGTERM saves and exits 0, SIGKILL at any moment resumes exactly,
a damaged checkpoint falls back to the previous one. Real subprocesses, as a user runs them."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, assert_same_arrays, latest_step, saved_state, user_env
from mlmjax.training.run import metrics

pytestmark = pytest.mark.slow  # training subprocesses, signalled and killed

STEPS = 200  # long enough that every signal lands mid-run, with checkpoints behind it
OVERRIDES = [f"--config.train.steps={STEPS}", "--config.train.batch_size=8",
             "--config.data.seq_len=32", "--config.masking.max_predictions_per_seq=10",
             "--config.model.num_layers=2", "--config.train.log_every_steps=5",
             "--config.train.checkpoint_every_steps=25", "--config.train.eval_every_steps=100",
             "--config.train.eval_batches=1", "--config.model.dropout_rate=0.1"]


def _command(workdir, tokenizer_path, *more):
  return [sys.executable, "-m", "mlmjax.main", "--config=configs/tiny.py",
          f"--workdir={workdir}", f"--config.tokenizer.path={tokenizer_path}", *OVERRIDES, *more]


def _start(workdir, tokenizer_path, *more):
  return subprocess.Popen(_command(workdir, tokenizer_path, *more), cwd=REPO, env=user_env(),
                          stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def _run_to_end(workdir, tokenizer_path, *more):
  proc = subprocess.run(_command(workdir, tokenizer_path, *more), cwd=REPO, env=user_env(),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stderr


def _wait_for(proc, needle, timeout=300):
  """Reads the child's log until a line contains `needle`; returns the lines read."""
  lines, deadline = [], time.time() + timeout
  while time.time() < deadline:
    line = proc.stderr.readline()
    if not line:
      break
    lines.append(line)
    if needle in line:
      return lines
  raise AssertionError(f"{needle!r} never appeared:\n{''.join(lines[-30:])}")


def _final(workdir):
  """(parameters + optimizer state + step as numpy, metric rows without timings)."""
  assert latest_step(workdir) == STEPS
  state = saved_state(workdir, STEPS)
  rows = []
  for line in open(os.path.join(workdir, "metrics.jsonl")):
    row = json.loads(line)
    rows.append({k: v for k, v in row.items() if not metrics.is_timing(k)})
  return state, rows


def _assert_same(a, b):
  (state_a, rows_a), (state_b, rows_b) = a, b
  assert_same_arrays(state_a, state_b)
  assert rows_a == rows_b  # every step logged once, with identical values


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tokenizer_path):
  workdir = str(tmp_path_factory.mktemp("uninterrupted"))
  _run_to_end(workdir, tokenizer_path)
  return _final(workdir)


def test_sigterm_saves_exits_zero_and_resumes_exactly(tmp_path, tokenizer_path, uninterrupted):
  workdir = str(tmp_path)
  proc = _start(workdir, tokenizer_path)
  _wait_for(proc, f"step 60/{STEPS}")
  proc.send_signal(signal.SIGTERM)
  rest = proc.stderr.read()
  assert proc.wait(timeout=120) == 0, rest[-3000:]
  saved = [line for line in rest.splitlines() if "Preemption notice (SIGTERM)" in line]
  assert len(saved) == 1, rest[-3000:]
  step = int(saved[0].split("checkpoint of step ")[1].split(";")[0])
  assert 60 < step < STEPS
  assert latest_step(workdir) == step
  assert f"Resumed from checkpoint at step {step}" in _run_to_end(workdir, tokenizer_path)
  _assert_same(_final(workdir), uninterrupted)


def test_sigterm_in_the_last_step_saves_it_before_the_final_evaluation(tmp_path, tokenizer_path):
  """The notice lands in step 20 of 20, as it is computed or saved, or in the final evaluation
  (300 batches) that follows: the checkpoint is saved at once and the evaluation left to the
  rerun, which resumes at step 20 and evaluates it. Nothing waits for the evaluation."""
  workdir = str(tmp_path)
  last = ["--config.train.steps=20", "--config.train.log_every_steps=1",
          "--config.train.eval_every_steps=20", "--config.train.eval_batches=300"]
  proc = _start(workdir, tokenizer_path, *last)
  _wait_for(proc, "step 19/20 | loss")  # logged once step 20 is under way
  proc.send_signal(signal.SIGTERM)
  rest = proc.stderr.read()
  assert proc.wait(timeout=120) == 0, rest[-3000:]
  assert "Preemption notice (SIGTERM): saved the checkpoint of step 20;" in rest, rest[-3000:]
  assert "eval at step 20" not in rest
  assert latest_step(workdir) == 20
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert rows[-1]["step"] == 20 and "loss" in rows[-1] and not any("eval/" in k for r in rows
                                                                    for k in r)
  again = _run_to_end(workdir, tokenizer_path, *last)
  assert "Resumed from checkpoint at step 20" in again and "eval at step 20: loss" in again
  assert latest_step(workdir) == 20


def test_sigkill_at_random_moments_and_mid_save_resumes_exactly(tmp_path, tokenizer_path,
                                                                uninterrupted):
  workdir = str(tmp_path)
  ckpt_dir = os.path.join(workdir, "checkpoints")
  rng = random.Random(0)
  kills = mid_save = 0
  saving = lambda: any("tmp" in n for n in os.listdir(ckpt_dir))
  for mode in ("random", "during_save", "random", "during_save"):
    saved = latest_step(workdir)
    proc = _start(workdir, tokenizer_path)
    log = "".join(_wait_for(proc, "| loss"))  # training is under way
    if saved is not None:  # every rerun takes up the last checkpoint, not step 0
      assert f"Resumed from checkpoint at step {saved} in " in log
    if mode == "random":
      time.sleep(rng.uniform(0.0, 1.5))
    else:  # the moment a save's temporary directory shows up, once one save is complete (so
      # that the rerun has a checkpoint to take up)
      deadline = time.time() + 120
      while time.time() < deadline and not (saving() and any(
          n.isdigit() for n in os.listdir(ckpt_dir))):
        time.sleep(0.002)
    if proc.poll() is None:
      proc.kill()
      kills += 1
      proc.wait()
      # killed inside a save: its temporary directory is left behind, unfinished
      mid_save += mode == "during_save" and saving()
    proc.wait()
  assert kills >= 3 and mid_save >= 1
  saved = latest_step(workdir)
  assert saved is not None
  assert f"Resumed from checkpoint at step {saved} in " in _run_to_end(workdir, tokenizer_path)
  _assert_same(_final(workdir), uninterrupted)


def test_truncated_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, tokenizer_path,
                                                                     uninterrupted):
  workdir = str(tmp_path)
  proc = _start(workdir, tokenizer_path)
  _wait_for(proc, f"step 80/{STEPS}")
  proc.kill()
  proc.wait()
  ckpt_dir = os.path.join(workdir, "checkpoints")
  steps = sorted(int(s) for s in os.listdir(ckpt_dir) if s.isdigit())
  latest, previous = steps[-1], steps[-2]
  # Truncate the biggest file of the latest checkpoint (its parameter data) to half.
  files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ckpt_dir, str(latest)))
           for f in fs]
  biggest = max(files, key=os.path.getsize)
  with open(biggest, "r+b") as f:
    f.truncate(os.path.getsize(biggest) // 2)
  log = _run_to_end(workdir, tokenizer_path)
  assert f"Checkpoint {latest} in {ckpt_dir} is unreadable" in log
  assert f"Resumed from checkpoint at step {previous}" in log
  assert os.path.isdir(os.path.join(workdir, "corrupt_checkpoints", str(latest)))
  _assert_same(_final(workdir), uninterrupted)
