"""What an optimized HLO program (compiled.as_text()) contains: its collectives with their
bytes, which attention kernel runs, and the windowed-einsum loops XLA made. Read from the text
because the compiled object has no API for any of them.

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


def dims(shape: str) -> list[int]:
  """The dimensions of an HLO shape's first array (`bf16[8,128]{1,0}` -> [8, 128])."""
  m = _ARRAY.search(shape)
  return [int(d) for d in m.group(2).split(",") if d] if m else []


def entry_computation(text: str) -> str:
  """The name of the program's ENTRY computation."""
  m = re.search(r"^\s*ENTRY\s+%?([\w.\-]+)", text, re.MULTILINE)
  return m.group(1) if m else ""


def instructions(text: str):
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
  for computation, name, shape, op, line in instructions(text):
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


def windowed_einsum_loops(text: str) -> dict[str, int]:
  """The loops XLA makes of a matmul and its collective (a windowed einsum: under FSDP, a
  weight gradient's matmul and its reduce-scatter, one block of shards per iteration, with
  collective-permutes between): {iterations: how many loops run that many times}. XLA's
  cost_analysis counts a loop body once, so it sees 1/iterations of their FLOPs."""
  bodies = {}
  for _, _, _, op, line in instructions(text):
    body = re.search(r"\bbody=%?([\w.\-]+)", line) if op == "while" else None
    if body and "windowed_dot_general" in body.group(1):
      bodies[body.group(1)] = re.search(r"\bcondition=%?([\w.\-]+)", line).group(1)
  limits = {}  # condition computation -> the constant its counter is compared with
  for computation, _, _, op, line in instructions(text):
    if computation in bodies.values() and op == "constant":
      limits[computation] = int(re.search(r"constant\((\d+)\)", line).group(1))
  out: dict[str, int] = {}
  for condition in bodies.values():
    key = str(limits.get(condition, "unknown"))
    out[key] = out.get(key, 0) + 1
  return out


def kernels(text: str) -> dict[str, int]:
  """The program's kernels, each a pass over its inputs and outputs: {"count", "bytes"}, the
  fusions and custom calls (cuBLAS/cuDNN/Triton/Mosaic) outside fused computations, with the
  bytes of their operands and results added up. A loop's body (a scanned stack) counts once.
  An upper bound on the memory traffic (a kernel reading an operand twice, or a cache hit, is
  not seen), and the measure of fusing work: a fusion that saves a pass saves its bytes."""
  rows = list(instructions(text))
  fused = {c.group(1) for *_, op, line in rows if op == "fusion"
           for c in [re.search(r"calls=%?([\w.\-]+)", line)] if c}
  size = {name: shape_bytes(shape) for _, name, shape, _, _ in rows}
  out = {"count": 0, "bytes": 0}
  for computation, name, _, op, line in rows:
    if op not in ("fusion", "custom-call") or computation in fused:
      continue
    operands = re.findall(r"%([\w.\-]+)", line.split(f"{op}(", 1)[1].split(")", 1)[0])
    out["count"] += 1
    out["bytes"] += size[name] + sum(size.get(o, 0) for o in operands)
  return out
