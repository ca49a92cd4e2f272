"""Preparing data: a corpus tokenized once into the prepared format (reader.py, which also
writes and reads its manifest). `python -m mlmjax.prepare` is the command.

What the output depends on is the `Plan`, made once from the settings a run will train with: the
tokenizer (`tokenizer.path`, else one trained on an even sample of the training split with
`tokenizer.*`), the held-out split (`data.eval_every_nth_document`), document cutting
(`data.max_document_chars`), the text field (`data.text_field`), the token count sample
(`masking.stats_max_documents`) and, when the masking strategy reads word annotations, the
spaCy pipeline (`masking.nlp_pipeline`: annotation.py), run here once so that training pays
nothing for it. Prepared with the config you train with, the folder gives
exactly the batches the text gives.

Work and memory. The unit of work is one output file (documents f, f + F, ... of a split):
worker processes tokenize one file each at a time, holding one document and the writer's
buffer, so memory does not grow with the corpus (beyond the text index: 28 bytes per document,
text_files.py). A progress bar shows documents, tokens/s and the ETA.

Resuming. A finished file is recorded in OUT/.prepare/ (its counts); killed and run again with
the same plan, prepare keeps the tokenizer, stats and finished files and redoes only the others
(a file cut short by the kill is written again from its start), so the result is
byte-identical to an uninterrupted run. manifest.json is written last, once every file is done;
until then OUT is not prepared data (training refuses it).

Across machines. With `num_hosts=H, host_index=h` (every host the same plan and OUT, on a shared
disk or a bucket): host 0 makes the tokenizer and stats, the others wait for them (at most
`host_wait_s`); host h writes the files (split, f) of index h, h + H, ... in the task list;
whichever host finishes the last file writes the manifest. On more machines than that, with
retries and a job monitor: the same files as an Apache Beam pipeline (beam.py).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import tempfile
import time
from typing import Callable

from absl import logging
from array_record.python import array_record_module
import tqdm

from mlmjax import errors
from mlmjax import paths
from mlmjax.data.text import annotation
from mlmjax.data.text import documents
from mlmjax.data.prepared import reader
from mlmjax.data.text import sentences as sentences_lib
from mlmjax.data.corpora import sources
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.data.text import vocab_stats
from mlmjax.data.text.settings import TokenizerSettings

_PROGRESS_EVERY = 64  # documents between progress updates from a worker
_NLP_BATCH = 64  # documents spaCy parses at a time
STATE = ".prepare"  # OUT/.prepare/: the plan and one record per finished file
_POLL_S = 5.0  # how often a host other than 0 looks for the tokenizer
HOST_WAIT_S = 3600.0  # how long it looks before it gives up: host 0 may train a tokenizer


@dataclasses.dataclass(frozen=True)
class Plan:
  """What the output depends on: a resumed or parallel preparation must agree on all of it."""

  source: str
  text_field: str
  eval_every_nth_document: int
  max_document_chars: int
  stats_max_documents: int
  num_files: int
  tokenizer: TokenizerSettings  # the path of a model to use, or how to train one
  nlp_pipeline: str  # the spaCy pipeline that annotates words (annotation.py); '' = none

  def annotator(self) -> annotation.Annotator | None:
    return annotation.Annotator(self.nlp_pipeline) if self.nlp_pipeline else None

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


@dataclasses.dataclass
class FileWriter:
  """What a worker writes files with: made once per worker process (by the pool's
  initializer, `_start_worker`, or by the Beam runner's DoFn: beam.py), then called
  once per file."""

  splits: dict[str, sources.TextSource]
  tok: tokenizer_lib.Tokenizer
  annotator: annotation.Annotator | None
  out: str
  num_files: int
  dtype: str
  report: Callable[[int, int], None]  # (documents, tokens) done since the last report

  @classmethod
  def of(cls, plan: Plan, splits: dict, tok, annotator, out: str,
         report: Callable[[int, int], None]) -> "FileWriter":
    return cls(splits, tok, annotator, out, plan.num_files, reader.id_dtype(tok.vocab_size),
               report)

  def __call__(self, task: tuple[str, int]) -> tuple[str, dict[str, int]]:
    """Tokenizes documents f, f + F, ... of a split into its file f, then records it done."""
    split, f = task
    docs, out = self.splits[split], self.out
    name = reader.file_name(split, f, self.num_files)
    counts = {"documents": 0, "sentences": 0, "tokens": 0, "empty_documents": 0}
    # Written under a temporary name (local) or locally and uploaded (bucket): a kill never
    # leaves a file that looks complete.
    tmp_dir = tempfile.mkdtemp(prefix="mlmjax-prepare-") if paths.is_remote(out) else None
    tmp = os.path.join(tmp_dir or os.path.join(out, STATE), name + ".partial")
    writer = array_record_module.ArrayRecordWriter(tmp, reader.WRITER_OPTIONS)
    pending_docs = pending_tokens = 0
    try:
      for sentences in self._tokenized(docs, range(f, len(docs), self.num_files)):
        writer.write(reader.encode_record(sentences, self.dtype))
        n_tokens = sum(len(s) for s in sentences)
        counts["documents"] += 1
        counts["sentences"] += len(sentences)
        counts["tokens"] += n_tokens
        counts["empty_documents"] += not sentences
        pending_docs, pending_tokens = pending_docs + 1, pending_tokens + n_tokens
        if pending_docs == _PROGRESS_EVERY:
          self.report(pending_docs, pending_tokens)
          pending_docs = pending_tokens = 0
    finally:
      writer.close()
    self.report(pending_docs, pending_tokens)
    if tmp_dir:
      try:
        paths.upload(tmp, paths.join(out, name))
      finally:
        os.remove(tmp)
        os.rmdir(tmp_dir)
    else:
      os.replace(tmp, os.path.join(out, name))
    paths.write_atomic(done_path(out, split, f, self.num_files), json.dumps(counts))
    return split, counts

  def _tokenized(self, docs, indices):
    """The documents' sentences, tokenized (documents.py); annotated by spaCy's batched
    `nlp.pipe` when there is an annotator."""
    if self.annotator is None:
      yield from (documents.tokenize(self.tok, docs[i]) for i in indices)
      return
    split = (sentences_lib.split_sentences(docs[i]) for i in indices)
    pairs = ((self.annotator.text(s), s) for s in split)
    for doc, sentences in self.annotator.nlp.pipe(pairs, as_tuples=True,
                                                  batch_size=_NLP_BATCH):
      yield documents.annotated(self.tok, self.annotator, sentences, doc)


@dataclasses.dataclass(frozen=True)
class _SharedCounts:
  """`FileWriter.report` for local workers: counters in shared memory that the parent's progress
  bar reads."""

  documents: object  # a multiprocessing Value
  tokens: object

  def __call__(self, docs: int, tokens: int) -> None:
    for counter, n in ((self.documents, docs), (self.tokens, tokens)):
      with counter.get_lock():
        counter.value += n


# A pool's worker calls functions by name, so the writer its initializer made lives here: one
# per worker process (None in the parent, which uses its own writer when workers=0).
_process_writer: FileWriter | None = None


def _start_worker(plan: Plan, splits, tokenizer_bytes: bytes, *rest) -> None:
  global _process_writer
  _process_writer = FileWriter.of(plan, splits, tokenizer_lib.from_bytes(tokenizer_bytes), *rest)


def _write_in_worker(task: tuple[str, int]) -> tuple[str, dict[str, int]]:
  return _process_writer(task)


def done_path(out: str, split: str, f: int, num_files: int) -> str:
  """Where a finished file's counts are recorded (its `FileWriter` call's result)."""
  return paths.join(out, STATE, reader.file_name(split, f, num_files) + ".json")


def _tokenize(plan: Plan, splits: dict, tok, annotator, out: str, workers: int, tasks: list,
              total: int, done_docs: int) -> None:
  """Writes the files of `tasks`, showing documents, tokens/s and the ETA."""
  ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited threads
  progress, tokens = ctx.Value("q", done_docs), ctx.Value("q", 0)
  report = _SharedCounts(progress, tokens)
  start = time.perf_counter()

  def update(bar):
    bar.update(progress.value - bar.n)
    bar.set_postfix_str(f"{tokens.value / max(time.perf_counter() - start, 1e-9):,.0f} tokens/s",
                        refresh=False)

  with tqdm.tqdm(total=total, initial=done_docs, unit=" documents", desc="Tokenizing",
                 smoothing=0.1) as bar:
    if workers == 0:
      write = FileWriter.of(plan, splits, tok, annotator, out, report)
      for task in tasks:
        write(task)
        update(bar)
    else:
      fields = (plan, splits, tok.to_bytes(), annotator, out, report)
      with ctx.Pool(workers, _start_worker, fields) as pool:
        pending = pool.map_async(_write_in_worker, tasks, chunksize=1)
        while not pending.ready():
          pending.wait(0.2)
          update(bar)
        pending.get()
      update(bar)
  seconds = time.perf_counter() - start
  logging.info("Tokenized %s tokens in %.1f s (%s tokens/s)", f"{tokens.value:,}", seconds,
               f"{tokens.value / max(seconds, 1e-9):,.0f}")


def _start_or_resume(out: str, plan: Plan) -> None:
  """Creates OUT/.prepare/plan.json, or checks that a preparation already there is this one."""
  plan_path = paths.join(out, STATE, "plan.json")
  text = plan.to_json()
  if paths.exists(paths.join(out, reader.MANIFEST)) or (
      paths.exists(out) and not paths.exists(plan_path)
      and (not paths.isdir(out) or paths.listdir(out))):
    raise errors.UserError(f"--out={out} exists and is not an empty folder; remove it or choose"
                           " another")
  paths.makedirs(paths.join(out, STATE))
  if paths.exists(plan_path):
    if paths.read_text(plan_path) != text:
      raise errors.UserError(
          f"--out={out} holds an unfinished preparation with other settings (see"
          f" {plan_path}); run it with those, or remove the folder")
    return
  paths.write_atomic(plan_path, text)  # two hosts at once write the same text


def tokenizer_and_stats(plan: Plan, train, out: str):
  """Makes the tokenizer and token statistics in OUT (or, resumed, reloads them)."""
  saved = {k: paths.join(out, n) for k, n in reader.TOKENIZERS.items()}
  tok = tokenizer_lib.get_tokenizer(plan.tokenizer, train, saved)
  vocab_stats.get_vocab_stats(tok, train, paths.join(out, reader.STATS),
                              plan.stats_max_documents)
  return tok


def _wait_for_tokenizer(out: str, host_index: int, host_wait_s: float):
  """What hosts other than 0 do instead: wait for host 0's tokenizer and stats, then load it."""
  stats_path = paths.join(out, reader.STATS)
  logging.info("Waiting for host 0 to write %s", stats_path)
  deadline = time.monotonic() + host_wait_s
  while not paths.exists(stats_path):  # written after the tokenizer
    if time.monotonic() >= deadline:
      waited = f"{host_wait_s / 60:g} min" if host_wait_s >= 60 else f"{host_wait_s:g} s"
      raise errors.UserError(
          f"host {host_index}: host 0 has not written {stats_path} in {waited}"
          " (--host_wait_minutes); run the same command with --host_index=0 (its log says"
          " what it is doing), then run this one again")
    time.sleep(min(_POLL_S, max(deadline - time.monotonic(), 0.0)))
  saved = (paths.join(out, n) for n in reader.TOKENIZERS.values())
  return tokenizer_lib.load(next(p for p in saved if paths.exists(p)))


