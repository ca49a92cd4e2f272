"""The calibration of the predicted step time (mlmjax/parallel/roofline.py): every training step
measured on a GPU so far (docs/performance.md), compiled here for its GPU, its roofline time by
class of kernel beside what was measured. One efficiency per class is fitted on the steps whose
profiles split the time by class (the time the roofline predicts for a class over the time the
profile measured, pooled over those steps); every row's error is then given with the fitted
factors. Prints docs/performance.md's table and the factors for roofline.EFFICIENCY.

  PYTHONPATH=DIR python benchmarks/calibrate.py   # DIR: pip install --target=DIR nvidia-cudnn-cu12

Needs '.[gpu-compile]', and cuDNN (a 716 MB wheel: setup.py) to compile the cuDNN rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# As benchmarks/gpu.sh measured them: bfloat16, one phase, attention dropout 0 but where
# named, the 10,699-piece tokenizer of the built-in corpus.
COMMON = ["--config.train.phases=()", "--config.model.dtype=bfloat16",
          "--config.tokenizer.vocab_size=10699", "--config.model.attention_dropout_rate=0"]
BASE = ["--config=bert:base", "--config.train.batch_size=256"]
LARGE = ["--config=bert:large", "--config.data.seq_len=512",
         "--config.masking.max_predictions_per_seq=80"]
CUDNN = ["--config.model.attention_impl=cudnn"]
# (row, target, flags, measured ms a step, how it was timed, profile's ms by class or None).
# Profiles: matmul = cuBLAS, Triton and cutlass GEMMs; attention = cuDNN's kernels; elementwise
# = every other kernel (XLA's fusions, threefry, Triton's normalisation kernels).
ROWS = (
    ("BERT-base 128 x 256, cuDNN", "h100x1", BASE + CUDNN, 65.2, "back to back, profiled",
     {"matmul": 23.8, "attention": 6.6, "elementwise": 29.7 + 2.6 + 2.2}),
    ("BERT-large 512 x 64, cuDNN", "h100x1", LARGE + CUDNN + ["--config.train.batch_size=64"],
     194.0, "back to back, profiled", {"matmul": 75.1, "attention": 29.3,
                                       "elementwise": 75.7 + 7.7 + 5.8}),
    ("BERT-base 128 x 256, cuDNN", "h200x1", BASE + CUDNN, 59.1, "back to back", None),
    ("BERT-large 512 x 112, cuDNN", "h200x1", LARGE + CUDNN + ["--config.train.batch_size=112"],
     512 * 112 / 187_400 * 1e3, "training loop, steps 5-20", None),
    ("BERT-base 128 x 256, Pallas", "h100x1", BASE + ["--config.model.attention_impl=pallas_gpu"],
     67.6, "a wait after each step", None),
    ("BERT-base 128 x 256, cuDNN, remat dots_saveable", "h100x1",
     BASE + CUDNN + ["--config.model.remat=dots_saveable"], 73.7, "a wait after each step",
     None),
    ("BERT-base 128 x 256, XLA attention, attention dropout 0.1", "h100x1",
     BASE + ["--config.model.attention_impl=xla", "--config.model.attention_dropout_rate=0.1"],
     82.6, "a wait after each step", None),
)
FITTED = ("matmul", "attention", "elementwise")


def compile_train_step(target: str, flags: list[str]) -> dict:
  """The compile command's report of the train step."""
  out = subprocess.run([sys.executable, "-m", "mlmjax.compile", f"--target={target}",
                        *flags, *COMMON], cwd=REPO, capture_output=True, text=True, check=False)
  rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
  if out.returncode or not rows:
    raise SystemExit(f"error: {target} {flags}: {out.stderr.strip()[-800:]}")
  return next(r for r in rows if r["step"] == "train")


def raw_ms(report: dict) -> dict[str, float]:
  """The roofline's ms by class before the efficiencies (copies counted as elementwise)."""
  p = report["predicted"]
  raw = {c: t * p["efficiency"][c] * 1e3 for c, t in p["by_class_s"].items()}
  raw["elementwise"] += raw.pop("copies")
  return raw


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--rows", type=int, default=len(ROWS), help="the first N rows only")
  args = parser.parse_args()
  rows = []
  for name, target, flags, measured, timing, profile in ROWS[:args.rows]:
    report = compile_train_step(target, flags)
    rows.append((name, target, flags, measured, timing, profile, raw_ms(report)))
    print(f"compiled {name} for {target}: {json.dumps(rows[-1][-1])}", file=sys.stderr,
          flush=True)
  profiled = [r for r in rows if r[5]]
  factors = {c: sum(r[6][c] for r in profiled) / sum(r[5][c] for r in profiled) for c in FITTED}
  print("efficiency:", json.dumps({c: round(f, 3) for c, f in factors.items()}))
  print("| step | GPU | measured ms | how | roofline ms (matmul / attention / elementwise)"
        " | predicted ms | error |\n|---|---|---|---|---|---|---|")
  for name, target, _, measured, timing, _, raw in rows:
    predicted = sum(raw[c] / factors[c] for c in FITTED) + raw["collectives"]
    cells = [name, target.replace("x1", "").upper(), f"{measured:.1f}", timing,
             " / ".join(f"{raw[c]:.1f}" for c in FITTED), f"{predicted:.1f}",
             f"{predicted / measured - 1:+.1%}"]
    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
  main()
