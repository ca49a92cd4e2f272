"""Fine-tune a pretrained run on a downstream task; writes its dev metrics.

  python -m mlmjax.finetune --workdir=runs/tiny --task=kjv_testament
  python -m mlmjax.finetune --workdir=runs/tiny --task=kjv_qa --init=random   # the baseline
  python -m mlmjax.finetune --workdir=runs/bert --task=squad/v1.1      # tfds, $TFDS_DATA_DIR
  python -m mlmjax.finetune --workdir=runs/x --task=sentiment --train_file=train.csv \\
      --dev_file=dev.csv --text_fields=review [--regression] [--config.train.epochs=2]
  python -m mlmjax.finetune --workdir=runs/x --task=ner --kind=token_classification \\
      --train_file=train.conll --dev_file=dev.conll

Task kinds: sequence classification and regression, token classification (NER), extractive
question answering (SQuAD), multiple choice (RACE, SWAG) and sentence embeddings.

The run lives in --output_dir (default WORKDIR/finetune/TASK, or TASK.random_init) and resumes
there; its dev metrics go to OUTPUT/results.json and are printed as JSON. Tasks:
mlmjax/finetuning/tasks.py; config keys: mlmjax/finetuning/config.py.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import json

from absl import flags
from absl import logging
import jax

from mlmjax import cli
from mlmjax.finetuning import config as finetune_config
from mlmjax.finetuning import tasks
from mlmjax.finetuning import trainer
from mlmjax.parallel import distributed
from mlmjax.training.run import metrics
from mlmjax.training.run import workdir as workdir_lib

_CONFIG = cli.define_config_dict(
    "config", finetune_config.get_config(), "Fine-tuning settings: --config.KEY=VALUE overrides"
    " a key (e.g. --config.train.epochs=2); every key and its default is in"
    " mlmjax/finetuning/config.py.")
_WORKDIR = flags.DEFINE_string("workdir", None, "The pretraining run to fine-tune.")
_TASK = flags.DEFINE_string("task", None, f"One of {', '.join(tasks.TASKS)}, or a name of your"
                            " own with --train_file and --dev_file.")
_INIT = flags.DEFINE_enum("init", "pretrained", ["pretrained", "random"],
                          "random: the same model from random initialisation (a baseline).")
_STEP = flags.DEFINE_integer("step", None, "The pretraining checkpoint (default: the latest).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the fine-tuning run lives (default:"
                                  " WORKDIR/finetune/TASK[.random_init]).")
_TRAIN_FILE = flags.DEFINE_string("train_file", "", "Training examples: .csv/.tsv (header row)"
                                  " or .jsonl.")
_DEV_FILE = flags.DEFINE_string("dev_file", "", "Dev examples, the same format.")
_TEXT_FIELDS = flags.DEFINE_string("text_fields", "", "The text field, or two for sentence"
                                   " pairs (a,b); default: the task's, or 'text'.")
_LABEL_FIELD = flags.DEFINE_string("label_field", "", "The label field (default 'label').")
_REGRESSION = flags.DEFINE_bool("regression", False, "Your own task's labels are numbers to"
                                " predict (Pearson/Spearman), not classes (--kind=regression).")
_KIND = flags.DEFINE_enum("kind", "", ["", *tasks.KINDS], "Your own task's kind (default:"
                          " classification).")
_TAG_NAMES = flags.DEFINE_string("tag_names", "", "token_classification files with numeric"
                                 " tags: the tag of each number, comma-separated (O,B-PER,...).")


def main(argv):
  del argv
  metrics.quiet_library_logs()
  distributed.initialize(None, None, None)  # multi-host detection and the preemption service
  if jax.process_index() > 0:
    logging.set_verbosity(logging.WARNING)
  random_init = _INIT.value == "random"
  data = tasks.load(_TASK.value, _TRAIN_FILE.value, _DEV_FILE.value, _TEXT_FIELDS.value,
                    _LABEL_FIELD.value, _REGRESSION.value, _KIND.value, _TAG_NAMES.value)
  output = _OUTPUT_DIR.value or workdir_lib.Workdir(_WORKDIR.value).finetune(
      _TASK.value, random_init).path
  results = trainer.finetune(_CONFIG.value, _WORKDIR.value, data, output, random_init,
                             _STEP.value)
  if jax.process_index() == 0:
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main, required=("workdir", "task"))
