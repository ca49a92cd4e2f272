"""train_and_evaluate(config, workdir): the whole training run, top to bottom.

    workdir + config -> data + tokenizer -> mesh + sharded state -> restore? -> step loop
    (train step, progress/metrics, eval, checkpoint) -> final eval + checkpoint.
"""

from __future__ import annotations

import json
import os
import time

from absl import logging
import jax
import numpy as np

from mlmjax import checkpoint as checkpoint_lib
from mlmjax import errors
from mlmjax import losses
from mlmjax import metrics as metrics_lib
from mlmjax import sharding
from mlmjax import train_state
from mlmjax.data import pipeline
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib

CONFIG_FILENAME = "config.json"


class ConfigError(errors.UserError):
  """An inconsistent configuration, with a message naming the keys to change."""


def validate_config(config, mesh: jax.sharding.Mesh) -> None:
  m, t = config.masking, config.train
  if not 0.0 < m.mask_rate < 1.0:
    raise ConfigError(f"masking.mask_rate={m.mask_rate} must be strictly between 0 and 1")
  if m.mask_token_prob < 0 or m.random_token_prob < 0 or (
      m.mask_token_prob + m.random_token_prob > 1.0):
    raise ConfigError("masking.mask_token_prob and masking.random_token_prob must be >= 0 and"
                      f" sum to <= 1, got {m.mask_token_prob} + {m.random_token_prob}")
  if config.data.seq_len > config.model.max_position_embeddings:
    raise ConfigError(f"data.seq_len={config.data.seq_len} exceeds"
                      f" model.max_position_embeddings={config.model.max_position_embeddings}")
  if config.data.seq_len < 3:
    raise ConfigError(f"data.seq_len={config.data.seq_len} must be >= 3 ([CLS] token [SEP])")
  dp = sharding.data_parallel_size(mesh)
  if t.batch_size % dp or t.batch_size % jax.process_count():
    raise ConfigError(f"train.batch_size={t.batch_size} must be divisible by the data-parallel"
                      f" size {dp} and the process count {jax.process_count()}")
  if t.steps < 1 or t.log_every_steps < 1 or t.eval_every_steps < 1 or (
      t.checkpoint_every_steps < 1):
    raise ConfigError("train.steps and the train.*_every_steps intervals must be >= 1")


def _save_config(config, workdir: str) -> None:
  if jax.process_index() == 0:
    with open(os.path.join(workdir, CONFIG_FILENAME), "w", encoding="utf-8") as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))


