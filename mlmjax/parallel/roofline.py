"""A compiled step's time, predicted from its optimized HLO and the chip's published rates
(models/chip_rates.py): a roofline per kernel, calibrated per class of kernel on the steps
measured on GPUs (docs/performance.md, "Predicted time").

A kernel is a fusion or a library call outside fused computations (as parallel/hlo.py counts
them), run once per iteration of the loops around it. It takes the longer of its compute time
(its matmul FLOPs at the chip's dense peak) and its memory time (the bytes it reads and writes
at the chip's HBM bandwidth), divided by its class's efficiency. A step runs its kernels one
after another. A collective moves its bytes over the chip's links and counts where it is
exposed: an asynchronous one (`-start` ... `-done`) runs beside the kernels the compiler
scheduled between its start and its done, so only what outlasts them is added; a synchronous
one is added whole.

A kernel's bytes are its results' and operands', but a slice where it slices an operand (a
scanned stack's layer) and the update where it updates in place (as XLA's cost analysis).

Classes (`CLASSES`):
  matmul       kernels holding a dot or a convolution (cuBLAS, Triton GEMMs, TPU fusions)
  attention    the fused attention kernels (cuDNN, Pallas on Triton, Mosaic's splash): the HLO
               hides their FLOPs, so they get the model's attention FLOPs (models/flops.py), a
               third to the forward kernels and two thirds to the backward ones
  elementwise  every other kernel: LayerNorm, GELU, dropout bits, residuals, the optimizer
  copies       copies and transposes: layout
  collectives  the exposed time of the collectives
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from mlmjax.models import chip_rates
from mlmjax.parallel import hlo

CLASSES = ("matmul", "attention", "elementwise", "copies", "collectives")

# The fraction of its roofline time each class reaches: fitted on the two H100 steps whose
# profiles split their time by class (benchmarks/calibrate.py; docs/performance.md, "Predicted
# time", has every measured step's error with them). Copies count as elementwise work there
# (the profiles do not tell them apart); the collectives are not fitted: no measured step had
# any (one GPU each), so they are taken at the links' published rate.
EFFICIENCY = {"matmul": 0.784, "attention": 0.245, "elementwise": 0.568, "copies": 0.568,
              "collectives": 1.0}

# Instructions that run no kernel of their own (aliases, control, the wrappers of async work;
# TPU's ConcatBitcast custom call names adjacent buffers as one).
_NO_KERNEL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "call",
              "conditional", "after-all", "partition-id", "replica-id", "opt-barrier",
              "async-start", "async-update", "async-done", "add-dependency", "domain", "send",
              "send-done", "recv", "recv-done"}
_NO_WORK_CALLS = ("ConcatBitcast",)
_ATTENTION_CALLS = ("__cudnn$fmha", "__gpu$xla.gpu.triton", "tpu_custom_call")
# A fused attention kernel's direction, from its call target and jax's op name: cuDNN's
# `fmhaSoftmaxBackward`, Pallas' `mha_backward`, splash's `dq` and `dkv` kernels. The Pallas
# kernel's `preprocess_backward` (a row sum of dO x O) is elementwise work.
_BACKWARD = re.compile(r"backward|bwd|_dq|dkv", re.IGNORECASE)
_ATTENTION_AUX = re.compile(r"preprocess")
_MATMUL_CALLS = ("__cublas$gemm", "__cublas$lt$matmul")


@dataclasses.dataclass(frozen=True)
class _Instr:
  computation: str
  name: str
  shape: str
  op: str
  line: str

  @property
  def operands(self) -> list[str]:
    inner = self.line.split(f" {self.op}(", 1)[1]
    depth, end = 1, 0
    for end, ch in enumerate(inner):  # up to the parenthesis that closes the operand list
      depth += {"(": 1, ")": -1}.get(ch, 0)
      if depth == 0:
        break
    return re.findall(r"%([\w.\-]+)", inner[:end])

  def called(self, key: str) -> list[str]:
    m = re.search(rf"\b{key}=\{{?([^}},]+(?:,\s*%[\w.\-]+)*)\}}?", self.line)
    return re.findall(r"%?([\w.\-]+)", m.group(1)) if m else []


def _numel(shape: str) -> int:
  """Elements of the first array of an HLO shape (`bf16[8,128]{1,0}`, or a tuple's first)."""
  return math.prod(hlo.dims(shape))


@dataclasses.dataclass
class _Program:
  """The optimized HLO parsed once: instructions by computation, shapes by name."""
  text: str

  def __post_init__(self):
    self.by_computation: dict[str, list[_Instr]] = {}
    for row in hlo.instructions(self.text):
      self.by_computation.setdefault(row[0], []).append(_Instr(*row))
    self.entry = hlo.entry_computation(self.text)
    self.shape = {i.name: i.shape for rows in self.by_computation.values() for i in rows}
    self.fused = {c for rows in self.by_computation.values() for i in rows if i.op == "fusion"
                  for c in i.called("calls")}

  def runs(self) -> dict[str, float]:
    """{computation: how many times it runs per step} for the computations that run kernels:
    the entry, loop bodies (times their trip counts), called and async-wrapped computations."""
    times = {self.entry: 1.0}
    todo = [self.entry]
    while todo:
      computation = todo.pop()
      for i in self.by_computation.get(computation, ()):
        if i.op == "while":
          callees = [(c, self._trips(i)) for c in i.called("body")]
        elif i.op in ("call", "conditional", "async-start"):
          callees = [(c, 1) for key in ("to_apply", "calls", "branch_computations")
                     for c in i.called(key)]
        else:
          continue
        for callee, n in callees:
          if callee not in times:
            times[callee] = times[computation] * n
            todo.append(callee)
    return times

  def _trips(self, loop: _Instr) -> int:
    """A while loop's trip count: XLA's `known_trip_count`, else the largest constant its
    condition compares with."""
    m = re.search(r'known_trip_count"?\s*:\s*\{\s*"?n"?\s*:\s*"?(\d+)', loop.line)
    if m:
      return int(m.group(1))
    condition = loop.called("condition")
    constants = [int(c) for i in self.by_computation.get(condition[0] if condition else "", ())
                 if i.op == "constant" for c in re.findall(r"constant\((\d+)\)", i.line)]
    return max(constants, default=1)


@dataclasses.dataclass(frozen=True)
class Kernel:
  kind: str  # one of CLASSES but collectives
  flops: float
  bytes: float
  runs: float  # per step
  backward: bool = False  # a fused attention kernel of the backward pass


def _fused_bytes(program: _Program, fusion: _Instr) -> float:
  """Bytes a fusion reads and writes: each operand whole, but only the slices of an operand
  the fused computation only slices, and nothing of a buffer it updates in place; its result,
  but only the update of an in-place update."""
  body = program.by_computation.get(fusion.called("calls")[0], []) if fusion.called("calls") else []
  params = {int(re.search(r"parameter\((\d+)\)", i.line).group(1)): i.name
            for i in body if i.op == "parameter"}
  users: dict[str, list[_Instr]] = {}
  for i in body:
    for o in i.operands:
      users.setdefault(o, []).append(i)
  total = 0.0
  for k, operand in enumerate(fusion.operands):
    uses = users.get(params.get(k, ""), [])
    if uses and all(u.op in ("dynamic-slice", "slice") and u.operands[0] == params[k]
                    for u in uses):
      total += sum(hlo.shape_bytes(u.shape) for u in uses)
    elif uses and all(u.op == "dynamic-update-slice" and u.operands[0] == params[k]
                      for u in uses):
      continue  # the buffer updated in place: its update is counted as the result
    else:
      total += hlo.shape_bytes(program.shape.get(operand, ""))
  root = next((i for i in body if i.line.lstrip().startswith("ROOT")), None)
  if root is None:
    return total + hlo.shape_bytes(fusion.shape)
  named = {i.name: i for i in body}
  roots = [named[o] for o in root.operands if o in named] if root.op == "tuple" else [root]
  for r in roots:
    if r.op == "dynamic-update-slice":  # in place: only the update is written
      total += hlo.shape_bytes(program.shape.get(r.operands[1], ""))
    else:
      total += hlo.shape_bytes(r.shape)
  return total


def _dot_flops(program: _Program, instr: _Instr) -> float:
  """2 x result elements x contracted size, for a dot; a convolution's (TPU's matmuls):
  _conv_flops."""
  if instr.op == "convolution":
    return _conv_flops(program, instr)
  lhs = hlo.dims(program.shape.get(instr.operands[0], ""))
  m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", instr.line)
  contracted = math.prod(lhs[int(d)] for d in m.group(1).split(",") if d) if m else 1
  return 2.0 * _numel(instr.shape) * contracted


def _window(line: str, key: str, n: int, default: int) -> list[int]:
  m = re.search(rf"\b{key}=([\dx_]+)", line)
  if not m:
    return [default] * n
  if key == "pad":
    return [int(p.split("_")[0]) for p in m.group(1).split("x")]
  return [int(v) for v in m.group(1).split("x")]


def _conv_flops(program: _Program, instr: _Instr) -> float:
  """2 x the multiply-adds of a convolution, counting only window taps that land on an input
  element: XLA on TPU writes batched matmuls as convolutions whose base dilation leaves one
  real tap in a window of several (dim_labels=0b1f_0o1i->01bf, window={size=8x4
  lhs_dilate=8x4}), so taps x window sizes would overcount them."""
  labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", instr.line)
  lhs = hlo.dims(program.shape.get(instr.operands[0], ""))
  rhs = hlo.dims(program.shape.get(instr.operands[1], ""))
  out = hlo.dims(instr.shape)
  if not labels or not lhs or not rhs:
    return 0.0
  lhs_labels, rhs_labels, out_labels = labels.groups()
  spatial = sorted(c for c in lhs_labels if c.isdigit())
  n = len(spatial)
  sizes = _window(instr.line, "size", n, 1)
  strides, pads = _window(instr.line, "stride", n, 1), _window(instr.line, "pad", n, 0)
  lhs_dilate, rhs_dilate = (_window(instr.line, "lhs_dilate", n, 1),
                            _window(instr.line, "rhs_dilate", n, 1))
  taps = 1.0  # over all output positions of the spatial dims
  for k, label in enumerate(spatial):
    length = (lhs[lhs_labels.index(label)] - 1) * lhs_dilate[k] + 1
    o = np.arange(out[out_labels.index(label)])[:, None]
    w = np.arange(sizes[k])[None, :]
    at = o * strides[k] + w * rhs_dilate[k] - pads[k]
    taps *= int(np.count_nonzero((at >= 0) & (at < length) & (at % lhs_dilate[k] == 0)))
  per_position = math.prod(out[out_labels.index(c)] for c in out_labels if not c.isdigit())
  return 2.0 * per_position * rhs[rhs_labels.index("i")] * taps


def _gemm_flops(program: _Program, instr: _Instr) -> float:
  """A cuBLAS call's FLOPs, from its backend config's dot dimensions."""
  lhs = hlo.dims(program.shape.get(instr.operands[0], ""))
  m = re.search(r'"lhs_contracting_dimensions"\s*:\s*\[([^\]]*)\]', instr.line)
  dims = [int(d) for d in re.findall(r"\d+", m.group(1))] if m else []
  return 2.0 * _numel(instr.shape) * math.prod(lhs[d] for d in dims if d < len(lhs))


def _pass_bytes(program: _Program, instr: _Instr) -> float:
  """One read of each operand and one write of the result."""
  return hlo.shape_bytes(instr.shape) + sum(hlo.shape_bytes(program.shape.get(o, ""))
                                            for o in instr.operands)


def _kernel(program: _Program, instr: _Instr, runs: float) -> Kernel:
  if instr.op == "custom-call":
    target = re.search(r'custom_call_target="([^"]+)"', instr.line)
    target = target.group(1) if target else ""
    if target in _NO_WORK_CALLS:
      return Kernel("copies", 0.0, 0.0, runs)
    nbytes = _pass_bytes(program, instr)
    op_name = re.search(r'op_name="([^"]*)"', instr.line)
    named = target + (op_name.group(1) if op_name else "")
    if any(target.startswith(t) for t in _ATTENTION_CALLS) and not _ATTENTION_AUX.search(named):
      return Kernel("attention", 0.0, nbytes, runs, bool(_BACKWARD.search(named)))
    if any(target.startswith(t) for t in _MATMUL_CALLS):
      return Kernel("matmul", _gemm_flops(program, instr), nbytes, runs)
    return Kernel("elementwise", 0.0, nbytes, runs)
  if instr.op != "fusion":  # an unfused instruction: one pass over its operands and result
    nbytes = _pass_bytes(program, instr)
    kind = ("matmul" if instr.op in ("dot", "convolution") else
            "copies" if instr.op in ("copy", "transpose") else "elementwise")
    flops = _dot_flops(program, instr) if kind == "matmul" else 0.0
    return Kernel(kind, flops, nbytes, runs)
  body, todo, ops = [], list(instr.called("calls")), set()
  while todo:  # the fused computation and those fused into it
    for i in program.by_computation.get(todo.pop(), []):
      body.append(i)
      ops.add(i.op)
      if i.op == "fusion":
        todo += i.called("calls")
  flops = sum(_dot_flops(program, i) for i in body if i.op in ("dot", "convolution"))
  layout = {"parameter", "copy", "transpose", "bitcast", "reshape", "tuple",
            "get-tuple-element", "broadcast", "constant"}
  kind = "matmul" if flops else "copies" if ops <= layout else "elementwise"
  return Kernel(kind, flops, _fused_bytes(program, instr), runs)


def _group_size(line: str, devices: int) -> int:
  """The devices of each of a collective's groups (replica_groups), all of them if unsaid."""
  iota = re.search(r"replica_groups=\[(\d+),(\d+)\]", line)
  if iota:
    return int(iota.group(2))
  listed = re.search(r"replica_groups=\{\{([\d,]+)\}", line)
  if listed:
    return len(listed.group(1).split(","))
  pairs = re.search(r"source_target_pairs=", line)
  return 2 if pairs else devices


def _collective_bytes(kind: str, result_bytes: float, group: int) -> float:
  """Bytes one device sends for a collective with this result (ring algorithms)."""
  if group <= 1:
    return 0.0
  share = (group - 1) / group
  return {"all-reduce": 2 * share * result_bytes, "all-gather": share * result_bytes,
          "reduce-scatter": (group - 1) * result_bytes, "all-to-all": share * result_bytes
          }.get(kind, result_bytes)


@dataclasses.dataclass(frozen=True)
class Prediction:
  step_s: float
  by_class_s: dict[str, float]
  kernels: int  # kernel runs per step
  peak_flops: float  # the chip's, at the compute dtype

  def report(self, tokens: float, model_flops: float) -> dict:
    """The compile report's `predicted` entry: step time, tokens/s and MFU (per device
    figures: `tokens` and `model_flops` of one device's share of the step)."""
    return {"step_s": self.step_s, "tokens_per_s_per_device": tokens / self.step_s,
            "mfu": model_flops / (self.step_s * self.peak_flops),
            "by_class_s": self.by_class_s, "kernel_runs": self.kernels,
            "efficiency": dict(EFFICIENCY)}


def predict(text: str, device_kind: str, dtype, devices: int, attention_flops: float = 0.0,
            efficiency: dict[str, float] | None = None) -> Prediction:
  """The predicted time of one step of the optimized HLO `text` on a `device_kind` chip
  computing in `dtype`, the program running on `devices` devices; `attention_flops`: the
  model's attention FLOPs per device and step (forward and backward) for the fused attention
  kernels, whose FLOPs the HLO does not show."""
  efficiency = efficiency or EFFICIENCY
  rates, peak = chip_rates.get(device_kind, dtype)
  program = _Program(text)
  kernels = []
  by_class = dict.fromkeys(CLASSES, 0.0)
  for computation, times in program.runs().items():
    if computation in program.fused:
      continue
    beside = {}  # an async start -> the kernel time since it started
    for instr in program.by_computation.get(computation, ()):
      op = instr.op
      if op.endswith("-start") and op != "async-start":  # timed at its done (the result)
        beside[instr.name] = 0.0
        continue
      moved = _moved(program, instr, rates, devices)
      if moved is not None:  # a collective, or an asynchronous copy or slice
        kind, t = moved
        t /= efficiency[kind]
        if instr.operands and instr.operands[0] in beside:
          t = max(0.0, t - beside.pop(instr.operands[0]))
        by_class[kind] += t * times
        continue
      if op in _NO_KERNEL:
        continue
      kernels.append(_kernel(program, instr, times))
      t = _time(kernels[-1], rates, peak, efficiency)
      for start in beside:
        beside[start] += t
  _share_attention(kernels, attention_flops)
  for k in kernels:
    by_class[k.kind] += _time(k, rates, peak, efficiency) * k.runs
  return Prediction(sum(by_class.values()), by_class, round(sum(k.runs for k in kernels)), peak)


def _moved(program: _Program, instr: _Instr, rates: chip_rates.Rates,
           devices: int) -> tuple[str, float] | None:
  """('collectives', seconds) of a collective over the links, ('copies', seconds) of an
  asynchronous copy or slice's done (TPU's prefetches into on-chip memory: a read and a write
  of its result) at the roofline, or None for any other instruction."""
  op = instr.op
  base = op[:-len("-done")] if op.endswith("-done") else op
  called = instr.called("calls")
  if op == "fusion" and called and called[0].startswith("all-reduce-scatter"):
    base = "reduce-scatter"  # TPU's fused reduce-scatter (parallel/hlo.py)
  nbytes = hlo.shape_bytes(instr.shape)
  if base in hlo.KINDS:
    line = _start_line(program, instr) if op.endswith("-done") else instr.line
    return "collectives", (_collective_bytes(base, nbytes, _group_size(line, devices))
                           / rates.collective_bytes_per_s)
  if op.endswith("-done") and op != "async-done":
    return "copies", 2 * nbytes / rates.hbm_bytes_per_s
  return None


def _start_line(program: _Program, done: _Instr) -> str:
  start = next((i for i in program.by_computation.get(done.computation, ())
                if done.operands and i.name == done.operands[0]), None)
  return start.line if start else done.line


def _time(k: Kernel, rates: chip_rates.Rates, peak: float, efficiency: dict) -> float:
  return max(k.flops / peak, k.bytes / rates.hbm_bytes_per_s) / efficiency[k.kind]


def _share_attention(kernels: list[Kernel], attention_flops: float) -> None:
  """The model's attention FLOPs over the fused attention kernels' runs: a third to the
  forward kernels, two thirds to the backward ones (all to the forward if there are none)."""
  attention = [(i, k) for i, k in enumerate(kernels) if k.kind == "attention"]
  backward = [(i, k) for i, k in attention if k.backward]
  forward = [(i, k) for i, k in attention if not k.backward]
  shares = ((forward, attention_flops / 3 if backward else attention_flops),
            (backward, attention_flops * 2 / 3))
  for group, total in shares:
    runs = sum(k.runs for _, k in group)
    for i, k in group:
      kernels[i] = dataclasses.replace(k, flops=total / runs)
