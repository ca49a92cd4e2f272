"""What each change that cuts passes over the activations does to the compiled train step of
BERT-base (128 tokens, batch 256, the 12 layers scanned: one layer's body counted), compiled
for one H100 and for a v5p-8 slice from this machine (python -m mlmjax.compile; no chip needed):
attention dropout off, as the fused attention kernels need (models/attention.py);
the kernels and the bytes they read and write (parallel/hlo.py's `kernels`), the compiler's
bytes accessed and FLOPs (TPU only), and memory. A figure of runtime needs the chip
(benchmarks/gpu.sh); these say which variants are worth its time.

  python benchmarks/fusion.py [--targets=h100x1,v5p-8] [--variants=baseline,rbg]

Needs '.[tpu]' and '.[gpu-compile]'. The H100 compiles with the Pallas attention kernel
(cuDNN's needs a 716 MB wheel: setup.py), the same kernel in every variant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--config=bert:base", "--config.train.phases=((1.0, 128, 20),)",
        "--config.model.scan_layers=true", "--config.model.attention_dropout_rate=0"]
# (name, config overrides, XLA_FLAGS, the targets it applies to).
VARIANTS = (
    ("baseline", [], "", ("gpu", "tpu")),
    # jax's derivative of LayerNorm, the default before model.layer_norm_backward='fused'
    ("layer_norm_autodiff", ["--config.model.layer_norm_backward=autodiff"], "", ("gpu", "tpu")),
    ("rbg", ["--config.train.dropout_rng=rbg"], "", ("gpu", "tpu")),
    ("unsafe_rbg", ["--config.train.dropout_rng=unsafe_rbg"], "", ("gpu", "tpu")),
    # XLA's GPU options that MaxText's GPU recipes set, one at a time.
    ("latency_hiding", [], "--xla_gpu_enable_latency_hiding_scheduler=true", ("gpu",)),
    ("no_triton_gemm", [], "--xla_gpu_enable_triton_gemm=false", ("gpu",)),
    ("highest_priority_stream", [], "--xla_gpu_enable_highest_priority_async_stream=true",
     ("gpu",)),
    ("while_loop_double_buffering", [], "--xla_gpu_enable_while_loop_double_buffering=true",
     ("gpu",)),
)


def compile_train_step(target: str, overrides: list[str], xla_flags: str) -> dict:
  """The compile command's report of the train step."""
  args = [*BASE, *overrides]
  if target.startswith("h100"):
    args.append("--config.model.attention_impl=pallas_gpu")
  env = {**os.environ, "XLA_FLAGS": xla_flags}
  out = subprocess.run([sys.executable, "-m", "mlmjax.compile", f"--target={target}", *args],
                       cwd=REPO, env=env, capture_output=True, text=True, check=False)
  rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
  if out.returncode or not rows:
    raise SystemExit(f"error: {target} {overrides} {xla_flags}: {out.stderr.strip()[-500:]}")
  return next(r for r in rows if r["step"] == "train")


def row(target: str, name: str, report: dict) -> str:
  flops, accessed = report["compiler_flops_per_device"], report[
      "compiler_bytes_accessed_per_device"]
  cells = [target, name, str(report["kernels"]["count"]),
           f"{report['kernels']['bytes'] / 2**30:.2f}",
           f"{accessed / 2**30:.2f}" if accessed else "-",
           f"{flops / 1e12:.2f}" if flops else "-", f"{report['memory_gib']:.2f}"]
  return "| " + " | ".join(cells) + " |"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--targets", default="h100x1,v5p-8")
  parser.add_argument("--variants", default=",".join(v[0] for v in VARIANTS))
  args = parser.parse_args()
  chosen = args.variants.split(",")
  print("| target | variant | kernels | their bytes (GiB) | compiler's bytes accessed (GiB)"
        " | TFLOP | memory (GiB) |\n|---|---|---|---|---|---|---|", flush=True)
  for target in args.targets.split(","):
    platform = "gpu" if target.startswith(("h100", "a100")) else "tpu"
    for name, overrides, xla_flags, platforms in VARIANTS:
      if name in chosen and platform in platforms:
        print(row(target, name, compile_train_step(target, overrides, xla_flags)), flush=True)


if __name__ == "__main__":
  main()
