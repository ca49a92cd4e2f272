"""Preparing data as an Apache Beam pipeline: `python -m mlmjax.prepare ... --runner=beam`.

The same plan, units of work and output as the local path (writer.py), on whatever Beam
runs on: Dataflow, Flink, Spark, or this machine. The pipeline:

    one element --> tokenizer and token statistics, made once in OUT --> side input
    (split, f) for every file --> [reshuffled over workers] --> write the file --> its counts
    counts --> added per split --> all of them --> manifest.json (last)

Each element is one output file, written by writer.FileWriter exactly as a local worker
writes it, so the folder is byte-identical to a local preparation of the same plan. A file is
written under a temporary name and recorded done afterwards: a retried element (a worker lost,
an exception) writes its file again from the start, and an element whose file is recorded done
(a job run again after a failure) only reads its counts back. Progress: Beam counters
(`mlmjax.prepare`: files, documents, tokens) in the runner's job monitor, and a bar here that
counts finished files.

What the workers need: mlmjax (with the `[beam]` extra) and read access to the source and OUT
(a bucket, for a runner on other machines). The splits' document index travels as a file in
OUT/.prepare/, not in the pipeline graph, whose size runners limit.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging as std_logging
import pickle
import shlex
import threading
import time

from absl import logging
import tqdm

from mlmjax import errors
from mlmjax import paths
from mlmjax.data.prepared import writer
from mlmjax.data.prepared import reader
from mlmjax.data.corpora import streamed
from mlmjax.data.text import tokenizer as tokenizer_lib

# Imported only for --runner=beam (mlmjax/prepare.py): the local path needs no Beam. Importing
# it warns on the root logger that BigQuery's client is absent, which nothing here uses.
_root = std_logging.getLogger()
_level, _ = _root.level, _root.setLevel(std_logging.ERROR)
try:
  import apache_beam as beam
  from apache_beam.options import pipeline_options as beam_options
finally:
  _root.setLevel(_level)

_SPLITS_FILE = "splits.pickle"  # in OUT/.prepare/: the splits' documents, for the workers
_COUNTERS = "mlmjax.prepare"  # the Beam counters' namespace
_POLL_S = 2.0  # how often the progress bar counts finished files
# With no --runner among the options: Beam's in-process runner, which retries a failed bundle
# (as Dataflow does) and needs no download (DirectRunner first tries Prism, a Go binary fetched
# from GitHub).
DEFAULT_OPTIONS = "--runner=BundleBasedDirectRunner"


def pipeline_options(text: str) -> "beam_options.PipelineOptions":
  """--beam_pipeline_options as Beam's options, every one checked: an unknown option, a bad
  value or an unknown runner is a one-line error here, not a warning in the log."""
  try:
    flags = shlex.split(text)
  except ValueError as e:
    raise errors.UserError(f"--beam_pipeline_options={text!r}: {e}") from None
  if not any(f == "--runner" or f.startswith("--runner=") for f in flags):
    flags = shlex.split(DEFAULT_OPTIONS) + flags
  options = beam_options.PipelineOptions(flags)
  stderr = io.StringIO()
  quiet = std_logging.getLogger(beam_options.__name__)  # it would warn of what we refuse below
  level = quiet.level
  try:
    quiet.setLevel(std_logging.ERROR)
    with contextlib.redirect_stderr(stderr):  # argparse prints its usage before exiting
      known = options.get_all_options()
      every = options.get_all_options(retain_unknown_options=True)
  except SystemExit:
    message = stderr.getvalue().strip().splitlines()[-1]
    raise errors.UserError(f"--beam_pipeline_options: {message.split('error: ', 1)[-1]}") from None
  finally:
    quiet.setLevel(level)
  unknown = sorted(set(every) - set(known))
  if unknown:
    raise errors.UserError(f"--beam_pipeline_options: unknown Beam option(s)"
                           f" {', '.join('--' + u for u in unknown)}")
  return options


def prepare(plan: writer.Plan, out: str, options_text: str = "") -> dict:
  """Makes (or completes) the prepared folder `out` by `plan` with a Beam pipeline; returns its
  manifest."""
  options = pipeline_options(options_text)
  try:
    pipeline = beam.Pipeline(options=options)
  except ValueError as e:  # an unknown runner, options a runner requires (Dataflow's project...)
    raise errors.UserError(f"--beam_pipeline_options: {' '.join(str(e).split())}") from None
  runner = options.get_all_options()["runner"].rsplit(".", 1)[-1]
  if runner not in beam_options.StandardOptions.LOCAL_RUNNERS:
    _check_remote_workers_can_read(plan, out, runner)
  t0 = time.time()
  out, splits = writer.start(plan, out)
  splits_path = paths.join(out, writer.STATE, _SPLITS_FILE)
  paths.write_atomic(splits_path, pickle.dumps(splits))
  if plan.nlp_pipeline:
    plan.annotator().nlp  # pylint: disable=pointless-statement  # a missing pipeline fails here
  every = writer.files(plan)
  tok = (pipeline | "Once" >> beam.Create([None])
         | "Tokenizer and stats" >> beam.Map(_tokenizer_and_stats, plan, splits_path, out))
  counts = (pipeline | "Files" >> beam.Create(every)
            | "Spread" >> beam.Reshuffle()
            | "Write" >> beam.ParDo(_WriteFile(plan, splits_path, out),
                                    beam.pvalue.AsSingleton(tok))
            | "Add by split" >> beam.CombinePerKey(writer.add_counts)
            | "All" >> beam.combiners.ToDict())
  _ = counts | "Manifest" >> beam.Map(_finish, plan, out, beam.pvalue.AsSingleton(tok), t0)
  logging.info("Preparing %d files per split with Beam (%s)", plan.num_files,
               options.get_all_options()["runner"])
  with _progress(out, every, plan.num_files):
    result = pipeline.run()
    result.wait_until_finish()
  state = str(result.state)
  if not state.endswith("DONE"):
    raise errors.DataError(f"the Beam pipeline ended {state}; its log says why")
  seconds = time.time() - t0
  tokens = _counter(result, "tokens")
  logging.info("Beam tokenized %s tokens in %.1f s (%s tokens/s over all workers, the"
               " tokenizer's making included)", f"{tokens:,}", seconds,
               f"{tokens / seconds:,.0f}")
  return json.loads(paths.read_text(paths.join(out, reader.MANIFEST)))


def _counter(result, name: str) -> int:
  """A counter's total over the workers (committed where the runner tells, else attempted)."""
  query = beam.metrics.MetricsFilter().with_namespace(_COUNTERS).with_name(name)
  return sum(r.result for r in result.metrics().query(query)["counters"])


