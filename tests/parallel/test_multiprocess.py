"""Two CPU processes on localhost (jax.distributed, gloo) train together like one process.

Each process reads and masks only its data shard and feeds its half of every global batch;
checkpoints are written collectively; a checkpoint restores onto either process count.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import portpicker
import pytest

from conftest import REPO, assert_same_arrays, saved_state

pytestmark = pytest.mark.slow  # two training processes

OVERRIDES = ["--config.train.batch_size=8", "--config.data.num_shards=2",
             "--config.data.seq_len=32", "--config.masking.max_predictions_per_seq=10",
             "--config.model.num_layers=2", "--config.train.log_every_steps=2",
             "--config.train.checkpoint_every_steps=4", "--config.train.eval_every_steps=4",
             "--config.train.eval_batches=1", "--config.optimizer.warmup_steps=2"]


def _train(workdir, tokenizer_path, processes, stop_after=8, steps=8, extra=()):
  """Runs `steps` steps of mlmjax.main (or stops after `stop_after`) on `processes` processes
  with 2 CPU devices in all; `extra` flags last."""
  base = [sys.executable, "-m", "mlmjax.main", "--config=configs/tiny.py",
          f"--workdir={workdir}", f"--config.tokenizer.path={tokenizer_path}",
          f"--config.train.steps={steps}", f"--stop_after={stop_after}", *OVERRIDES, *extra]
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={2 // processes}")
  if processes == 1:
    cmds = [base]
  else:
    port = portpicker.pick_unused_port()
    cmds = [base + [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}",
                    f"--process_id={i}"] for i in range(processes)]
  procs = [subprocess.Popen(c, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True) for c in cmds]
  logs = [p.communicate(timeout=600)[1] for p in procs]
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log[-3000:]
  return logs


def _result(workdir, step):
  state = saved_state(workdir, step)
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  losses = {r["step"]: r["loss"] for r in rows if "loss" in r}
  return state, losses


def _assert_same(a, b):
  (state_a, losses_a), (state_b, losses_b) = a, b
  assert losses_a.keys() == losses_b.keys()
  np.testing.assert_allclose([losses_a[k] for k in sorted(losses_a)],
                             [losses_b[k] for k in sorted(losses_b)], rtol=1e-6)
  assert_same_arrays(state_a, state_b, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tokenizer_path):
  workdir = str(tmp_path_factory.mktemp("one"))
  _train(workdir, tokenizer_path, processes=1)
  return _result(workdir, 8)


def test_two_processes_train_like_one(two_process_run, one_process):
  """conftest's two_process_run: OVERRIDES' 8 steps, but checkpointed every 2 steps (its flags
  are TWO_PROCESS_OVERRIDES, shared with tests/training/test_buckets.py)."""
  workdir, logs = two_process_run
  assert "step 8/8 | loss" in logs[0] and "| loss" not in logs[1]  # process 0 logs
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6, 8]  # written once
  # the newest 3 (train.max_checkpoints_to_keep), written once
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["4", "6", "8"]
  _assert_same(_result(workdir, 8), one_process)


@pytest.mark.parametrize("first,then", [(2, 1), (1, 2)])
def test_checkpoint_resumes_on_another_process_count(tmp_path, tokenizer_path, one_process,
                                                     first, then):
  workdir = str(tmp_path)
  _train(workdir, tokenizer_path, processes=first, stop_after=4)
  logs = _train(workdir, tokenizer_path, processes=then)
  assert "Resumed from checkpoint at step 4" in logs[0]
  _assert_same(_result(workdir, 8), one_process)


def test_two_processes_stop_together_at_their_time_budget(tmp_path, tokenizer_path):
  """Each process measures its own training time; a step reads the smallest share spent over
  the devices, so both processes stop after the same step (if they disagreed, the one going on
  would wait forever in its next collective) and write one final checkpoint there. (Process 1
  logs warnings only: both ending, and one checkpoint, is what shows they agreed.)"""
  workdir = str(tmp_path)
  logs = _train(workdir, tokenizer_path, processes=2, stop_after=100_000, steps=100_000,
                extra=["--config.train.budget_hours=0.001", "--config.optimizer.warmup_steps=100",
                       "--config.train.checkpoint_every_steps=100000",
                       "--config.train.eval_every_steps=100000"])
  said = re.search(r"Time budget of 0.001 h spent \(([\d.]+) s of training\) at step (\d+)",
                   logs[0])
  assert said and float(said.group(1)) >= 3.6 and int(said.group(2)) > 4, logs[0][-2000:]
  assert os.listdir(os.path.join(workdir, "checkpoints")) == [said.group(2)]
