"""What an optimized HLO program (compiled.as_text()) contains: its collectives with their
bytes, and which attention kernel runs. Read from the text because the compiled object has no
API for either.

Collectives are counted once each: an async pair (`all-gather-start` / `all-gather-done`) by
its `-done` (whose shape is the result), a synchronous one by itself. On TPU, XLA turns a
reduce-scatter into a fusion calling a computation named `all-reduce-scatter.N` (inside it, an
all-reduce): such a fusion counts as one reduce-scatter (its result: the device's shard), the
all-reduce inside it not at all.
"""

from __future__ import annotations

import re

import numpy as np

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
         "collective-broadcast", "ragged-all-to-all")
_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
          "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8,
          "s64": 8, "u64": 8, "c64": 8, "c128": 16}
# `name = shape opcode(`; a tuple shape has spaces, layouts may hold `T(8,128)` (after a colon).
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+(.*?)\s+([a-z][\w\-]*)\(")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s+.*\{\s*$")
_ARRAY = re.compile(r"\b([a-z]\w*)\[([\d,]*)\]")


def shape_bytes(shape: str) -> int:
  """Bytes of an HLO shape string (`bf16[8,128]{1,0}` or a tuple of them)."""
  return int(sum(_BYTES.get(dt, 0) * np.prod([int(d) for d in dims.split(",") if d])
                 for dt, dims in _ARRAY.findall(shape)))


def _instructions(text: str):
  """(computation, name, shape, opcode, line) of every instruction."""
  computation = ""
  for line in text.splitlines():
    m = _INSTR.match(line)
    if m:
      yield (computation, *m.groups(), line)
      continue
    c = _COMPUTATION.match(line)
    if c:
      computation = c.group(1)


def _kinds(text: str):
  """(kind, result bytes) of each collective, counted once (see the module docstring)."""
  for computation, name, shape, op, line in _instructions(text):
    if computation.startswith("all-reduce-scatter"):
      continue  # the body of a fused reduce-scatter: counted at its fusion
    called = re.search(r"calls=%?([\w.\-]+)", line)
    if op == "fusion" and called and called.group(1).startswith("all-reduce-scatter"):
      yield "reduce-scatter", shape_bytes(shape)
    elif not op.endswith("-start"):  # an async collective is counted by its -done
      kind = op[:-len("-done")] if op.endswith("-done") else op
      if kind in KINDS:
        yield kind, shape_bytes(shape)


def collectives(text: str) -> dict[str, dict[str, int]]:
  """{kind: {"count", "bytes"}} over the whole program (result bytes per device)."""
  out: dict[str, dict[str, int]] = {}
  for kind, nbytes in _kinds(text):
    entry = out.setdefault(kind, {"count": 0, "bytes": 0})
    entry["count"] += 1
    entry["bytes"] += nbytes
  return dict(sorted(out.items()))


def largest(text: str, kind: str) -> int:
  """The result bytes of the largest single `kind` collective (0 if there is none)."""
  return max((n for k, n in _kinds(text) if k == kind), default=0)


def attention_kernels(text: str) -> list[str]:
  """The fused attention kernels in the program: 'splash' (TPU Mosaic call of splash
  attention), 'pallas_gpu' (a Triton call), 'cudnn' (cuDNN fused attention); [] when
  attention is plain XLA ops."""
  found = []
  mosaic = [l for l in text.splitlines() if 'custom_call_target="tpu_custom_call"' in l]
  if any("splash" in l for l in mosaic):  # the instruction is named after the kernel
    found.append("splash")
  elif mosaic:
    found.append("mosaic")
  if "__gpu$xla.gpu.triton" in text:
    found.append("pallas_gpu")
  if "__cudnn$fmha" in text:
    found.append("cudnn")
  return found


_CALLEE = re.compile(r"\b(?:calls|body|to_apply)=%?([\w.\-]+)")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def _dims(shape: str) -> list[int]:
  arrays = _ARRAY.findall(shape)
  return [int(d) for d in arrays[0][1].split(",") if d] if arrays else []


def _matmul_flops(op: str, shape: str, line: str, shapes: dict[str, str]) -> float:
  """2 x the multiply-adds of one dot or convolution (operand shapes looked up by name)."""
  names = re.findall(r"%([\w.\-]+)", line.split(f" {op}(", 1)[1])[:2]  # lhs, rhs
  out = float(np.prod(_dims(shape)))
  if op == "dot":
    lhs = _dims(shapes.get(names[0], ""))
    contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
    k = np.prod([lhs[int(i)] for i in contracting.group(1).split(",") if i]) if contracting else 1
    return 2.0 * out * float(k)
  kernel = _dims(shapes.get(names[1], ""))
  labels = re.search(r"dim_labels=\w*_(\w+)->", line)
  o = labels.group(1).index("o") if labels and "o" in labels.group(1) else len(kernel) - 1
  return 2.0 * out * float(np.prod(kernel)) / max(kernel[o], 1) if kernel else 0.0


def matmul_flops(text: str) -> dict[str, float]:
  """The FLOPs of every dot and convolution of the program, each counted as often as it runs:
  a while loop's body times its known trip count. (XLA's cost_analysis counts a loop body
  once: a scanned layer stack, and the loops XLA makes itself, e.g. the windowed einsums that
  overlap FSDP's gathers and reduce-scatters with the matmuls, which it unrolls into
  collective-permutes.) -> {"total", "in_loops" (the part inside while loops), "unknown_trip
  _loops" (loops counted once for want of a known trip count)}."""
  own: dict[str, float] = {}
  calls: dict[str, list[tuple[str, int]]] = {}
  shapes: dict[str, str] = {}
  entry, unknown = "", 0
  lines = list(_instructions(text))
  for _, name, shape, _, _ in lines:
    shapes[name] = shape
  for line in text.splitlines():
    if line.lstrip().startswith("ENTRY"):
      entry = _COMPUTATION.match(line).group(1)
  for computation, name, shape, op, line in lines:
    if op in ("dot", "convolution"):
      own[computation] = own.get(computation, 0.0) + _matmul_flops(op, shape, line, shapes)
    body = re.search(r"\bbody=%?([\w.\-]+)", line) if op == "while" else None
    trip = _TRIP_COUNT.search(line) if body else None
    unknown += bool(body) and trip is None
    for callee in _CALLEE.findall(line):
      times = int(trip.group(1)) if trip and callee == body.group(1) else 1
      calls.setdefault(computation, []).append((callee, times))
  totals: dict[str, tuple[float, float]] = {}

  def total(computation: str) -> tuple[float, float]:
    """(FLOPs of one run of `computation`, the part of them inside loops)."""
    if computation not in totals:
      flops, looped = own.get(computation, 0.0), 0.0
      for callee, times in calls.get(computation, ()):
        sub, sub_looped = total(callee)
        flops += times * sub
        looped += times * sub if times > 1 else sub_looped
      totals[computation] = (flops, looped)
    return totals[computation]

  flops, looped = total(entry)
  return {"total": flops, "in_loops": looped, "unknown_trip_loops": unknown}
