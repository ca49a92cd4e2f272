"""What an optimized HLO program (compiled.as_text()) contains: its collectives with their
bytes, and which attention kernel runs. Read from the text because the compiled object has no
API for either.

Collectives are counted once each: an async pair (`all-gather-start` / `all-gather-done`) by
its `-done` (whose shape is the result), a synchronous one by itself. On TPU, XLA fuses a
reduce-scatter into a fusion whose name starts with `all-reduce-scatter` (the collective inside
it is an all-reduce of the fusion's own computation): those count as reduce-scatter, their
inner all-reduce not at all.
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


def _fused_scatter_bodies(text: str) -> set[str]:
  """Computations called by `all-reduce-scatter` fusions (their all-reduce is not separate)."""
  out = set()
  for line in text.splitlines():
    m = _INSTR.match(line)
    if m and m.group(1).startswith("all-reduce-scatter") and m.group(3) == "fusion":
      out.update(re.findall(r"calls=%?([\w.\-]+)", line))
  return out


def collectives(text: str) -> dict[str, dict[str, int]]:
  """{kind: {"count", "bytes"}} over the whole program (result bytes per device)."""
  skip = _fused_scatter_bodies(text)
  out: dict[str, dict[str, int]] = {}
  computation = ""
  for line in text.splitlines():
    c = _COMPUTATION.match(line)
    if c and "=" not in line.split("{")[0]:
      computation = c.group(1)
      continue
    m = _INSTR.match(line)
    if not m or computation in skip:
      continue
    name, shape, op = m.groups()
    if name.startswith("all-reduce-scatter") and op == "fusion":
      kind = "reduce-scatter"
    elif op.endswith("-start"):
      continue  # counted by its -done
    else:
      kind = op[:-len("-done")] if op.endswith("-done") else op
      if kind not in KINDS:
        continue
    entry = out.setdefault(kind, {"count": 0, "bytes": 0})
    entry["count"] += 1
    entry["bytes"] += shape_bytes(shape)
  return dict(sorted(out.items()))


def largest(text: str, kind: str) -> int:
  """The result bytes of the largest single `kind` collective (0 if there is none)."""
  skip, best, computation = _fused_scatter_bodies(text), 0, ""
  for line in text.splitlines():
    c = _COMPUTATION.match(line)
    if c and "=" not in line.split("{")[0]:
      computation = c.group(1)
      continue
    m = _INSTR.match(line)
    if m and computation not in skip and m.group(3) in (kind, kind + "-done"):
      best = max(best, shape_bytes(m.group(2)))
  return best


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
