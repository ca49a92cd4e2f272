"""finetune(...): one fine-tuning run, top to bottom.

    pretrained run (config, tokenizer, checkpoint) + task examples -> the task kind's rows
    (kind.py) -> mesh + sharded state of the encoder and the kind's head (encoder from the
    checkpoint, or random) -> restore? -> loop: train step, [dev scores after every epoch],
    [checkpoint] -> results.json, curves.png

It runs on pretraining's machinery: the mesh and the pretrained run's sharding rules
(parallel/sharding.py), the sharded state and optimizer (training/core/train_state.py,
optimizer.py), the train step (training/core/steps.py) and the step loop (training/run/loop.py: the
same preemption path and non-finite policy), orbax checkpoints, the workdir lock and the
metric writers, in its own output folder (a Workdir).
The batch of step i is a pure function of (seed, i): a grain MapDataset of example indices,
shuffled anew every epoch. So a checkpoint's data position is the number of batches consumed,
and a run stopped anywhere (preemption included) resumes exactly.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from absl import logging
import grain
import jax
import numpy as np
from flax import nnx

from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax import errors
from mlmjax.finetuning.settings import FinetuneSettings
from mlmjax.finetuning import tasks
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training.core import optimizer
from mlmjax.training.core import steps
from mlmjax.training.core import train_state
from mlmjax.training import finished_run
from mlmjax.training.run import checkpoint as checkpoint_lib
from mlmjax.training.run import compile_cache
from mlmjax.training.run import learning_curves
from mlmjax.training.run import loop
from mlmjax.training.run import metrics as metrics_lib
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training.run import workdir_lock

def finetune(config, pretrained: str, data: tasks.TaskData, output: str,
             random_init: bool = False, pretrained_step: int | None = None) -> dict:
  """Fine-tunes the encoder of the run in `pretrained` (checkpoint `pretrained_step`, default
  the latest; `random_init`: the same model from random initialisation instead) on `data`, in
  `output` (resuming a run there); returns the results also written to output/results.json."""
  settings = FinetuneSettings.from_config(config)
  pre = workdir_lib.Workdir(pretrained)
  pre_run = pre.load_run()
  settings.check_against(pre_run.settings.model, data.task.kind)  # before anything is written
  out = workdir_lib.Workdir(output)
  out.make_writable()
  with workdir_lock.WorkdirLock(out.lock, output), compile_cache.enabled(
      settings.train.compilation_cache, out.compile_cache):
    return _FineTuner(settings, pre, pre_run, data, out, random_init, pretrained_step).run()


def model_setup(settings: FinetuneSettings, pre: assembly.Assembly, kind, vocab_size: int, mesh,
                total_steps: int) -> train_state.MeshSetup:
  """The fine-tuning model of `kind` (kind.py) on the encoder of the pretrained run `pre`,
  sharded on `mesh` by the pretrained run's rules, with its optimizer over `total_steps`."""
  # The pretrained model with fine-tuning's dropout (and seed), heads included, so that its
  # checkpoint loads as it is; the kind's head on top.
  encoder = pre.with_settings(pre.settings.replace(
      seed=settings.seed, model={"dropout_rate": settings.model.dropout_rate,
                                 "attention_dropout_rate": settings.model.attention_dropout_rate}))
  rules, scan_layers = pre.settings.mesh.rules, pre.settings.model.scan_layers
  return train_state.sharded_setup(
      lambda: kind.model(encoder.model(vocab_size, mesh), encoder.settings.model, settings.model,
                         nnx.Rngs(params=settings.seed + 1)),
      optimizer.make_optimizer(settings.optimizer, total_steps), mesh, rules, scan_layers)


class _BatchPosition:
  """The data position a checkpoint stores: batches consumed (batch i is fixed by the seed)."""

  def __init__(self, batches: int = 0):
    self.batches = batches

  def global_state(self) -> dict:
    return {"batches": self.batches}

  def set_state(self, state: dict) -> None:
    self.batches = int(state["batches"])