def start(plan: Plan, out: str, workers: int = 0, num_hosts: int = 1,
          host_index: int = 0) -> tuple[str, dict]:
  """Checks the request, then creates (or checks, resuming) OUT's plan; returns OUT as a
  path and the splits {"train": ..., "eval": ...} to prepare."""
  source = plan.source
  if reader.is_prepared(source):
    raise errors.DataError(f"--source={source!r} is prepared already; give the text it came"
                           " from")
  if plan.num_files < 1 or workers < 0:
    raise errors.UserError("--num_files must be >= 1 and --workers >= 0")
  if not 0 <= host_index < num_hosts:
    raise errors.UserError(f"--host_index={host_index} must be in [0, --num_hosts={num_hosts})")
  out = paths.expand(out).rstrip("/")
  train, held_out = sources.load_splits(source, plan.eval_every_nth_document,
                                        plan.max_document_chars, plan.text_field)
  logging.info("Data %r: %d training / %d held-out documents", source, len(train),
               len(held_out))
  _start_or_resume(out, plan)
  return out, {"train": train, "eval": held_out}


def files(plan: Plan) -> list[tuple[str, int]]:
  """Every unit of work: (split, f) for file f of each split."""
  return [(s, f) for s in reader.SPLITS for f in range(plan.num_files)]


