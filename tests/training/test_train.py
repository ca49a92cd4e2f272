"""Training: loss falls, exact resume, 8-device data parallel == 1 device."""

import collections
import json
import os
import struct

import jax
import numpy as np
import pytest

from mlmjax.configs import tiny
from conftest import assert_resumes_exactly, assert_same_arrays, train_iter, train_on_one_device
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training.run import checkpoint
from mlmjax.training.run import metrics as metrics_lib
from mlmjax.training import train

pytestmark = pytest.mark.slow  # every test trains and most resume


def test_loss_decreases_on_tiny_config(tmp_path, tokenizer_path):
  config = tiny.get_config()
  config.tokenizer.path = tokenizer_path  # skip tokenizer training; the model is tiny.py's
  config.train.steps = 60
  config.train.batch_size = 16  # tiny.py's 32 halved: the same model learns as visibly
  config.optimizer.warmup_steps = 10
  config.train.eval_every_steps = 60
  config.train.eval_batches = 1  # the losses read are the training rows'
  config.train.log_every_steps = 10
  train_on_one_device(config, str(tmp_path / "run"))
  rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
  losses = [r["loss"] for r in rows if "loss" in r]
  assert len(losses) == 6
  # From ~ln(512) = 6.24 (uniform guessing) to well below it.
  assert losses[-1] < losses[0] - 0.5 and losses[-1] < np.log(512) - 0.9, losses
  assert all(np.isfinite(losses))


@pytest.mark.e2e  # also at the newest jax (.ci/newest_jax)
def test_resume_is_bit_identical_with_stacked_layers(tmp_path, micro_config, caplog):
  """(Every strategy and format, unstacked layers: test_strategies_train.py.) Stacked layers
  checkpoint, resume and load (saved_state reads the run's own config) like unstacked ones."""
  micro_config.model.scan_layers = True
  straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
  train.train_and_evaluate(micro_config, straight)  # 8 steps in one go
  micro_config.train.checkpoint_every_steps = 3  # the checkpoint at 3 must not matter
  # The split run keeps its compiled programs in a folder of its own, where the resume finds
  # them (the train and eval steps at least) instead of compiling again (compile_cache.py).
  cache, loaded = tmp_path / "compile_cache", []
  micro_config.train.compilation_cache = str(cache)
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _, **__: loaded.append(event)
      if event == "/jax/compilation_cache/cache_retrieval_time_sec" else None)
  a, _ = assert_resumes_exactly(micro_config, straight, split, 5, caplog)  # 5 steps, then 3
  assert int(a["step"]) == 8
  assert f"compilation cache: {cache}" in caplog.text and len(loaded) >= 2
  assert any(name.startswith("jit_train_step-") for name in os.listdir(cache))
  # The logged metrics of the last steps agree exactly as well.
  def tail(path):
    return [{k: v for k, v in r.items() if not metrics_lib.is_timing(k)}
            for r in _rows(path) if r["step"] == 8]
  assert tail(straight) and tail(straight) == tail(split)


def test_eight_device_data_parallel_matches_one_device(micro_config, corpus, make_masker):
  assert jax.device_count() == 8
  micro_config.model.dropout_rate = 0.0  # (dropout on: see test_sharding.py)
  micro_config.model.attention_dropout_rate = 0.0
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  it = train_iter(micro_config, tok, corpus[0], make_masker(micro_config))
  batches = [next(it) for _ in range(4)]
  results = []
  for devices in (jax.devices()[:1], jax.devices()):
    mesh = sharding.make_mesh(micro_config.mesh, devices)
    assert mesh.shape["data"] == len(devices)
    setup = assembly.Assembly.of(micro_config).setup(tok.vocab_size, mesh)
    step = assembly.Assembly.of(micro_config).train_step(setup)
    state = setup.init_fn()
    losses = []
    for b in batches:
      state, m = step(state, sharding.to_device(b, mesh))
      losses.append(float(m["mlm_loss_sum"] / m["mlm_count"]))
    results.append((losses, jax.tree.map(np.asarray, state["params"])))
  (l1, p1), (l8, p8) = results
  np.testing.assert_allclose(l1, l8, rtol=1e-5)
  assert_same_arrays(p1, p8, rtol=1e-4, atol=1e-6)


def test_phases_switch_shapes_and_resume_exactly_across_the_switch(tmp_path, micro_config,
                                                                   caplog):
  micro_config.train.phases = ((0.5, 16, 3), (0.5, 32, 6))
  micro_config.train.checkpoint_every_steps = 8
  straight = str(tmp_path / "straight")
  train.train_and_evaluate(micro_config, straight)
  # Exactly at the switch (stopped inside phase 0 and resumed across it: test_phases.py).
  assert_resumes_exactly(micro_config, straight, str(tmp_path / "split4"), 4, caplog)


