"""Command line entry point; deliberately thin (Colab and tests call train.py directly).

  python -m mlmjax.main --config=configs/tiny.py --workdir=runs/tiny [--config.train.steps=N]
"""

import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from mlmjax import errors
from mlmjax import metrics
from mlmjax import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an ml_collections config file (e.g. configs/tiny.py).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, tokenizer, metrics; an existing one resumes.")
_VERBOSE = flags.DEFINE_bool("verbose", False, "Show tracebacks for input errors as well.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  metrics.quiet_library_logs()
  try:
    train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except errors.UserError as e:
    if _VERBOSE.value:
      raise
    logging.error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
