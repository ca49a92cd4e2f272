"""Shows what a config's masking does to its real input stream.

  python -m mlmjax.show_masks --config=tiny --config.masking.strategy=entity \\
      [--workdir=runs/tiny] [--rows=4] [--step=0] [--json]

Takes the first training batch the run would train on (its tokenizer, packing, strategy, rate
and seed; from `--workdir`'s saved tokenizer and statistics, else made in a temporary folder)
and prints its first rows as text, each masked run as {text=KIND} (KIND: [MASK], random:PIECE
or kept), then a summary line: the masked fraction, the replacement kinds, and for named
entities, noun chunks and correlated n-grams the share of masked pieces inside one and the
share of those touched that are masked whole, which tell strategies apart. --step=N masks the
same rows as training would at step N (a dynamic strategy's masks change from step to step).
With --json, one JSON line per row and the summary as a JSON line, for scripts
(mlmjax/data/masking/display.py says what each field is; mlmjax/training/masks_preview.py
where entities, noun chunks and n-grams come from).
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import json
import tempfile

from absl import flags

from mlmjax import cli
from mlmjax import paths
from mlmjax.training import config_check
from mlmjax.training import masks_preview

_CONFIG = cli.define_config_file()
_WORKDIR = flags.DEFINE_string("workdir", "", "A run folder whose tokenizer and statistics to"
                               " use, or where to keep those it makes (default: a temporary"
                               " folder).")
_ROWS = flags.DEFINE_integer("rows", 4, "Rows to print.")
_JSON = flags.DEFINE_bool("json", False, "JSON lines instead of text.")
_STEP = flags.DEFINE_integer("step", 0, "Mask the batch's rows as training would at this step"
                             " (a mask is a pure function of seed, step and row: another step,"
                             " other masks).", lower_bound=0)


def main(argv):
  del argv
  parts = config_check.checked(_CONFIG.value)
  if _WORKDIR.value:  # a new folder keeps the tokenizer and statistics made for it
    paths.makedirs(_WORKDIR.value)
  with tempfile.TemporaryDirectory() as tmp:
    rows, summary = masks_preview.show(parts, _WORKDIR.value or tmp, _ROWS.value, _STEP.value)
  if _JSON.value:
    for line in rows + [summary]:
      print(json.dumps(line))
    return
  for row in rows:
    print(f"row {row['row']}: {row['text']}\n")
  print(" ".join(f"{k}={v}" for k, v in summary.items() if k != "summary"))


if __name__ == "__main__":
  cli.run(main, required=("config",))
