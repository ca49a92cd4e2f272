"""Each chip's published rates, per chip: what MFU is measured against (models/flops.py) and
a compiled step's time is predicted from (parallel/roofline.py). One table; each number is the
vendor's own, with its source beside it.

  peak FLOP/s    dense, per dtype of the compute: bfloat16, and float32 where the datasheet
                 gives one (TPUs run float32 as bfloat16 passes and publish none; the GPUs'
                 float32 is without TF32)
  HBM            bytes per second of the chip's memory
  collective     bytes per second a chip's all-reduce moves over its links (ICI, NVLink), one
                 direction: the TPU pages give a pod's all-reduce bandwidth (per chip: half the
                 bidirectional ICI figure on v5e and v6e, so v5p's is taken as half of its
                 ICI too); for NVLink, half the bidirectional figure
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from mlmjax.errors import UserError


@dataclasses.dataclass(frozen=True)
class Rates:
  bf16_flops: float
  f32_flops: float | None
  hbm_bytes_per_s: float
  collective_bytes_per_s: float

  def peak_flops(self, dtype) -> float | None:
    """Dense FLOP/s at the compute dtype, or None where the chip publishes none."""
    return self.bf16_flops if np.dtype(dtype) == ml_dtypes.bfloat16 else self.f32_flops


# device_kind (jax's name of the chip, matched as a substring, first match wins) -> rates.
_RATES = {
    # cloud.google.com/tpu/docs/v4: 275 TFLOPs, 1,200 GBps; all-reduce 1.1 PB/s per 4,096 chips
    "TPU v4": Rates(275e12, None, 1200e9, 1.1e15 / 4096),
    # /tpu/docs/v5e: 197 TFLOPs, 819 GBps; all-reduce 51.2 TB/s per 256 chips
    "TPU v5 lite": Rates(197e12, None, 819e9, 51.2e12 / 256),
    # /tpu/docs/v5p: 459 TFLOPs, 2,765 GBps; ICI 1,200 GBps per chip, both directions
    "TPU v5": Rates(459e12, None, 2765e9, 600e9),
    # /tpu/docs/v6e: 918 TFLOPs, 1,638 GBps; all-reduce 102.4 TB/s per 256 chips
    "TPU v6 lite": Rates(918e12, None, 1638e9, 102.4e12 / 256),
    # NVIDIA A100 datasheet, SXM4 80GB: 312 TFLOPS bf16 (dense), 19.5 FP32, 2,039 GB/s,
    # NVLink 600 GB/s (both directions)
    "A100": Rates(312e12, 19.5e12, 2039e9, 300e9),
    # NVIDIA H100 datasheet, SXM: 1,979 TFLOPS bf16 with sparsity (989 dense), 67 FP32,
    # 3.35 TB/s, NVLink 900 GB/s
    "H100": Rates(989e12, 67e12, 3350e9, 450e9),
    # NVIDIA H200 datasheet, SXM: the H100's compute, 4.8 TB/s, NVLink 900 GB/s
    "H200": Rates(989e12, 67e12, 4800e9, 450e9),
}


def known() -> str:
  return ", ".join(_RATES)


def find(device_kind: str) -> Rates | None:
  """The rates of a chip by jax's device_kind ('TPU v5', 'NVIDIA H100 80GB HBM3'), or None."""
  return next((r for name, r in _RATES.items() if name in device_kind), None)


def get(device_kind: str, dtype) -> tuple[Rates, float]:
  """(rates, peak FLOP/s at `dtype`) of a chip; one UserError line when either is unknown."""
  rates = find(device_kind)
  if rates is None:
    raise UserError(f"no published rates for {device_kind!r} to predict time from"
                    f" (mlmjax knows {known()})")
  peak = rates.peak_flops(dtype)
  if peak is None:
    raise UserError(f"{device_kind} publishes no {np.dtype(dtype)} peak to predict time from"
                    f" (it has bfloat16's: set model.dtype='bfloat16')")
  return rates, peak
