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
import time

from absl import flags
from absl import logging
import numpy as np

from mlmjax import cli
from mlmjax import errors
from mlmjax import paths
from mlmjax.finetuning import examples
from mlmjax.finetuning import finished
from mlmjax.finetuning import multiple_choice
from mlmjax.training import metrics

_MODEL = flags.DEFINE_string("model", None, "The fine-tuning run (its output folder).")
_INPUT = flags.DEFINE_string("input", None, "Texts, one a line (or .jsonl objects).")
_FIELD = flags.DEFINE_string("field", "text", "The text field of a .jsonl --input.")
_OUTPUT = flags.DEFINE_string("output", None, "The .npy file to write.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Texts embedded per call.", lower_bound=1)
_NORMALIZE = flags.DEFINE_bool("normalize", True, "Unit-length vectors.")


def read_texts(path: str, field: str) -> list[str]:
  """The texts of `path`: its lines, or one field of each object of a .jsonl file."""
  if path.endswith(".jsonl"):
    return [examples.text_field(r, field, f"{path}: record {i + 1}")
            for i, r in enumerate(examples.read_records(path))]
  if not paths.exists(path):
    raise errors.DataError(f"{path}: no such file")
  try:
    return paths.read_bytes(path).decode("utf-8").splitlines()
  except UnicodeDecodeError as e:
    raise errors.DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def check_kind(record: dict) -> None:
  """A one-line error unless the fine-tuning run of `record` trained sentence embeddings."""
  kind = record.get("kind", "classification")
  if kind != "embedding":
    raise errors.UserError(f"{record['task']} is a {kind} run; embedding needs a"
                           " sentence-embedding run (--task=kjv_retrieval, or --kind=embedding)")


def embed(model: finished.FinetunedModel, texts: list[str], batch_size: int = 64,
          normalize: bool = True) -> np.ndarray:
  """[N, D] float32 embeddings of `texts` (a fine-tuned model of kind `embedding`)."""
  check_kind(model.record)
  seq_len = model.settings.data.seq_len
  out, t0 = [], time.perf_counter()
  for first in range(0, len(texts), batch_size):
    chunk = texts[first:first + batch_size]
    chunk += [""] * (batch_size - len(chunk))  # one program for every batch
    rows = multiple_choice.encode_groups([[(t,)] for t in chunk], model.tokenizer, seq_len,
                                         "input")
    out.append(model.outputs(rows)[:, 0])
    if (first // batch_size) % 50 == 49:
      done = first + batch_size
      logging.info("%d / %d texts (%.0f texts/s)", done, len(texts),
                   done / (time.perf_counter() - t0))
  vectors = np.concatenate(out)[:len(texts)] if out else np.zeros((0, 0), np.float32)
  if normalize and len(vectors):
    vectors /= np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
  return vectors.astype(np.float32)


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
