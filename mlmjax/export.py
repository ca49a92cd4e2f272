"""Export a run's checkpoint as a Hugging Face `transformers` model.

  python -m mlmjax.export --workdir=runs/tiny --out=hf/tiny [--step=N]

writes OUT/model.safetensors, OUT/config.json and the tokenizer files, which
`AutoModelForMaskedLM.from_pretrained(OUT)` and `AutoTokenizer.from_pretrained(OUT)` load: a
BERT for learned positions, a RoFormer for rotary ones, ModernBERT for the modern block, an
ElectraForPreTraining for ELECTRA's discriminator (exporter.py). Then, when torch is
installed, transformers loads the export and its MLM logits on a sample text must equal
mlmjax's (`--verify=false` skips this).

  python -m mlmjax.export --workdir=runs/tiny/finetune/kjv_qa --out=hf/tiny-qa

exports a fine-tuning run with its head, as the matching transformers class
(...ForQuestionAnswering, ...ForTokenClassification, ...ForMultipleChoice,
...ForSequenceClassification; sentence embeddings in sentence-transformers' folder layout:
hf/heads.py), verified the same way on a sample of the task's kind.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import importlib.util

from absl import flags

from mlmjax import cli
from mlmjax.finetuning import finished
from mlmjax.hf import convert as hf_convert
from mlmjax.hf import exporter
from mlmjax.hf import heads
from mlmjax.training import finished_run
from mlmjax.training.run import metrics

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's workdir.")
_OUT = flags.DEFINE_string("out", None, "The folder to write (must not exist, or be empty).")
_STEP = flags.DEFINE_integer("step", None, "The checkpoint to export (default: the latest).")
_VERIFY = flags.DEFINE_bool("verify", True, "Load the export with transformers (needs torch)"
                            " and compare its logits with mlmjax's.")


_FAMILY_NAMES = {"bert": "BERT", "roformer": "RoFormer", "modernbert": "ModernBERT",
                 "electra": "ELECTRA"}


def main(argv):
  del argv
  metrics.quiet_library_logs()
  if finished.is_finetuning_run(_WORKDIR.value):  # with its task head
    model = finished.load(_WORKDIR.value, _STEP.value)
    name = heads.export(model, _OUT.value)
    print(f"fine-tuned checkpoint step {model.step} of {_WORKDIR.value}"
          f" ({model.record['task']}, {model.kind.name}) -> {_OUT.value} ({name})")
    _verify(lambda: f"max |output difference| {heads.verify(model, _OUT.value):.2e} on a"
            f" sample {model.kind.name} input")
    return
  run = finished_run.load(_WORKDIR.value, _STEP.value)
  exporter.export(run, _OUT.value)
  arch = hf_convert.export_arch(run.settings.model, run.hf_model_type)
  kind = _FAMILY_NAMES[arch.model_type]
  print(f"checkpoint step {run.step} of {_WORKDIR.value} -> {_OUT.value} ({kind},"
        f" {run.tokenizer.kind} tokenizer, {len(run.tokenizer)} ids)")
  _verify(lambda: f"max |logit difference| {exporter.verify(run, _OUT.value):.2e} on"
          f" {exporter.SAMPLE_TEXT!r}")


def _verify(check) -> None:
  """Unless --verify=false: `check()`'s comparison with transformers (it needs torch)."""
  if not _VERIFY.value:
    return
  if importlib.util.find_spec("torch") is None:
    print("not verified: torch is not installed (pip install torch; the CPU build is enough)")
  else:
    print(f"verified with transformers: {check()}")


if __name__ == "__main__":
  cli.run(main, required=("workdir", "out"))