def evaluate(eval_step, params, config, tok, eval_source, mesh) -> dict[str, float]:
  """Held-out metrics over `train.eval_batches` fixed batches (same masks every time)."""
  totals: dict[str, np.ndarray] = {}
  for batch in pipeline.make_eval_iter(config, tok, eval_source):
    sums = jax.device_get(eval_step(params, train_state.to_device(batch, mesh)))
    for k, v in sums.items():
      totals[k] = totals.get(k, 0) + np.asarray(v, np.float64)
  histogram = totals.pop("target_histogram")
  out = losses.summarize(totals)
  # Accuracy of always predicting the single most frequent held-out target: the bar to beat.
  out["constant_baseline_accuracy"] = float(histogram.max() / max(histogram.sum(), 1.0))
  return {f"eval/{k}": v for k, v in out.items()}


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict[str, float]:
  """Trains (resuming from `workdir` if it holds a checkpoint); returns the last eval metrics.

  `stop_after` ends this call early at that step, with a checkpoint, as an interruption would:
  the run continues exactly where it stopped on the next call (e.g. Colab sessions in chunks).
  """
  # ---- workdir, data, tokenizer -------------------------------------------------------------
  os.makedirs(workdir, exist_ok=True)
  train_source, eval_source = sources.load_splits(config.data.source,
                                                  config.data.eval_every_nth_document)
  logging.info("Data %r: %d training / %d held-out documents", config.data.source,
               len(train_source), len(eval_source))
  tok = tokenizer_lib.get_tokenizer(config.tokenizer, train_source.documents, workdir)

  # ---- mesh, model, optimizer: the state is created directly sharded ------------------------
  mesh = sharding.make_mesh(config.mesh)
  validate_config(config, mesh)
  _save_config(config, workdir)
  setup = train_state.make_setup(config, tok.vocab_size, mesh)
  train_step = train_state.make_train_step(setup, config)
  eval_step = train_state.make_eval_step(setup)
  num_params = sum(int(np.prod(x.shape)) for x in
                   jax.tree.leaves(setup.abstract_state["params"]))
  logging.info("Model: %s parameters; mesh %s on %d devices", f"{num_params:,}",
               dict(mesh.shape), mesh.size)

  # ---- checkpoint: resume the state and the data iterator together --------------------------
  ckpt = checkpoint_lib.Checkpointer(workdir, config.train.max_checkpoints_to_keep)
  train_iter = pipeline.make_train_iter(config, tok, train_source)
  start = ckpt.latest_step()
  if start is None:
    state, start = setup.init_fn(), 0
    logging.info("Starting from scratch in %s", workdir)
  else:
    state = ckpt.restore(start, setup.abstract_state, train_iter)
    logging.info("Resumed from checkpoint at step %d in %s", start, ckpt.directory)

  # ---- loop ---------------------------------------------------------------------------------
  total = config.train.steps
  writer = metrics_lib.MetricWriter(workdir)
  tokens_per_step = config.train.batch_size * config.data.seq_len
  throughput = metrics_lib.Throughput(tokens_per_step, total)
  interval: dict[str, float] = {}
  eval_metrics: dict[str, float] = {}
  pending = None  # (step number, metrics) of the step still in flight

  def finish(step_done: int, device_metrics) -> None:
    """Host side of one finished step: accumulate, and log every `log_every_steps`."""
    m = jax.device_get(device_metrics)  # note: a host-device sync point (on the previous step)
    if step_done == start + 1:
      throughput.update(step_done)  # start timing after the first step: excludes compilation
    for k in ("mlm_loss_sum", "mlm_correct", "mlm_count"):
      interval[k] = interval.get(k, 0.0) + float(m[k])
    if step_done % config.train.log_every_steps == 0 or step_done == total:
      row = {**losses.summarize(interval), "learning_rate": float(m["learning_rate"]),
             "grad_norm": float(m["grad_norm"]), **throughput.update(step_done)}
      metrics_lib.log_progress(step_done, total, row)
      writer.write(step_done, row)
      interval.clear()

  if start >= total:
    logging.info("Checkpoint step %d >= train.steps=%d: nothing to train", start, total)
  t0 = time.perf_counter()
  last = total if stop_after is None else min(total, stop_after)
  try:
    for step in range(start, last):
      batch = train_state.to_device(next(train_iter), mesh)
      state, step_metrics = train_step(state, batch)
      # At most two steps in flight: block on the previous one (needed by the CPU backend with
      # many devices, and free elsewhere since the device is still busy with this step).
      if pending is not None:
        finish(*pending)
      pending = (step + 1, step_metrics)
      done = step + 1
      if done % config.train.checkpoint_every_steps == 0 or done == last:
        ckpt.save(done, state, train_iter)
      if done % config.train.eval_every_steps == 0 or done == total:
        finish(*pending)
        pending = None
        eval_metrics = evaluate(eval_step, state["params"], config, tok, eval_source, mesh)
        logging.info("eval at step %d: %s", done,
                     ", ".join(f"{k.split('/')[1]} {v:.4f}" for k, v in eval_metrics.items()))
        writer.write(done, eval_metrics)
        throughput.update(done)  # keep eval time out of the next tokens/s
    if pending is not None:
      finish(*pending)
  finally:  # also on errors: let a pending async save finish rather than lose it
    ckpt.close()
    writer.close()
  if last > start:
    logging.info("Trained steps %d..%d in %.1f s; workdir %s", start, last,
                 time.perf_counter() - t0, workdir)
  return eval_metrics
