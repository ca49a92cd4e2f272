"""Write the sentence embeddings of a file's lines with a fine-tuned embedding model.

  python -m mlmjax.embed --model=runs/tiny/finetune/kjv_retrieval --input=verses.txt \\
      --output=verses.npy

One text per line of --input (UTF-8; a .jsonl file: the --field of each object); --output is a
.npy array [lines, hidden size] of float32, row i the embedding of line i, unit length (so the
dot product of two rows is their cosine similarity) unless --normalize=false. The model is a
fine-tuning run of kind `embedding` (`--task=kjv_retrieval`, or your pairs with
`--kind=embedding`); texts longer than its data.seq_len are cut.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import io

from absl import flags
import numpy as np

from mlmjax import cli
from mlmjax import paths
from mlmjax.finetuning import finished
from mlmjax.inference.embeddings import check_kind, embed, read_texts
from mlmjax.training.run import metrics

_MODEL = flags.DEFINE_string("model", None, "The fine-tuning run (its output folder).")
_INPUT = flags.DEFINE_string("input", None, "Texts, one a line (or .jsonl objects).")
_FIELD = flags.DEFINE_string("field", "text", "The text field of a .jsonl --input.")
_OUTPUT = flags.DEFINE_string("output", None, "The .npy file to write.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Texts embedded per call.", lower_bound=1)
_NORMALIZE = flags.DEFINE_bool("normalize", True, "Unit-length vectors.")


def main(argv):
  del argv
  metrics.quiet_library_logs()
  texts = read_texts(_INPUT.value, _FIELD.value)
  check_kind(finished.saved_record(_MODEL.value))  # before loading the checkpoint
  model = finished.load(_MODEL.value)
  vectors = embed(model, texts, _BATCH_SIZE.value, _NORMALIZE.value)
  buffer = io.BytesIO()
  np.save(buffer, vectors)
  paths.write_atomic(_OUTPUT.value, buffer.getvalue())  # a local file or a bucket
  print(f"{len(texts)} texts -> {_OUTPUT.value} ({vectors.shape[0]} x"
        f" {vectors.shape[1] if vectors.ndim == 2 else 0} float32)")


if __name__ == "__main__":
  cli.run(main, required=("model", "input", "output"))
