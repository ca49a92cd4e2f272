"""Pretrain a model in --workdir, or resume the run there.

  python -m mlmjax.main --config=tiny --workdir=runs/tiny [--config.train.steps=N]
  python -m mlmjax.main --config=bert:base --workdir=runs/bert \\
      --config.data.source='corpus/*.txt'

A preset by name (tiny, bert:base, ...: the files of configs/) or a config file of yours, any
key overridden with --config.KEY=VALUE (configs/base.py explains each). Running the same
command again continues from the last checkpoint; a larger --config.train.steps goes on.
Deliberately thin: notebooks and tests call training/train.py's train_and_evaluate directly.
"""

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

from absl import flags
from absl import logging
import jax

from mlmjax import cli
from mlmjax.parallel import distributed
from mlmjax.training.run import metrics
from mlmjax.training.run import startup_watch
from mlmjax.training import run_settings
from mlmjax.training import train

_CONFIG = cli.define_config_file()
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, tokenizer, metrics; an existing one resumes.")
_STOP_AFTER = flags.DEFINE_integer(
    "stop_after", None, "Stop at this step with a checkpoint (the schedule still follows"
    " train.steps); running again continues. For time-sliced jobs.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0, for multi-process runs on GPU/CPU"
    " clusters (TPU pods and SLURM jobs are detected automatically).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0..N-1.")


def main(argv):
  del argv
  metrics.quiet_library_logs()
  limits = run_settings.RunSettings.from_config(_CONFIG.value).watchdog
  startup = None  # several processes: a peer that never joins is named, not waited for
  if limits.enabled and distributed.several(_COORDINATOR.value, _NUM_PROCESSES.value):
    startup = startup_watch.StartupWatch(_WORKDIR.value, _COORDINATOR.value,
                                         _NUM_PROCESSES.value, _PROCESS_ID.value,
                                         60 * limits.startup_minutes)
  distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                         timeout_s=startup.jax_timeout_s if startup else None)
  if startup:
    startup.joined()
  if jax.process_index() > 0:  # one progress log per run: process 0's (others warn only)
    logging.set_verbosity(logging.WARNING)
  train.train_and_evaluate(_CONFIG.value, _WORKDIR.value, stop_after=_STOP_AFTER.value)


if __name__ == "__main__":
  cli.run(main, required=("config", "workdir"))