def prepare(plan: Plan, out: str, workers: int = 0, num_hosts: int = 1, host_index: int = 0,
            host_wait_s: float = HOST_WAIT_S) -> dict | None:
  """Makes (or resumes) the prepared folder `out` by `plan`; returns its manifest, or None
  on a host whose part is done while others' are not."""
  t0 = time.time()
  out, splits = start(plan, out, workers, num_hosts, host_index)
  if host_index == 0:
    tok = tokenizer_and_stats(plan, splits["train"], out)
  else:
    tok = _wait_for_tokenizer(out, host_index, host_wait_s)
  num_files, every = plan.num_files, files(plan)
  mine = every[host_index::num_hosts]
  todo = [t for t in mine if not paths.exists(done_path(out, *t, num_files))]
  docs_of = lambda tasks: sum(len(range(f, len(splits[s]), num_files)) for s, f in tasks)
  logging.info("Tokenizing into %d files per split with %d worker processes%s", num_files,
               workers, f" (host {host_index} of {num_hosts}: {len(mine)} files)"
               if num_hosts > 1 else "")
  if len(todo) < len(mine):
    logging.info("Resuming: %d of %d files are done already", len(mine) - len(todo), len(mine))
  if todo:
    annotator = plan.annotator()
    if annotator is not None:
      annotator.nlp  # pylint: disable=pointless-statement  # a missing pipeline fails here
      logging.info("Annotating words with spaCy pipeline %r", plan.nlp_pipeline)
    _tokenize(plan, splits, tok, annotator, out, workers, todo, total=docs_of(mine),
              done_docs=docs_of(mine) - docs_of(todo))
  counts = _every_file_s_counts(out, every, num_files)
  if counts is None:
    if paths.exists(paths.join(out, reader.MANIFEST)):
      logging.info("Another host finished %s at the same time as this one", out)
    else:
      logging.info("This host's files are done; %s waits for other hosts' files", out)
    return None
  return finish(out, plan, tok, counts, t0)


