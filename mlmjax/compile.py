"""Compile the train and eval steps for a TPU slice or GPU node this machine does not have,
and print what the compiler says: one JSON line per step (memory per device against the
device's, compiler and model FLOPs, collectives, the attention kernel, compile time, and the
step's predicted time, tokens/s and MFU with the time of each class of kernel:
parallel/roofline.py), then one for the whole run (`"step": "run"`: its train steps'
predicted hours and chip-hours on the target).

  pip install -e '.[tpu]'            # libtpu: compiling for TPUs from any machine
  pip install -e '.[gpu-compile]'    # jax's CUDA plugin: compiling for GPU nodes (h100x8)
  python -m mlmjax.compile --config=bert:large --target=v5p-8 [--hlo_dir=DIR] \\
      [--config.train.phases="((1.0, 512, 77),)"]

A step that does not fit ends the command with one `error:` line (chip, memory, how far over).
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import json

from absl import flags

from mlmjax import cli
from mlmjax.parallel import targets

_CONFIG = cli.define_config_file()
_TARGET = flags.DEFINE_string("target", None, f"What to compile for: {targets.FORMS}.")
_HLO_DIR = flags.DEFINE_string("hlo_dir", "", "Write each step's optimized HLO here.")


def main(argv):
  del argv
  # The target first, jax after: a GPU target needs jax's CUDA plugin, which jax loads when it
  # is imported and a machine without a GPU leaves out otherwise (parallel/plugins.py).
  target = targets.get(_TARGET.value)
  from mlmjax.training.planning import aot  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run import metrics  # pylint: disable=g-import-not-at-top
  metrics.quiet_library_logs()
  steps = aot.compile_steps(_CONFIG.value, target)
  for compiled in steps:
    if _HLO_DIR.value:
      compiled.report["hlo"] = aot.write_hlo(compiled, _HLO_DIR.value)
    print(json.dumps(compiled.report), flush=True)
    if not compiled.report["fits"]:
      raise aot.does_not_fit(compiled.report, target)
  print(json.dumps(aot.time_to_train(_CONFIG.value, steps, target)), flush=True)


if __name__ == "__main__":
  cli.run(main, required=("config", "target"))