class _FineTuner(loop.StepLoop):
  """One fine-tuning run; `run()` is the story, the other methods its parts and the loop's
  hooks."""

  def __init__(self, settings: FinetuneSettings, pre: workdir_lib.Workdir,
               pre_run: assembly.Assembly, data: tasks.TaskData, out: workdir_lib.Workdir,
               random_init: bool, pretrained_step: int | None):
    self.config, self.pre, self.data, self.out = settings, pre, data, out
    config = settings
    self.kind = data.kind(settings)
    self.run_record = {"task": data.task.name, "init": "random" if random_init else "pretrained",
                       "pretrained_workdir": pre.path, "pretrained_step": pretrained_step,
                       **self.kind.record()}
    self._check_same_run()
    tok = tokenizer_lib.load(pre.saved_tokenizer())
    self._encode_examples(tok)
    batch_size = config.train.batch_size
    self.total = max(1, math.ceil(config.train.epochs * self.num_train / batch_size))
    # Example indices, a new order every epoch; batches run on across epoch ends.
    self.batches = grain.MapDataset.range(self.num_train).shuffle(seed=config.seed).repeat(
        None).batch(batch_size, drop_remainder=True)
    self.mesh = sharding.make_mesh(config.mesh)
    self._make_steps(pre_run, tok.vocab_size)
    self.nonfinite = loop.NonFinitePolicy(config.train.nonfinite_policy,
                                          config.train.max_consecutive_skips)
    self.checkpoint_every = config.train.checkpoint_every_steps
    self.ckpt = checkpoint_lib.Checkpointer(out.checkpoints, out.corrupt_checkpoints,
                                            config.train.max_checkpoints_to_keep)
    logging.info("Fine-tuning on %s (%s): %d training rows / %d dev examples, %d steps (%g"
                 " epochs of batch %d); mesh %s; compilation cache: %s", data.task.name,
                 self.kind.name, self.num_train, len(data.dev), self.total, config.train.epochs,
                 batch_size, dict(self.mesh.shape), compile_cache.describe())

  def _encode_examples(self, tok) -> None:
    """The training examples (at most data.max_train_examples, drawn with the seed) and the
    dev set, as the kind's fixed-length rows (a QA example can be several)."""
    train, limit = self.data.train, self.config.data.max_train_examples
    if limit and len(train) > limit:
      rng = np.random.default_rng(self.config.seed)
      train = train.take(np.sort(rng.choice(len(train), limit, replace=False)))
    self.train_examples = len(train)
    seq_len = self.config.data.seq_len
    self.train_rows = self.kind.encode(train, tok, seq_len, "train").rows
    self.num_train = len(self.train_rows["input_ids"])
    self.dev_encoded = self.kind.encode(self.data.dev, tok, seq_len, "dev")

  def _make_steps(self, pre: assembly.Assembly, vocab_size: int) -> None:
    """The sharded state of the encoder and the kind's head, and its train and eval steps."""
    self.setup = model_setup(self.config, pre, self.kind, vocab_size, self.mesh, self.total)
    schedule = optimizer.learning_rate_schedule(self.config.optimizer, self.total)
    self.train_step = steps.make_train_step(self.setup, self.kind.objective(), schedule,
                                            self.total, self.config.seed)
    self.eval_step = steps.make_eval_step(self.setup, lambda outputs, batch: outputs)

  def _check_same_run(self) -> None:
    """An output folder holds one fine-tuning run: another task, init or pretrained run there
    would silently resume the wrong checkpoint."""
    if not self.out.has_config():
      return  # a new run
    saved = self.out.saved_record()
    if "run" not in saved:
      raise errors.UserError(f"{self.out.path} holds a pretraining run: give another"
                             " --output_dir")
    saved = saved["run"]
    # The kind and labels too where the run recorded them (runs saved before mlmjax had task
    # kinds did not): another --kind, or other classes, would not fit the checkpoint.
    same = ("task", "init", "pretrained_workdir") + tuple(
        k for k in ("kind", "label_names") if k in saved)
    if any(saved.get(k) != self.run_record.get(k) for k in same):
      raise errors.UserError(
          f"{self.out.path} holds a fine-tuning run of {saved.get('task')} ({saved.get('init')}"
          f" init from {saved.get('pretrained_workdir')}): give another --output_dir")
    self.run_record["pretrained_step"] = saved.get("pretrained_step")

  # ---- state ---------------------------------------------------------------------------------
  def _initial_state(self) -> tuple[int, train_state.State]:
    restored = self.ckpt.restore_latest(self.setup.abstract_state, lambda _: _BatchPosition())
    if restored is not None:
      self.nonfinite.load(restored.host.get("nonfinite", {"skipped": 0, "consecutive": 0}))
      logging.info("Resumed fine-tuning from checkpoint at step %d in %s", restored.step,
                   self.ckpt.directory)
      return restored.step, restored.state
    state = self.setup.init_fn()
    if self.run_record["init"] == "random":
      logging.info("Encoder initialised at random (seed %d), as a baseline", self.config.seed)
      return 0, state
    run = finished_run.load(self.pre.path, self.run_record["pretrained_step"], self.mesh)
    state["params"]["encoder"] = jax.device_put(
        run.state["params"], self.setup.state_shardings["params"]["encoder"])
    self.run_record["pretrained_step"] = run.step
    logging.info("Encoder from checkpoint step %d of %s", run.step, self.pre.path)
    return 0, state

  # ---- data ----------------------------------------------------------------------------------
  @staticmethod
  def _local(rows: dict[str, np.ndarray], indices: np.ndarray) -> dict[str, np.ndarray]:
    """This process's share of a global batch (its contiguous block of rows)."""
    per_process = len(indices) // jax.process_count()
    mine = indices[jax.process_index() * per_process:(jax.process_index() + 1) * per_process]
    return {k: v[mine] for k, v in rows.items()}

  def _epoch(self, step: int) -> float:
    return step * self.config.train.batch_size / self.num_train

  def _epoch_ends(self, step: int) -> bool:
    return int(self._epoch(step)) > int(self._epoch(step - 1)) or step == self.total

  # ---- dev set -------------------------------------------------------------------------------
  def _dev_metrics(self, params, interrupted: Callable[[], bool] = lambda: False
                   ) -> dict[str, float] | None:
    """Loss and the task's metrics over the whole dev set; None if `interrupted()`, asked
    before each batch, said to stop."""
    rows = self.dev_encoded.rows
    n, batch_size = len(self.dev_encoded), self.config.train.batch_size
    outputs = []
    for first in range(0, n, batch_size):
      if interrupted():
        return None
      indices = np.arange(first, first + batch_size)
      local = self._local(rows, np.minimum(indices, n - 1))
      outputs.append(np.asarray(jax.device_get(
          self.eval_step(params, sharding.to_device(local, self.mesh)))))
    outputs = np.concatenate(outputs)[:n]  # the padding rows (repeats of the last) dropped
    return self.kind.score(outputs, self.dev_encoded, self.data.dev)

  # ---- the loop's hooks (training/loop.StepLoop) --------------------------------------------
  def next_batch(self, step: int) -> dict:
    indices = np.asarray(self.batches[step])
    return sharding.to_device(self._local(self.train_rows, indices), self.mesh)

  def record_step(self, step: int, device_metrics) -> None:
    m = jax.device_get(device_metrics)  # note: a host-device sync point
    if not self.nonfinite.applied(step, m["nonfinite"]):
      return
    for k in ("loss_sum", "correct", "count"):
      self.interval[k] = self.interval.get(k, 0.0) + float(m.get(k, 0.0))
    if step % self.config.train.log_every_steps == 0 or step == self.total:
      counted = max(self.interval["count"], 1.0)  # a tagging batch may label no token
      row = {"loss": self.interval["loss_sum"] / counted,
             "learning_rate": float(m["learning_rate"]), "epoch": self._epoch(step),
             **self.throughput.update(step)}
      if self.kind.train_accuracy:
        row["accuracy"] = self.interval["correct"] / counted
      self.interval.clear()
      parts = [f"step {step}/{self.total}", f"loss {row['loss']:.4f}",
               f"lr {row['learning_rate']:.2e}"]
      parts += [f"acc {row['accuracy']:.4f}"] if "accuracy" in row else []
      parts += [f"{row['tokens_per_sec']:,.0f} tok/s"] if "tokens_per_sec" in row else []
      logging.info(" | ".join(parts))
      self.writer.write(step, row)

  def eval_due(self, step: int) -> bool:
    return self._epoch_ends(step)

  def evaluate(self, step: int, state, interrupted: Callable[[], bool] = lambda: False) -> bool:
    dev = self._dev_metrics(state["params"], interrupted)
    if dev is None:
      return False
    self.dev = dev
    logging.info("dev after epoch %.2f (step %d): %s", self._epoch(step), step,
                 ", ".join(f"{k} {v:.4f}" for k, v in self.dev.items()))
    self.writer.write(step, {f"eval/{k}": v for k, v in self.dev.items()})
    self.throughput.update(step)  # keep dev time out of the next tokens/s
    return True

  def save(self, step: int, state) -> None:
    self.ckpt.save(step, state, _BatchPosition(step), host={"nonfinite": self.nonfinite.state()})

  # ---- the run -------------------------------------------------------------------------------
  def run(self) -> dict:
    start, state = self._initial_state()
    self.out.save_config(self.config.to_config_dict(run=self.run_record))
    self.writer = metrics_lib.MetricWriter(self.out.metrics, self.out.tensorboard,
                                           resume_step=start)
    self.throughput = metrics_lib.Throughput(self.total)
    # Tokens a step: a multiple-choice example is K rows, an embedding pair 2.
    self.throughput.set_shapes(self.config.train.batch_size *
                               self.train_rows["input_ids"][0].size)
    self.interval: dict[str, float] = {}
    self.dev = None
    t0 = time.perf_counter()
    try:
      state, done, preempted = self.run_steps(self.train_step, state, start, self.total)
    finally:
      self.ckpt.close()
      self.writer.close()
    if preempted:
      return {"preempted_at_step": done}
    if self.dev is None:  # the run had already finished: score its last checkpoint
      self.dev = self._dev_metrics(state["params"])
    logging.info("Fine-tuned steps %d..%d in %.1f s; output %s", start, self.total,
                 time.perf_counter() - t0, self.out.path)
    return self._results(self.dev)

  def _results(self, dev: dict[str, float]) -> dict:
    history = [{"step": r["step"], **{k[5:]: v for k, v in r.items() if k.startswith("eval/")}}
               for r in metrics_lib.rows(self.out.metrics) if any(k.startswith("eval/") for k in r)]
    results = {
        **self.run_record, "output_dir": self.out.path, "train_examples": self.train_examples,
        "train_rows": self.num_train, "dev_examples": len(self.data.dev),
        "epochs": self.config.train.epochs,
        "steps": self.total, "seq_len": self.config.data.seq_len,
        "headline_metric": self.kind.headline, "dev": dev,
        **{f"dev_{k}": v for k, v in self.kind.baseline(self.data.train, self.data.dev).items()},
        "dev_history": history}
    if jax.process_index() == 0:
      self.out.save_json(self.out.results, results)
      learning_curves.save_curves([self.out.path], self.out.curves)
    return results
