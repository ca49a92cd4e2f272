"""The train step compiled for this machine's CPU (one device; mlmjax.compile has no CPU
target): its kernels and the bytes they read and write (mlmjax/parallel/hlo.py's `kernels`), and
its reduce-precision instructions: jax marks each value a checkpointed function saves for its
backward pass with one (jax#22244), so where XLA's CPU fusion copies that work into several
kernels, the program holds more of them than jax wrote.

  python benchmarks/cpu_kernels.py --config=configs/base.py --config.train.batch_size=8 \\
      --config.model.dtype=float32 --config.model.layer_norm_backward=fused

Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlmjax.parallel import plugins  # pylint: disable=wrong-import-position
plugins.hide()  # before jax (mlmjax/cli.py says why)

from absl import flags  # pylint: disable=wrong-import-position,wrong-import-order
import jax  # pylint: disable=wrong-import-position,wrong-import-order

from mlmjax import cli  # pylint: disable=wrong-import-position
from mlmjax.parallel import hlo  # pylint: disable=wrong-import-position
from mlmjax.parallel import sharding  # pylint: disable=wrong-import-position
from mlmjax.training.planning import aot  # pylint: disable=wrong-import-position
from mlmjax.training import assembly  # pylint: disable=wrong-import-position

_CONFIG = cli.define_config_file()


def main():
  flags.FLAGS(sys.argv)
  parts = assembly.Assembly.of(_CONFIG.value)
  mesh = sharding.make_mesh(parts.settings.mesh, jax.devices()[:1])
  setup = parts.setup(aot.vocab_size(parts.settings.tokenizer), mesh)
  shape = parts.plan.whole_run
  step = parts.train_step(setup, objective=shape.objective)
  batch = parts.batch_spec(mesh, shape.batch_size, shape.seq_len, shape.max_predictions,
                           shape.objective)
  text = step.lower(setup.abstract_state, batch).compile().as_text()
  print(json.dumps({"kernels": hlo.kernels(text),
                    "reduce_precision_ops": text.count("reduce-precision(")}))


if __name__ == "__main__":
  main()
