"""Command line entry point; deliberately thin (Colab and tests call train.py directly).

  python -m mlmjax.main --config=configs/tiny.py --workdir=runs/tiny [--config.train.steps=N]
"""

import re
import sys

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from mlmjax import errors
from mlmjax.parallel import distributed
from mlmjax.training import metrics
from mlmjax.training import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an ml_collections config file (e.g. configs/tiny.py).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, tokenizer, metrics; an existing one resumes.")
_VERBOSE = flags.DEFINE_bool("verbose", False, "Show tracebacks for input errors as well.")
_STOP_AFTER = flags.DEFINE_integer(
    "stop_after", None, "Stop at this step with a checkpoint (the schedule still follows"
    " train.steps); running again continues. For time-sliced jobs.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0, for multi-process runs on GPU/CPU"
    " clusters (TPU pods and SLURM jobs are detected automatically).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0..N-1.")
flags.mark_flags_as_required(["config", "workdir"])


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parsing, with bad config overrides (a misspelled key, a value of the wrong type)
  reported in one line instead of a traceback."""
  try:
    return flags.FLAGS(argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    text = " ".join(str(e).split())
    hint = re.search(r'Did you mean "([^"]+)" instead of "([^"]+)"', text)
    if hint:  # ml_collections' message for a misspelled key
      text = f"unknown config key {hint.group(2)!r} (did you mean {hint.group(1)!r}?)"
    print(f"error: {text}", file=sys.stderr)
    sys.exit(1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config = _CONFIG.value
  try:
    config.keys()  # the first use: where config_flags reports a file it could not load
  except OSError as e:
    print(f"error: cannot load --config: {str(e).strip().splitlines()[-1].strip()}",
          file=sys.stderr)
    sys.exit(1)
  metrics.quiet_library_logs()
  distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  if jax.process_index() > 0:  # one progress log per run: process 0's (others warn only)
    logging.set_verbosity(logging.WARNING)
  with errors.reported_in_one_line(_VERBOSE.value):
    train.train_and_evaluate(config, _WORKDIR.value, stop_after=_STOP_AFTER.value)


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
