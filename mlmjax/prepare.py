"""Tokenizes a corpus once into prepared data (mlmjax/data/prepared/) that training reads fast.

  python -m mlmjax.prepare --source='corpus/*.txt' --out=data/corpus [--config=tiny]
      [--num_files=64] [--workers=N] [--num_hosts=H --host_index=h]
      [--runner=beam --beam_pipeline_options="--runner=DataflowRunner --project=..."]

then train with `--config.data.source=prepared:data/corpus`. `--source` takes what
`data.source` takes for text (builtin, .txt/.jsonl files, compressed, parquet, datasets folders,
globs, in buckets too, tfds:...); `--out` may be a bucket folder (gs://, s3://). The config
supplies what a run would use to get from that text to tokens (its tokenizer, held-out split,
document cutting, text field and token count sample): prepared with the config you train with,
the folder gives exactly the batches the text gives.

Killed and run again with the same command, it resumes (the result is byte-identical); with
`--num_hosts=H --host_index=h` every host runs the same command on its part, host 0 first
making the tokenizer (the others wait for it, at most `--host_wait_minutes`). How:
mlmjax/data/prepared/writer.py. With `--runner=beam` the same work is an Apache Beam pipeline
(Dataflow, Flink, Spark; pip install -e '.[beam]') whose output is byte-identical:
mlmjax/data/prepared/beam.py.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import os

from absl import flags

from mlmjax import cli
from mlmjax import errors
from mlmjax.data import run_input
from mlmjax.data.prepared import writer
from mlmjax.training.run_settings import RunSettings

_CONFIG = cli.define_config_file(
    "config", "base", "The config you will train with (its tokenizer, split and"
    " stats settings are used).")
_SOURCE = flags.DEFINE_string("source", None, "The text to prepare, as data.source takes it.")
_OUT = flags.DEFINE_string("out", None, "The folder to create (or to resume).")
_NUM_FILES = flags.DEFINE_integer(
    "num_files", 64, "Files per split. The data shards of a run (data.num_shards, or one per"
    " process) must divide it; a multiple of every process count you may use.")
_WORKERS = flags.DEFINE_integer("workers", os.cpu_count() or 1,
                                "Tokenizing processes (0: in this process).")
_NUM_HOSTS = flags.DEFINE_integer("num_hosts", 1, "Machines preparing the same --out together.")
_HOST_INDEX = flags.DEFINE_integer("host_index", 0, "This machine's index among --num_hosts.")
_HOST_WAIT = flags.DEFINE_float(
    "host_wait_minutes", writer.HOST_WAIT_S / 60, "How long a host other than 0 waits"
    " for host 0's tokenizer before it stops with an error.")
_RUNNER = flags.DEFINE_enum(
    "runner", "local", ["local", "beam"], "local: --workers processes on this machine (and"
    " --num_hosts machines); beam: an Apache Beam pipeline, run where --beam_pipeline_options"
    " says.")
_BEAM_OPTIONS = flags.DEFINE_string(
    "beam_pipeline_options", "", "With --runner=beam: Beam's pipeline options, as one string"
    " (e.g. \"--runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp"
    " --setup_file=./setup.py\"). No --runner there: Beam's BundleBasedDirectRunner (this"
    " machine, one process).")


def _beam():
  """data/prepared/beam.py, imported only when asked for: the local path needs no Beam."""
  try:
    from mlmjax.data.prepared import beam  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError as e:
    if e.name != "apache_beam":
      raise
    raise errors.UserError("--runner=beam needs Apache Beam: pip install -e '.[beam]'") from None
  return beam


def main(argv):
  del argv
  settings = RunSettings.from_config(_CONFIG.value)
  plan = run_input.preparation_plan(settings.data, settings.tokenizer, settings.masking,
                                    _SOURCE.value, _NUM_FILES.value)
  if _RUNNER.value == "beam":
    if _NUM_HOSTS.value != 1:
      raise errors.CommandLineError("--num_hosts is for --runner=local; with Beam the runner"
                                    " spreads the work")
    _beam().prepare(plan, _OUT.value, _BEAM_OPTIONS.value)
  else:
    writer.prepare(plan, _OUT.value, _WORKERS.value, _NUM_HOSTS.value, _HOST_INDEX.value,
                        _HOST_WAIT.value * 60)


if __name__ == "__main__":
  cli.run(main, required=("source", "out"))
