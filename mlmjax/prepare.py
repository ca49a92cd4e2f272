"""Tokenizes a corpus once into prepared data (mlmjax/data/prepared.py) that training reads fast.

  python -m mlmjax.prepare --source='corpus/*.txt' --out=data/corpus [--config=configs/tiny.py]
      [--num_files=64] [--workers=N]

then train with `--config.data.source=prepared:data/corpus`. `--source` takes what
`data.source` takes for text (builtin, .txt/.jsonl files and globs, tfds:...). The config
supplies what a run would use to get from that text to tokens: the tokenizer (`tokenizer.path`,
else one trained on the training split with `tokenizer.*`), the held-out split
(`data.eval_every_nth_document`), document cutting (`data.max_document_chars`) and the token
count sample (`masking.stats_max_documents`). Prepared with the config you train with, the
folder gives exactly the batches the text gives.

Worker processes (`--workers`, default: every core) tokenize one output file each at a time; a
progress bar counts documents. The folder appears only when complete (it is written under a
temporary name and renamed).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import time

from absl import app
from absl import flags
from absl import logging
from array_record.python import array_record_module
from ml_collections import config_flags
import tqdm

from mlmjax import errors
from mlmjax.data import documents
from mlmjax.data import prepared
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/base.py", "The config you will train with (its tokenizer, split and"
    " stats settings are used).", lock_config=True)
_SOURCE = flags.DEFINE_string("source", None, "The text to prepare, as data.source takes it.")
_OUT = flags.DEFINE_string("out", None, "The folder to create.")
_NUM_FILES = flags.DEFINE_integer(
    "num_files", 64, "Files per split. The data shards of a run (data.num_shards, or one per"
    " process) must divide it; a multiple of every process count you may use.")
_WORKERS = flags.DEFINE_integer("workers", os.cpu_count() or 1,
                                "Tokenizing processes (0: in this process).")
_VERBOSE = flags.DEFINE_bool("verbose", False, "Show tracebacks for input errors as well.")
flags.mark_flags_as_required(["source", "out"])

_PROGRESS_EVERY = 64  # documents between progress updates from a worker
_worker: dict = {}  # what a worker process tokenizes (set by _init_worker)


def _init_worker(splits, tokenizer_bytes: bytes, out: str, num_files: int, dtype: str,
                 progress) -> None:
  _worker.update(splits=splits, tok=tokenizer_lib.from_bytes(tokenizer_bytes), out=out,
                 num_files=num_files, dtype=dtype, progress=progress)


def _write_file(task: tuple[str, int]) -> tuple[str, dict[str, int]]:
  """Tokenizes documents f, f + F, ... of a split into its file f."""
  split, f = task
  w = _worker
  docs, num_files = w["splits"][split], w["num_files"]
  counts = {"documents": 0, "sentences": 0, "tokens": 0, "empty_documents": 0}
  writer = array_record_module.ArrayRecordWriter(
      os.path.join(w["out"], prepared.file_name(split, f, num_files)), prepared.WRITER_OPTIONS)
  try:
    for n, i in enumerate(range(f, len(docs), num_files), 1):
      sentences = documents.tokenize(w["tok"], docs[i])
      writer.write(prepared.encode_record(sentences, w["dtype"]))
      counts["documents"] += 1
      counts["sentences"] += len(sentences)
      counts["tokens"] += sum(len(s) for s in sentences)
      counts["empty_documents"] += not sentences
      if n % _PROGRESS_EVERY == 0:
        with w["progress"].get_lock():
          w["progress"].value += _PROGRESS_EVERY
  finally:
    writer.close()
  with w["progress"].get_lock():
    w["progress"].value += counts["documents"] % _PROGRESS_EVERY
  return split, counts


def _tokenize(splits: dict, tok, out: str, num_files: int, workers: int) -> dict:
  """Writes every file of every split; returns the counts per split."""
  ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited threads
  progress = ctx.Value("q", 0)
  args = (splits, tok.to_bytes(), out, num_files, prepared.id_dtype(tok.vocab_size), progress)
  tasks = [(split, f) for split in splits for f in range(num_files)]
  total = sum(len(docs) for docs in splits.values())
  totals = {s: {} for s in splits}
  with tqdm.tqdm(total=total, unit=" documents", desc="Tokenizing", smoothing=0.1) as bar:
    if workers == 0:
      _init_worker(*args)
      results = []
      for task in tasks:
        results.append(_write_file(task))
        bar.update(progress.value - bar.n)
    else:
      with ctx.Pool(workers, _init_worker, args) as pool:
        pending = pool.map_async(_write_file, tasks, chunksize=1)
        while not pending.ready():
          pending.wait(0.2)
          bar.update(progress.value - bar.n)
        results = pending.get()
      bar.update(progress.value - bar.n)
  for split, counts in results:
    for k, v in counts.items():
      totals[split][k] = totals[split].get(k, 0) + v
  return totals


def prepare(config, source: str, out: str, num_files: int = 64,
            workers: int = 0) -> dict:
  """Makes the prepared folder `out` from `source`; returns its manifest."""
  if prepared.is_prepared(source):
    raise errors.DataError(f"--source={source!r} is prepared already; give the text it came"
                           " from")
  if num_files < 1 or workers < 0:
    raise errors.UserError("--num_files must be >= 1 and --workers >= 0")
  if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
    raise errors.UserError(f"--out={out} exists and is not an empty folder; remove it or choose"
                           " another")
  start = time.perf_counter()
  d = config.data
  train, held_out = sources.load_splits(source, d.eval_every_nth_document, d.max_document_chars,
                                        d.text_field)
  logging.info("Data %r: %d training / %d held-out documents", source, len(train),
               len(held_out))
  tmp = f"{out.rstrip(os.sep)}.partial-{os.getpid()}"
  os.makedirs(tmp)
  try:
    tok = tokenizer_lib.get_tokenizer(
        config.tokenizer, train, {k: os.path.join(tmp, n) for k, n in prepared.TOKENIZERS.items()})
    logging.info("Counting tokens of up to %d documents for vocab stats...",
                 config.masking.stats_max_documents)
    vocab_stats.save(vocab_stats.compute(tok, train, config.masking.stats_max_documents),
                     os.path.join(tmp, prepared.STATS))
    logging.info("Tokenizing into %d files per split with %d worker processes", num_files,
                 workers)
    counts = _tokenize({"train": train, "eval": held_out}, tok, tmp, num_files, workers)
    manifest = {
        "format": prepared.FORMAT, "version": prepared.VERSION, "source": source,
        "tokenizer": {"fingerprint": prepared.fingerprint(tok), "vocab_size": tok.vocab_size},
        "eval_every_nth_document": d.eval_every_nth_document,
        "max_document_chars": d.max_document_chars,
        "stats_max_documents": config.masking.stats_max_documents,
        "num_files": num_files, "id_dtype": prepared.id_dtype(tok.vocab_size),
        "splits": counts,
    }
    with open(os.path.join(tmp, prepared.MANIFEST), "w", encoding="utf-8") as f:
      json.dump(manifest, f, indent=2)
    if os.path.isdir(out):
      os.rmdir(out)  # empty (checked above)
    os.replace(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  tokens = sum(c["tokens"] for c in counts.values())
  logging.info("Prepared %s: %s training / %s held-out documents, %s tokens, tokenizer %s (%s"
               " pieces), in %.1f s", out, f"{counts['train']['documents']:,}",
               f"{counts['eval']['documents']:,}", f"{tokens:,}",
               manifest["tokenizer"]["fingerprint"], f"{tok.vocab_size:,}",
               time.perf_counter() - start)
  return manifest


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  try:
    config = _CONFIG.value
    config.keys()  # the first use: where config_flags reports a file it could not load
  except OSError as e:
    print(f"error: cannot load --config: {str(e).strip().splitlines()[-1].strip()}",
          file=sys.stderr)
    sys.exit(1)
  with errors.reported_in_one_line(_VERBOSE.value):
    prepare(config, _SOURCE.value, _OUT.value, _NUM_FILES.value, _WORKERS.value)


if __name__ == "__main__":
  app.run(main)
