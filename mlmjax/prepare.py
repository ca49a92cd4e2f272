"""Tokenizes a corpus once into prepared data (mlmjax/data/prepared.py) that training reads fast.

  python -m mlmjax.prepare --source='corpus/*.txt' --out=data/corpus [--config=configs/tiny.py]
      [--num_files=64] [--workers=N] [--num_hosts=H --host_index=h]

then train with `--config.data.source=prepared:data/corpus`. `--source` takes what
`data.source` takes for text (builtin, .txt/.jsonl files, compressed, parquet, datasets folders,
globs, in buckets too, tfds:...); `--out` may be a bucket folder (gs://, s3://). The config
supplies what a run would use to get from that text to tokens: the tokenizer (`tokenizer.path`,
else one trained on an even sample of the training split with `tokenizer.*`), the held-out split
(`data.eval_every_nth_document`), document cutting (`data.max_document_chars`), the text field
(`data.text_field`) and the token count sample (`masking.stats_max_documents`). Prepared with
the config you train with, the folder gives exactly the batches the text gives.

Work and memory. The unit of work is one output file (documents f, f + F, ... of a split):
worker processes (`--workers`, default: every core) tokenize one file each at a time, holding
one document and the writer's buffer, so memory does not grow with the corpus (beyond the text
index: 28 bytes per document, text_files.py). A progress bar shows documents, tokens/s and the
ETA.

Resuming. A finished file is recorded in OUT/.prepare/ (its counts); killed and run again with
the same command, prepare keeps the tokenizer, stats and finished files and redoes only the
others (a file cut short by the kill is written again from its start), so the result is
byte-identical to an uninterrupted run. manifest.json is written last, once every file is
done; until then OUT is not prepared data (training refuses it).

Across machines. `--num_hosts=H --host_index=h` (every host the same command and --out, on a
shared disk or a bucket): host 0 makes the tokenizer and stats, the others wait for them; host
h writes the files (split, f) of index h, h + H, ... in the task list; whichever host finishes
the last file writes the manifest.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
from array_record.python import array_record_module
from ml_collections import config_flags
import tqdm

from mlmjax import errors
from mlmjax.data import documents
from mlmjax.data import paths
from mlmjax.data import prepared
from mlmjax.data import sources
from mlmjax.data import tokenizer as tokenizer_lib
from mlmjax.data import vocab_stats

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/base.py", "The config you will train with (its tokenizer, split and"
    " stats settings are used).", lock_config=True)
_SOURCE = flags.DEFINE_string("source", None, "The text to prepare, as data.source takes it.")
_OUT = flags.DEFINE_string("out", None, "The folder to create (or to resume).")
_NUM_FILES = flags.DEFINE_integer(
    "num_files", 64, "Files per split. The data shards of a run (data.num_shards, or one per"
    " process) must divide it; a multiple of every process count you may use.")
_WORKERS = flags.DEFINE_integer("workers", os.cpu_count() or 1,
                                "Tokenizing processes (0: in this process).")
_NUM_HOSTS = flags.DEFINE_integer("num_hosts", 1, "Machines preparing the same --out together.")
_HOST_INDEX = flags.DEFINE_integer("host_index", 0, "This machine's index among --num_hosts.")
_VERBOSE = flags.DEFINE_bool("verbose", False, "Show tracebacks for input errors as well.")
flags.mark_flags_as_required(["source", "out"])

_PROGRESS_EVERY = 64  # documents between progress updates from a worker
_STATE = ".prepare"  # OUT/.prepare/: the plan and one record per finished file
_WAIT_S = 5.0  # how often a host other than 0 looks for the tokenizer
_worker: dict = {}  # what a worker process tokenizes (set by _init_worker)


def _init_worker(splits, tokenizer_bytes: bytes, out: str, num_files: int, dtype: str,
                 progress, tokens) -> None:
  _worker.update(splits=splits, tok=tokenizer_lib.from_bytes(tokenizer_bytes), out=out,
                 num_files=num_files, dtype=dtype, progress=progress, tokens=tokens)


def _done_path(out: str, split: str, f: int, num_files: int) -> str:
  return paths.join(out, _STATE, prepared.file_name(split, f, num_files) + ".json")


def _write_file(task: tuple[str, int]) -> tuple[str, dict[str, int]]:
  """Tokenizes documents f, f + F, ... of a split into its file f, then records it done."""
  split, f = task
  w = _worker
  docs, num_files, out = w["splits"][split], w["num_files"], w["out"]
  name = prepared.file_name(split, f, num_files)
  counts = {"documents": 0, "sentences": 0, "tokens": 0, "empty_documents": 0}
  # Written under a temporary name (local) or locally and uploaded (bucket): a kill never
  # leaves a file that looks complete.
  tmp_dir = tempfile.mkdtemp(prefix="mlmjax-prepare-") if paths.is_remote(out) else None
  tmp = os.path.join(tmp_dir or os.path.join(out, _STATE), name + ".partial")
  writer = array_record_module.ArrayRecordWriter(tmp, prepared.WRITER_OPTIONS)
  pending_docs = pending_tokens = 0
  try:
    for i in range(f, len(docs), num_files):
      sentences = documents.tokenize(w["tok"], docs[i])
      writer.write(prepared.encode_record(sentences, w["dtype"]))
      n_tokens = sum(len(s) for s in sentences)
      counts["documents"] += 1
      counts["sentences"] += len(sentences)
      counts["tokens"] += n_tokens
      counts["empty_documents"] += not sentences
      pending_docs, pending_tokens = pending_docs + 1, pending_tokens + n_tokens
      if pending_docs == _PROGRESS_EVERY:
        _report(pending_docs, pending_tokens)
        pending_docs = pending_tokens = 0
  finally:
    writer.close()
  _report(pending_docs, pending_tokens)
  if tmp_dir:
    try:
      paths.upload(tmp, paths.join(out, name))
    finally:
      os.remove(tmp)
      os.rmdir(tmp_dir)
  else:
    os.replace(tmp, os.path.join(out, name))
  paths.write_atomic(_done_path(out, split, f, num_files), json.dumps(counts))
  return split, counts


def _report(docs: int, tokens: int) -> None:
  for counter, n in ((_worker["progress"], docs), (_worker["tokens"], tokens)):
    with counter.get_lock():
      counter.value += n


def _tokenize(splits: dict, tok, out: str, num_files: int, workers: int, tasks: list,
              total: int, done_docs: int) -> None:
  """Writes the files of `tasks`, showing documents, tokens/s and the ETA."""
  ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited threads
  progress, tokens = ctx.Value("q", done_docs), ctx.Value("q", 0)
  args = (splits, tok.to_bytes(), out, num_files, prepared.id_dtype(tok.vocab_size), progress,
          tokens)
  start = time.perf_counter()

  def update(bar):
    bar.update(progress.value - bar.n)
    bar.set_postfix_str(f"{tokens.value / max(time.perf_counter() - start, 1e-9):,.0f} tokens/s",
                        refresh=False)

  with tqdm.tqdm(total=total, initial=done_docs, unit=" documents", desc="Tokenizing",
                 smoothing=0.1) as bar:
    if workers == 0:
      _init_worker(*args)
      for task in tasks:
        _write_file(task)
        update(bar)
    else:
      with ctx.Pool(workers, _init_worker, args) as pool:
        pending = pool.map_async(_write_file, tasks, chunksize=1)
        while not pending.ready():
          pending.wait(0.2)
          update(bar)
        pending.get()
      update(bar)
  seconds = time.perf_counter() - start
  logging.info("Tokenized %s tokens in %.1f s (%s tokens/s)", f"{tokens.value:,}", seconds,
               f"{tokens.value / max(seconds, 1e-9):,.0f}")


def _plan(config, source: str, num_files: int) -> dict:
  """What the output depends on: a resumed or parallel preparation must agree on all of it."""
  d, t = config.data, config.tokenizer
  return {"source": source, "text_field": d.text_field,
          "eval_every_nth_document": d.eval_every_nth_document,
          "max_document_chars": d.max_document_chars,
          "stats_max_documents": config.masking.stats_max_documents, "num_files": num_files,
          "tokenizer": t.to_dict()}


def _start_or_resume(out: str, plan: dict) -> None:
  """Creates OUT/.prepare/plan.json, or checks that a preparation already there is this one."""
  plan_path = paths.join(out, _STATE, "plan.json")
  text = json.dumps(plan, indent=2, sort_keys=True)
  if paths.exists(paths.join(out, prepared.MANIFEST)) or (
      paths.exists(out) and not paths.exists(plan_path)
      and (not paths.isdir(out) or paths.listdir(out))):
    raise errors.UserError(f"--out={out} exists and is not an empty folder; remove it or choose"
                           " another")
  paths.makedirs(paths.join(out, _STATE))
  if paths.exists(plan_path):
    if paths.read_text(plan_path) != text:
      raise errors.UserError(
          f"--out={out} holds an unfinished preparation with other settings (see"
          f" {plan_path}); run it with those, or remove the folder")
    return
  paths.write_atomic(plan_path, text)  # two hosts at once write the same text


def _tokenizer_and_stats(config, train, out: str, host_index: int):
  """Host 0 makes (or, resumed, reloads) them in OUT; the other hosts wait for them."""
  saved = {k: paths.join(out, n) for k, n in prepared.TOKENIZERS.items()}
  stats_path = paths.join(out, prepared.STATS)
  if host_index != 0:
    logging.info("Waiting for host 0 to write %s", stats_path)
    while not paths.exists(stats_path):  # written after the tokenizer
      time.sleep(_WAIT_S)
    tok = tokenizer_lib.load(next(p for p in saved.values() if paths.exists(p)))
    return tok
  tok = tokenizer_lib.get_tokenizer(config.tokenizer, train, saved)
  vocab_stats.get_vocab_stats(tok, train, stats_path, config.masking.stats_max_documents)
  return tok


def prepare(config, source: str, out: str, num_files: int = 64, workers: int = 0,
            num_hosts: int = 1, host_index: int = 0) -> dict | None:
  """Makes (or resumes) the prepared folder `out` from `source`; returns its manifest, or None
  on a host whose part is done while others' are not."""
  if prepared.is_prepared(source):
    raise errors.DataError(f"--source={source!r} is prepared already; give the text it came"
                           " from")
  if num_files < 1 or workers < 0:
    raise errors.UserError("--num_files must be >= 1 and --workers >= 0")
  if not 0 <= host_index < num_hosts:
    raise errors.UserError(f"--host_index={host_index} must be in [0, --num_hosts={num_hosts})")
  out = paths.expand(out).rstrip("/")
  start = time.perf_counter()
  d = config.data
  train, held_out = sources.load_splits(source, d.eval_every_nth_document, d.max_document_chars,
                                        d.text_field)
  logging.info("Data %r: %d training / %d held-out documents", source, len(train),
               len(held_out))
  _start_or_resume(out, _plan(config, source, num_files))
  tok = _tokenizer_and_stats(config, train, out, host_index)
  splits = {"train": train, "eval": held_out}
  every = [(s, f) for s in prepared.SPLITS for f in range(num_files)]
  mine = every[host_index::num_hosts]
  todo = [t for t in mine if not paths.exists(_done_path(out, *t, num_files))]
  docs_of = lambda tasks: sum(len(range(f, len(splits[s]), num_files)) for s, f in tasks)
  logging.info("Tokenizing into %d files per split with %d worker processes%s", num_files,
               workers, f" (host {host_index} of {num_hosts}: {len(mine)} files)"
               if num_hosts > 1 else "")
  if len(todo) < len(mine):
    logging.info("Resuming: %d of %d files are done already", len(mine) - len(todo), len(mine))
  if todo:
    _tokenize(splits, tok, out, num_files, workers, todo, total=docs_of(mine),
              done_docs=docs_of(mine) - docs_of(todo))
  return _finish(out, source, tok, config, num_files, every, start)


