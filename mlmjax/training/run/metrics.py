"""Metric writers: JSONL + TensorBoard in the workdir, and a one-line progress log.

Only process 0 writes; the other processes get a writer that does nothing. In a bucket
workdir (objects cannot be appended to) metrics.jsonl is rewritten whole and the event file
uploaded at most every `REMOTE_FLUSH_S` seconds, and at the end.
"""

from __future__ import annotations

import json
import logging as std_logging
import math
import sys
import time

from absl import logging
import jax

from mlmjax import paths

# A bucket workdir's metrics are uploaded at most this often (and when the writer closes).
REMOTE_FLUSH_S = 30.0


def quiet_library_logs() -> None:
  """Keeps orbax's/grain's per-save INFO chatter out of the progress log (warnings still show)."""
  def keep(record) -> bool:
    noisy = any(f"/{lib}/" in record.pathname for lib in ("orbax", "grain", "jax"))
    return not (noisy and record.levelno < std_logging.WARNING)  # absl's WARNING is -1
  logging.get_absl_handler().python_handler.addFilter(keep)


def _summary_writer_class():
  """tensorboardX's SummaryWriter, imported without torch. Its writer module imports torch
  whenever it is installed (an `[hf]` or test environment) only to accept torch tensors, and we
  log Python floats: that import is 3-4 s of every run's start on a 2-core CPU. A torch already
  imported is left as it is."""
  hide = "torch" not in sys.modules and "tensorboardX" not in sys.modules
  if hide:
    sys.modules["torch"] = None  # `import torch` raises ImportError; tensorboardX carries on
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  finally:
    if hide:
      del sys.modules["torch"]
  return SummaryWriter


def _drop_rows_after(path: str, step: int) -> None:
  """Removes the rows of steps after `step` (logged by a run that then crashed before its next
  checkpoint: the resumed run logs those steps again). Atomic rewrite."""
  if not paths.exists(path):
    return
  with paths.open(path) as f:
    lines = f.readlines()
  keep = []
  for line in lines:
    try:
      if json.loads(line)["step"] <= step:
        keep.append(line)
    except (ValueError, KeyError, TypeError):
      pass  # a line cut short by the crash
  if len(keep) != len(lines):
    paths.write_atomic(path, "".join(keep))


def rows(path: str) -> list[dict]:
  """The rows of a metrics.jsonl file (none if it does not exist; a line cut short by a crash
  is skipped)."""
  if not paths.exists(path):
    return []
  out = []
  with paths.open(path) as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except ValueError:
        pass
  return out


class MetricWriter:
  """`metrics.jsonl` (one object per logged step, with a `step` key) + TensorBoard events.

  Resuming at `resume_step` first drops jsonl rows of later steps, so after any crash the file
  holds each step once. (TensorBoard shows the re-logged points over the old ones.)
  """

  def __init__(self, jsonl_path: str, tensorboard_dir: str, resume_step: int = 0):
    self.enabled = jax.process_index() == 0
    if not self.enabled:
      return
    SummaryWriter = _summary_writer_class()  # pylint: disable=invalid-name
    _drop_rows_after(jsonl_path, resume_step)
    self._remote = paths.is_remote(jsonl_path)
    if self._remote:  # the whole file, rewritten at each upload
      self._path, self._lines = jsonl_path, [json.dumps(r) + "\n" for r in rows(jsonl_path)]
      self._flushed = time.monotonic()
    else:
      self._jsonl = open(jsonl_path, "a", encoding="utf-8")
    # tensorboardX writes gs:// and s3:// event files itself (whole-file uploads at flush).
    self._tb = SummaryWriter(tensorboard_dir, flush_secs=int(REMOTE_FLUSH_S))

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self.enabled:
      return
    line = json.dumps({"step": int(step), **{k: float(v) for k, v in metrics.items()}}) + "\n"
    for name, value in metrics.items():
      self._tb.add_scalar(name, float(value), int(step))
    if not self._remote:
      self._jsonl.write(line)
      self._jsonl.flush()
      self._tb.flush()
      return
    self._lines.append(line)
    evaluated = any(k.startswith("eval/") for k in metrics)  # rare, and a resume looks for it
    if evaluated or time.monotonic() - self._flushed >= REMOTE_FLUSH_S:
      self._upload()

  def flush(self) -> None:
    """Makes what was written durable now (a bucket's upload; local files are flushed
    already): before a checkpoint, so a resumed run never misses rows the checkpoint covers."""
    if self.enabled and self._remote:
      self._upload()

  def _upload(self) -> None:
    paths.write_atomic(self._path, "".join(self._lines))
    self._tb.flush()
    self._flushed = time.monotonic()

  def close(self) -> None:
    if not self.enabled:
      return
    if self._remote:
      self._upload()
    else:
      self._jsonl.close()
    self._tb.close()


