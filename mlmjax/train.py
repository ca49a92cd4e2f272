"""train_and_evaluate(config, workdir): the whole training run, top to bottom.

    workdir + config -> data + tokenizer -> mesh + sharded state -> restore? -> step loop
    (train step, progress/metrics, eval, checkpoint) -> final eval + checkpoint.
"""

from __future__ import annotations

import os
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from mlmjax import adaptive as adaptive_lib
from mlmjax import checkpoint as checkpoint_lib
from mlmjax import errors
from mlmjax import losses
from mlmjax import metrics as metrics_lib
from mlmjax import phases as phases_lib
from mlmjax import sharding
from mlmjax import train_state
from mlmjax.data import formats
from mlmjax.data import masking
from mlmjax.data import masking_settings
from mlmjax.data import pipeline
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats

CONFIG_FILENAME = "config.json"


class ConfigError(errors.UserError):
  """An inconsistent configuration, with a message naming the keys to change."""


class NonFiniteError(errors.UserError):
  """Training produced a NaN/Inf loss or gradient and the policy says stop."""


def validate_config(config, mesh: jax.sharding.Mesh) -> None:
  """Checks what no single component can (the masking keys are checked by the Masker)."""
  t = config.train
  if config.model.position_embedding_type not in ("learned", "rope"):
    raise ConfigError(f"model.position_embedding_type={config.model.position_embedding_type!r}"
                      " must be 'learned' or 'rope'")
  if config.data.format not in formats.FORMATS:
    raise ConfigError(
        f"data.format={config.data.format!r} is not one of {', '.join(formats.FORMATS)}")
  fractions = [p[0] for p in config.train.phases]
  if config.train.phases and (min(fractions) <= 0 or abs(sum(fractions) - 1.0) > 1e-6 or any(
      len(p) != 3 for p in config.train.phases)):
    raise ConfigError(f"train.phases={config.train.phases} must be (fraction, seq_len,"
                      " max_predictions) triples with positive fractions summing to 1")
  for phase in phases_lib.plan(config):
    if phase.seq_len > config.model.max_position_embeddings:
      raise ConfigError(f"data.seq_len={phase.seq_len} exceeds"
                        f" model.max_position_embeddings={config.model.max_position_embeddings}")
    min_len = 5 if formats.has_pair_labels(config.data.format) else 3
    if phase.seq_len < min_len:
      raise ConfigError(f"data.seq_len={phase.seq_len} must be >= {min_len} for"
                        f" data.format={config.data.format!r}")
    # A full row of seq_len - 2 maskable tokens wants this many predictions.
    wanted = round(config.masking.mask_rate * (phase.seq_len - 2))
    if 0 < config.masking.mask_rate < 1 and phase.max_predictions < wanted:  # else Masker says
      raise ConfigError(
          f"masking.max_predictions_per_seq={phase.max_predictions} is too small for"
          f" masking.mask_rate={config.masking.mask_rate} at seq_len {phase.seq_len}: a full"
          f" row wants {wanted} predictions; set it to at least {wanted}")
  dp = sharding.data_parallel_size(mesh)
  if t.batch_size % dp or t.batch_size % jax.process_count():
    raise ConfigError(f"train.batch_size={t.batch_size} must be divisible by the data-parallel"
                      f" size {dp} and the process count {jax.process_count()}")
  sharding.micro_batch_size(t.batch_size, t.grad_accum_steps, mesh)  # raises if uneven
  if t.nonfinite_policy not in ("skip", "stop"):
    raise ConfigError(f"train.nonfinite_policy={t.nonfinite_policy!r} must be 'skip' or 'stop'")
  if t.steps < 1 or t.log_every_steps < 1 or t.eval_every_steps < 1 or (
      t.checkpoint_every_steps < 1):
    raise ConfigError("train.steps and the train.*_every_steps intervals must be >= 1")