def _every_file_s_counts(out: str, every: list, num_files: int) -> dict | None:
  """The counts of all files by split, or None while some host's files are not done. Also
  None when another host, done at the same moment, has removed .prepare/ already: the last
  hosts race to finish, and either may win (same manifest)."""
  counts = {s: {} for s in reader.SPLITS}
  try:
    for s, f in every:
      done = json.loads(paths.read_text(done_path(out, s, f, num_files)))
      counts[s] = add_counts([counts[s], done])
  except FileNotFoundError:
    return None
  return counts


def add_counts(counts) -> dict[str, int]:
  """The sum of several files' counts ({"documents": n, ...}; {} adds nothing)."""
  total = {}
  for c in counts:
    for k, v in c.items():
      total[k] = total.get(k, 0) + v
  return total


def finish(out: str, plan: Plan, tok, counts: dict, t0: float) -> dict:
  """Writes the manifest (the folder is prepared data from then on) from every file's counts
  added by split; returns it. `t0`: when the preparation started, by the wall clock (`time.time`:
  a Beam worker may write the manifest for a job started on another machine)."""
  manifest = reader.write_manifest(
      out, source=plan.source, tok=tok, eval_every_nth_document=plan.eval_every_nth_document,
      max_document_chars=plan.max_document_chars,
      stats_max_documents=plan.stats_max_documents, num_files=plan.num_files,
      counts={s: counts[s] for s in reader.SPLITS}, nlp_pipeline=plan.nlp_pipeline)
  paths.rmtree(paths.join(out, STATE))
  tokens = sum(c["tokens"] for c in counts.values())
  logging.info("Prepared %s: %s training / %s held-out documents, %s tokens, tokenizer %s (%s"
               " pieces), in %.1f s", out, f"{counts['train']['documents']:,}",
               f"{counts['eval']['documents']:,}", f"{tokens:,}",
               manifest["tokenizer"]["fingerprint"], f"{tok.vocab_size:,}",
               time.time() - t0)
  return manifest