def _finish(out, source, tok, config, num_files, every, start) -> dict | None:
  """The manifest, once every host's files are done (written by whoever sees that first)."""
  counts = {s: {} for s in prepared.SPLITS}
  for s, f in every:
    done = _done_path(out, s, f, num_files)
    if not paths.exists(done):
      logging.info("This host's files are done; %s waits for other hosts' files", out)
      return None
    for k, v in json.loads(paths.read_text(done)).items():
      counts[s][k] = counts[s].get(k, 0) + v
  d = config.data
  manifest = {
      "format": prepared.FORMAT, "version": prepared.VERSION, "source": source,
      "tokenizer": {"fingerprint": prepared.fingerprint(tok), "vocab_size": tok.vocab_size},
      "eval_every_nth_document": d.eval_every_nth_document,
      "max_document_chars": d.max_document_chars,
      "stats_max_documents": config.masking.stats_max_documents,
      "num_files": num_files, "id_dtype": prepared.id_dtype(tok.vocab_size),
      "splits": counts,
  }
  paths.write_atomic(paths.join(out, prepared.MANIFEST), json.dumps(manifest, indent=2))
  paths.rmtree(paths.join(out, _STATE))
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
    prepare(config, _SOURCE.value, _OUT.value, _NUM_FILES.value, _WORKERS.value,
            _NUM_HOSTS.value, _HOST_INDEX.value)


if __name__ == "__main__":
  app.run(main)