def _check_writable(workdir: str) -> None:
  """Fails now, with the reason, rather than at the first checkpoint."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f".write_test.{os.getpid()}")
    with open(probe, "w", encoding="utf-8") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    raise errors.UserError(f"cannot write to --workdir={workdir}: {e.strerror}") from None


def _process_0_first(make):
  """Process 0 makes (and saves in the shared workdir) what the others then load: one
  tokenizer per run, not one per process."""
  if jax.process_index() == 0:
    out = make()
  multihost_utils.sync_global_devices("mlmjax_process_0_first")
  return out if jax.process_index() == 0 else make()


def _save_config(config, workdir: str) -> None:
  if jax.process_index() == 0:
    path = os.path.join(workdir, CONFIG_FILENAME)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))
    os.replace(path + ".tmp", path)  # atomic: a kill never leaves half a config


def evaluate(eval_step, params, config, tok, stats, gazetteer, eval_source,
             mesh) -> dict[str, float]:
  """Held-out metrics over `train.eval_batches` fixed batches (same masks every time: its own
  masker, so adaptive weights never move the eval set)."""
  totals: dict[str, np.ndarray] = {}
  masker = masking.Masker(config.masking, stats, gazetteer)
  for batch in pipeline.make_eval_iter(config, tok, eval_source, masker):
    sums = jax.device_get(eval_step(params, train_state.to_device(batch, mesh)))
    for k, v in sums.items():
      totals[k] = totals.get(k, 0) + np.asarray(v, np.float64)
  histogram = totals.pop("target_histogram")
  out = losses.summarize(totals)
  # Accuracy of always predicting the single most frequent held-out target: the bar to beat.
  out["constant_baseline_accuracy"] = float(histogram.max() / max(histogram.sum(), 1.0))
  return {f"eval/{k}": v for k, v in out.items()}


def _on_nonfinite(step: int, skips: dict[str, int], train_config) -> None:
  """The update of `step` was not applied (optax.apply_if_finite); stop or go on."""
  skips["total"] += 1
  skips["consecutive"] += 1
  if train_config.nonfinite_policy == "stop":
    raise NonFiniteError(
        f"step {step}: non-finite loss or gradients; the update was not applied and nothing"
        " after the last checkpoint was saved (lower train.learning_rate, or set"
        " train.nonfinite_policy='skip')")
  if skips["consecutive"] > train_config.max_consecutive_skips:
    raise NonFiniteError(
        f"step {step}: {skips['consecutive']} non-finite steps in a row (more than"
        f" train.max_consecutive_skips={train_config.max_consecutive_skips}); stopping")
  logging.warning("step %d: non-finite loss or gradients; update skipped (%d so far)", step,
                  skips["total"])


class _Input:
  """The current phase's training data: its config, masker and checkpointable iterator."""

  def __init__(self, config, phase: phases_lib.Phase, tok, stats, gazetteer, source):
    self.phase = phase
    self.config = phases_lib.phase_config(config, phase)
    self.masker = masking.Masker(self.config.masking, stats, gazetteer)
    self.iterator = pipeline.make_train_iter(self.config, tok, source, self.masker)


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict[str, float]:
  """Trains (resuming from `workdir` if it holds a checkpoint); returns the last eval metrics.

  `stop_after` ends this call early at that step, with a checkpoint, as an interruption would:
  the run continues exactly where it stopped on the next call (e.g. Colab sessions in chunks).
  """
  # ---- workdir, data, tokenizer -------------------------------------------------------------
  _check_writable(workdir)
  train_source, eval_source = sources.load_splits(
      config.data.source, config.data.eval_every_nth_document, config.data.max_document_chars)
  logging.info("Data %r: %d training / %d held-out documents", config.data.source,
               len(train_source), len(eval_source))
  def tokenizer_and_stats():
    tok = tokenizer_lib.get_tokenizer(config.tokenizer, train_source.documents, workdir)
    return tok, vocab_stats.get_vocab_stats(tok, train_source.documents, workdir,
                                            config.masking.stats_max_documents)
  tok, stats = _process_0_first(tokenizer_and_stats)
  gazetteer = (masking_settings.load_gazetteer(config.masking.entity_gazetteer, tok)
               if config.masking.entity_gazetteer else None)

  # ---- mesh, phases, input: everything a bad config can break, before anything is saved ----
  mesh = sharding.make_mesh(config.mesh)
  validate_config(config, mesh)
  ckpt = checkpoint_lib.Checkpointer(workdir, config.train.max_checkpoints_to_keep)
  phases = phases_lib.plan(config)
  adaptive = adaptive_lib.TokenLossTable.for_config(config.masking, tok.vocab_size)

  def new_input(phase: phases_lib.Phase) -> _Input:
    made = _Input(config, phase, tok, stats, gazetteer, train_source)
    if adaptive is not None:
      made.masker.set_token_weights(adaptive.weights())
    return made

  # The iterator in a checkpoint is that of the phase which trained its last step.
  data = new_input(phases_lib.phase_at(phases, max((ckpt.latest_step() or 0) - 1, 0)))

  # ---- model, optimizer: the state is created directly sharded ------------------------------
  setup = train_state.make_setup(config, tok.vocab_size, mesh)
  train_step = train_state.make_train_step(setup, config, per_token_loss=adaptive is not None)
  eval_step = train_state.make_eval_step(setup)
  num_params = sum(int(np.prod(x.shape)) for x in
                   jax.tree.leaves(setup.abstract_state["params"]))
  logging.info("Model: %s parameters; mesh %s on %d devices", f"{num_params:,}",
               dict(mesh.shape), mesh.size)

  # ---- checkpoint: resume the state and the data iterator together --------------------------
  def input_for(step: int):
    """The iterator in a checkpoint is that of the phase which trained its last step."""
    nonlocal data
    phase = phases_lib.phase_at(phases, step - 1)
    if phase != data.phase:
      data = new_input(phase)
    return data.iterator

  restored = ckpt.restore_latest(setup.abstract_state, input_for,
                                 None if adaptive is None else adaptive.state())
  # Host side of the loop: metric sums of the current logging interval, skip counters.
  interval: dict[str, float] = {}
  skips = {"total": 0, "consecutive": 0}
  if restored is None:
    start, state = 0, setup.init_fn()
    data = new_input(phases[0])  # an untouched iterator
    logging.info("Starting from scratch in %s", workdir)
  else:
    start, state, table, loop, _ = restored
    interval.update(loop.get("interval", {}))
    skips.update(loop.get("skips", {}))
    if adaptive is not None:
      adaptive.load(table)
      data.masker.set_token_weights(adaptive.weights())
    logging.info("Resumed from checkpoint at step %d in %s", start, ckpt.directory)
  _save_config(config, workdir)  # only now: a config that cannot resume changes nothing

  # ---- loop ---------------------------------------------------------------------------------
  total = config.train.steps
  writer = metrics_lib.MetricWriter(workdir, resume_step=start)
  throughput = metrics_lib.Throughput(config.train.batch_size * data.phase.seq_len, total)
  eval_metrics: dict[str, float] = {}
  pending = None  # (step number, metrics) of the step still in flight

  def finish(step_done: int, device_metrics) -> None:
    """Host side of one finished step: accumulate, and log every `log_every_steps`."""
    m = jax.device_get(device_metrics)  # note: a host-device sync point (on the previous step)
    if step_done == start + 1:
      throughput.update(step_done)  # start timing after the first step: excludes compilation
    if m["nonfinite"]:  # nothing of a skipped step counts
      _on_nonfinite(step_done, skips, config.train)
    else:
      skips["consecutive"] = 0
      if adaptive is not None:
        adaptive.add(m["token_loss_sum"], m["token_count"])
      for k in losses.SUM_KEYS:
        if k in m:
          interval[k] = interval.get(k, 0.0) + float(m[k])
    if (step_done % config.train.log_every_steps == 0 or step_done == total) and interval:
      row = {**losses.summarize(interval), "learning_rate": float(m["learning_rate"]),
             "grad_norm": float(m["grad_norm"]), "skipped_steps": skips["total"],
             **throughput.update(step_done)}
      metrics_lib.log_progress(step_done, total, row)
      writer.write(step_done, row)
      interval.clear()

  if start >= total:
    logging.info("Checkpoint step %d >= train.steps=%d: nothing to train", start, total)
  t0 = time.perf_counter()
  last = total if stop_after is None else min(total, stop_after)
  try:
    for step in range(start, last):
      if step >= data.phase.end:  # next sequence-length phase: new shapes, same state
        data = new_input(phases[data.phase.index + 1])
        throughput.tokens_per_step = config.train.batch_size * data.phase.seq_len
        logging.info("Phase %d from step %d: seq_len %d, max_predictions %d", data.phase.index,
                     step, data.phase.seq_len, data.phase.max_predictions)
      batch = train_state.to_device(next(data.iterator), mesh)
      state, step_metrics = train_step(state, batch)
      # At most two steps in flight: block on the previous one (needed by the CPU backend with
      # many devices, and free elsewhere since the device is still busy with this step).
      if pending is not None:
        finish(*pending)
      pending = (step + 1, step_metrics)
      done = step + 1
      # Every step: after a SIGTERM, all processes agree on a step to save at, then stop.
      preempted = ckpt.reached_preemption(done)
      boundary = {
          "checkpoint": done % config.train.checkpoint_every_steps == 0 or done == last
                        or preempted,
          "eval": (done % config.train.eval_every_steps == 0 or done == total) and not preempted,
          "adaptive": adaptive is not None and adaptive.due(done),
      }
      if any(boundary.values()):  # host-side state below must include step `done`
        finish(*pending)
        pending = None
      if boundary["adaptive"]:
        adaptive.refresh()
        data.masker.set_token_weights(adaptive.weights())
      if boundary["checkpoint"]:
        ckpt.save(done, state, data.iterator,
                  loop={"interval": dict(interval), "skips": dict(skips)},
                  token_losses=None if adaptive is None else adaptive.state())
      if boundary["eval"]:
        eval_metrics = evaluate(eval_step, state["params"], data.config, tok, stats, gazetteer,
                                eval_source, mesh)
        logging.info("eval at step %d: %s", done,
                     ", ".join(f"{k.split('/')[1]} {v:.4f}" for k, v in eval_metrics.items()))
        writer.write(done, eval_metrics)
        throughput.update(done)  # keep eval time out of the next tokens/s
      if preempted:
        last = done
        logging.warning("Preemption notice (SIGTERM): saved the checkpoint of step %d; run the"
                        " same command again to continue from there", done)
        break
    if pending is not None:
      finish(*pending)
  finally:  # also on errors: let a pending async save finish rather than lose it
    ckpt.close()
    writer.close()
  if last > start:
    logging.info("Trained steps %d..%d in %.1f s; workdir %s", start, last,
                 time.perf_counter() - t0, workdir)
  return eval_metrics