def _check_remote_workers_can_read(plan: writer.Plan, out: str, runner: str) -> None:
  """A runner on other machines reads the source, the tokenizer and OUT from there: refuse a
  path on this machine now, not in a worker's log after the job started."""
  if plan.source.startswith("tfds:"):
    raise errors.UserError(f"--runner=beam with {runner}: the workers cannot read this"
                           " machine's tfds data; prepare tfds sources with --runner=local")
  named = [("--out", out), ("config.tokenizer.path", plan.tokenizer.path)]
  if plan.source != "builtin":  # the built-in corpus travels in the splits' file
    named += [("--source", part.strip()) for part in plan.source.split(",")]
  for what, path in named:
    if path and not paths.is_remote(path):
      raise errors.UserError(
          f"--runner=beam with {runner} runs on other machines, which cannot read {what}="
          f"{path!r} on this one: put it in a bucket (gs://..., s3://...)")
    if what == "--source" and streamed.needs_copy(path):
      raise errors.UserError(
          f"--runner=beam with {runner}: --source={path!r} is read through a plain copy made on"
          " this machine, which the workers cannot read; give them .txt or .jsonl files")


def _tokenizer_and_stats(_, plan: writer.Plan, splits_path: str, out: str) -> bytes:
  splits = pickle.loads(paths.read_bytes(splits_path))
  return writer.tokenizer_and_stats(plan, splits["train"], out).to_bytes()


class _Counters:
  """`FileWriter.report` in a Beam worker: the runner's counters."""

  def __init__(self):
    self.documents = beam.metrics.Metrics.counter(_COUNTERS, "documents")
    self.tokens = beam.metrics.Metrics.counter(_COUNTERS, "tokens")

  def __call__(self, docs: int, tokens: int) -> None:
    self.documents.inc(docs)
    self.tokens.inc(tokens)


class _WriteFile(beam.DoFn):
  """(split, f) -> (split, the file's counts), the file written (or found done)."""

  def __init__(self, plan: writer.Plan, splits_path: str, out: str):
    self.plan, self.splits_path, self.out = plan, splits_path, out
    self.writer = None

  def setup(self):  # once per worker: the documents and the spaCy pipeline
    self.splits = pickle.loads(paths.read_bytes(self.splits_path))
    self.annotator = self.plan.annotator()
    self.files = beam.metrics.Metrics.counter(_COUNTERS, "files")

  def process(self, task, tokenizer_bytes: bytes):
    split, f = task
    done = writer.done_path(self.out, split, f, self.plan.num_files)
    if paths.exists(done):
      yield split, json.loads(paths.read_text(done))
      return
    if self.writer is None:
      tok = tokenizer_lib.from_bytes(tokenizer_bytes)
      self.writer = writer.FileWriter.of(self.plan, self.splits, tok, self.annotator,
                                              self.out, _Counters())
    t = time.perf_counter()
    _, counts = self.writer(task)
    logging.info("%s: %s documents, %s tokens in %.2f s",
                 reader.file_name(split, f, self.plan.num_files), f"{counts['documents']:,}",
                 f"{counts['tokens']:,}", time.perf_counter() - t)
    self.files.inc()
    yield split, counts


def _finish(counts: dict, plan: writer.Plan, out: str, tokenizer_bytes: bytes,
            t0: float) -> None:
  counts = {s: counts.get(s, {}) for s in reader.SPLITS}
  writer.finish(out, plan, tokenizer_lib.from_bytes(tokenizer_bytes), counts, t0)


@contextlib.contextmanager
def _progress(out: str, every: list, num_files: int):
  """A bar of finished files, read from OUT while the pipeline runs (any runner)."""
  stop = threading.Event()
  names = {reader.file_name(s, f, num_files) + ".json" for s, f in every}
  state = paths.join(out, writer.STATE)

  def watch():
    with tqdm.tqdm(total=len(every), unit=" files", desc="Preparing (Beam)") as bar:
      while True:
        finished = stop.wait(_POLL_S)
        done = (len(every) if paths.exists(paths.join(out, reader.MANIFEST))
                else len(names.intersection(paths.listdir(state))) if paths.exists(state)
                else 0)
        bar.update(done - bar.n)
        if finished:
          return

  thread = threading.Thread(target=watch, daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()
