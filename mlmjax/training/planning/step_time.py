"""A compiled step's predicted time on the chip it was compiled for: the roofline of its
optimized program (parallel/roofline.py) at the chip's published rates (models/chip_rates.py),
with the model's attention FLOPs handed to the fused attention kernels, whose FLOPs the
program does not show. What mlmjax.compile reports (aot.py) and what train.fit='auto' compares
candidates by (fit.py)."""

from __future__ import annotations

import jax

from mlmjax.models import bert as model_lib
from mlmjax.models import chip_rates
from mlmjax.parallel import roofline
from mlmjax.training import assembly


def rates_known(parts: assembly.Assembly, mesh: jax.sharding.Mesh) -> bool:
  """Whether the mesh's chip publishes the rates a prediction needs at the run's compute
  dtype (not a CPU; not float32 on a TPU)."""
  device = mesh.devices.flat[0]
  rates = chip_rates.find(device.device_kind)
  return device.platform != "cpu" and rates is not None and rates.peak_flops(
      model_lib.compute_dtype(parts.settings.model.dtype, device.platform)) is not None


def predict(parts: assembly.Assembly, hlo_text: str, mesh: jax.sharding.Mesh, batch: int,
            seq_len: int, forward_only: bool = False) -> roofline.Prediction:
  """The predicted time of one train step (or eval step: `forward_only`) of `batch` global rows
  of `seq_len` tokens, compiled as `hlo_text` for the devices of `mesh`. A UserError line where
  the chip publishes no rates (rates_known)."""
  device = mesh.devices.flat[0]
  tokens = batch * seq_len / mesh.size  # one device's share
  # Attention's forward once; a train step's backward twice more.
  attention = parts.attention_flops_per_token(seq_len) * (1 if forward_only else 3)
  return roofline.predict(hlo_text, device.device_kind,
                          model_lib.compute_dtype(parts.settings.model.dtype, device.platform),
                          mesh.size, attention * tokens)