def test_same_config_and_seed_give_bit_identical_metrics(tmp_path, micro_config):
  def metrics(workdir):
    train.train_and_evaluate(micro_config, workdir)
    rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if not metrics_lib.is_timing(k)} for r in rows]
  first, second = metrics(str(tmp_path / "a")), metrics(str(tmp_path / "b"))
  assert len(first) == 6 and first == second  # 4 training rows, 2 evals


def _rows(workdir):
  return [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]


def test_old_checkpoints_are_pruned(tmp_path, micro_config):
  micro_config.train.checkpoint_every_steps = 2
  micro_config.train.max_checkpoints_to_keep = 2
  train.train_and_evaluate(micro_config, str(tmp_path))  # saves 2, 4, 6, 8
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["6", "8"]


def test_the_last_evaluation_happens_exactly_once_whatever_interrupts(tmp_path, micro_config,
                                                                     monkeypatch):
  """A preemption notice at the last step saves without evaluating (to exit quickly); the
  rerun finds nothing to train but evaluates the last step, once, however often it runs."""
  real = checkpoint.Checkpointer.reached_preemption
  monkeypatch.setattr(checkpoint.Checkpointer, "reached_preemption",
                      lambda self, step: step == micro_config.train.steps)
  train.train_and_evaluate(micro_config, str(tmp_path))
  assert [r["step"] for r in _rows(tmp_path) if "eval/loss" in r] == [4]
  monkeypatch.setattr(checkpoint.Checkpointer, "reached_preemption", real)
  for _ in range(2):
    metrics = train.train_and_evaluate(micro_config, str(tmp_path))
    assert [r["step"] for r in _rows(tmp_path) if "eval/loss" in r] == [4, 8]
  assert metrics == {}  # the second rerun had nothing left to do
  uninterrupted = str(tmp_path / "straight")
  train.train_and_evaluate(micro_config, uninterrupted)
  assert [r for r in _rows(tmp_path) if "eval/loss" in r] == [
      r for r in _rows(uninterrupted) if "eval/loss" in r]


def _tensorboard_scalars(directory):
  """{tag: [(step, value)]} read back from the event files (TFRecord framing, CRCs checked)."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  from tensorboardX.record_writer import masked_crc32c  # pylint: disable=g-import-not-at-top
  out = collections.defaultdict(list)
  for name in sorted(os.listdir(directory)):
    data = open(os.path.join(directory, name), "rb").read()
    pos = 0
    while pos < len(data):
      header = data[pos:pos + 8]
      (length,) = struct.unpack("<Q", header)
      assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
      record = data[pos + 12:pos + 12 + length]
      assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == (
          masked_crc32c(record))
      pos += 16 + length
      event = event_pb2.Event.FromString(record)
      for value in event.summary.value:
        out[value.tag].append((event.step, value.simple_value))
  return out


def test_tensorboard_gets_every_logged_scalar(tmp_path, micro_config):
  train.train_and_evaluate(micro_config, str(tmp_path))
  scalars = _tensorboard_scalars(tmp_path / "tensorboard")
  for row in _rows(tmp_path):
    for tag, value in row.items():
      if tag != "step":
        assert (row["step"], pytest.approx(value, rel=1e-6)) in scalars[tag], tag
  assert [s for s, _ in scalars["loss"]] == [2, 4, 6, 8]
  assert [s for s, _ in scalars["eval/mlm_accuracy"]] == [4, 8]


def test_the_compilation_cache_is_the_process_s_else_the_run_folder_s_and_is_restored(
    tmp_path):
  from mlmjax.training.run import compile_cache  # pylint: disable=g-import-not-at-top
  run_folder = str(tmp_path / "run" / "compile_cache")
  process_cache = jax.config.jax_compilation_cache_dir  # the tests' (conftest.py)
  assert compile_cache.folder("", run_folder) == process_cache
  assert compile_cache.folder("gs://b/cache", run_folder) == "gs://b/cache"
  assert compile_cache.folder("off", run_folder) is None
  jax.config.update("jax_compilation_cache_dir", None)
  try:
    assert compile_cache.folder("", run_folder) == run_folder
    with compile_cache.enabled("", run_folder):
      assert jax.config.jax_compilation_cache_dir == run_folder
    assert jax.config.jax_compilation_cache_dir is None
  finally:
    jax.config.update("jax_compilation_cache_dir", process_cache)
  with compile_cache.enabled("off", run_folder):
    assert not jax.config.jax_enable_compilation_cache
  assert (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache) == (
      process_cache, True)