def _duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  seconds = int(seconds)
  h, rem = divmod(seconds, 3600)
  return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


class Throughput:
  """Tokens/s, MFU and ETA over the last logging interval (compilation excluded after warm-up).

  MFU is model FLOPs (models/flops.py) per second over `peak_flops`: the devices' rated peak
  where known, else the measured matmul peak (see train.py); without FLOPs (fine-tuning)
  there is no MFU."""

  def __init__(self, total_steps: int, peak_flops: float = 0.0):
    self.total_steps = total_steps
    self.peak_flops = peak_flops
    self.tokens_per_step = self.flops_per_token = 0.0
    self._t = time.perf_counter()
    self._step = None

  def set_shapes(self, tokens_per_step: int, flops_per_token: float = 0.0) -> None:
    """The current sequence-length phase's tokens per step and FLOPs per token."""
    self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token

  def update(self, step: int) -> dict[str, float]:
    now = time.perf_counter()
    out = {}
    if self._step is not None and step > self._step:
      sec_per_step = (now - self._t) / (step - self._step)
      tokens_per_sec = self.tokens_per_step / sec_per_step
      out = {"tokens_per_sec": tokens_per_sec,
             "eta_sec": sec_per_step * (self.total_steps - step)}
      if self.flops_per_token and self.peak_flops:
        out["mfu"] = tokens_per_sec * self.flops_per_token / self.peak_flops
    self._t, self._step = now, step
    return out


def device_memory(stats: list[dict | None]) -> dict[str, float]:
  """The most memory any of this process's devices has held so far, in GiB, from their
  runtime's `memory_stats()` (GPUs and TPUs report it, CPUs do not: then nothing): how near a
  run is to its limit, e.g. the `train.fit='auto'` choice beside what a device really held."""
  peaks = [s["peak_bytes_in_use"] for s in stats if s and "peak_bytes_in_use" in s]
  return {"memory_peak_gib": max(peaks) / 2**30} if peaks else {}


# Metrics that measure the machine, not the model: they differ between identical runs.
TIMINGS = ("tokens_per_sec", "mfu", "eta_sec", "input_wait_fraction", "memory_peak_gib",
           "goodput")
_TIMING_PREFIXES = ("badput/", "straggler/")  # goodput.py's and stragglers.py's keys


def is_timing(key: str) -> bool:
  """Whether metrics.jsonl's `key` measures the machine (TIMINGS), not the model."""
  return key in TIMINGS or key.startswith(_TIMING_PREFIXES)


def log_progress(step: int, total: int, m: dict[str, float]) -> None:
  accuracy = (f"clm_acc {m['clm_accuracy']:.4f}" if "clm_accuracy" in m  # a causal-LM phase
              else f"mlm_acc {m['mlm_accuracy']:.4f}")
  parts = [f"step {step}/{total}", f"loss {m['loss']:.4f}", accuracy,
           f"lr {m['learning_rate']:.2e}"]
  if "nsp_accuracy" in m:
    parts.insert(3, f"nsp_acc {m['nsp_accuracy']:.4f}")
  if "tokens_per_sec" in m:
    parts += [f"{m['tokens_per_sec']:,.0f} tok/s", f"MFU {100 * m['mfu']:.1f}%",
              f"ETA {_duration(m['eta_sec'])}"]
  if "input_wait_fraction" in m:  # of wall time, the loop waiting for its next batch
    parts.append(f"input wait {100 * m['input_wait_fraction']:.1f}%")
  if "memory_peak_gib" in m:
    parts.append(f"peak memory {m['memory_peak_gib']:.2f} GiB")
  logging.info(" | ".join(parts))
