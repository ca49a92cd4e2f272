"""Sentence embeddings of a fine-tuned embedding model (kind `embedding`): what
`python -m mlmjax.embed` writes."""

from __future__ import annotations

import time

from absl import logging
import numpy as np

from mlmjax import errors
from mlmjax import paths
from mlmjax.finetuning import examples
from mlmjax.finetuning import finished
from mlmjax.finetuning import multiple_choice


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
