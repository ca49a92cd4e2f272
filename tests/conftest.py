"""Test set-up: 8 fake CPU devices (or the GPU, below), set before anything imports jax, and
one compilation cache for the session.

tests/<folder>/ holds the tests of mlmjax/<folder>/ (commands/: the top-level commands;
project/: launch scripts, the notebook, packaging). The folders are packages, so two may hold
files of the same name; tests/ itself is not, so that this file, storage_servers.py,
synthetic_steps.py and shared_runs.py import by their bare names. `@pytest.mark.slow` marks
the end-to-end tests; `python -m pytest -m "not slow"` is the fast tier, `python -m pytest`
runs everything."""

import atexit
import gc
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

# MLMJAX_TEST_ON_GPU=1 runs the tests on this machine's GPU instead (the kernels compiled, not
# interpreted: tests/models/, tests/training/test_causal_lm.py; those that need 8 devices fail).
if os.environ.get("MLMJAX_TEST_ON_GPU") != "1":
  # The tests' programs are tiny and run in microseconds; compiling them is most of many a
  # test's time, and LLVM's optimisation a large share of that (the micro model's train step
  # compiled in 18.1 s, and in 10.2 s at level 0, on this project's 2-core CPU beside other
  # work; the whole suite took 22:47 instead of 24:05). Numbers may differ in the last bits.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8"
                             " --xla_backend_optimization_level=0").strip()
  os.environ["JAX_PLATFORMS"] = "cpu"
# Many tests train the same tiny models again (resume, determinism, every strategy), in this
# process and in subprocesses: jax's persistent cache compiles each program once per session.
# One cache for the whole session: pytest's main process makes it before xdist starts its
# workers, which inherit the variable (as do the commands the tests run as subprocesses), so a
# program one worker compiled is read by the other. Only its maker removes it.
if "MLMJAX_TEST_JAX_CACHE" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="mlmjax_test_jax_cache_")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  os.environ["MLMJAX_TEST_JAX_CACHE"] = _CACHE
# A folder every pytest process of the session shares, like the cache: runs that tests in
# several files read, made once whichever xdist worker asks first (tests/shared_runs.py).
if "MLMJAX_TEST_SHARED" not in os.environ:
  _SHARED = tempfile.mkdtemp(prefix="mlmjax_test_shared_")
  atexit.register(shutil.rmtree, _SHARED, ignore_errors=True)
  os.environ["MLMJAX_TEST_SHARED"] = _SHARED
os.environ.update(JAX_COMPILATION_CACHE_DIR=os.environ["MLMJAX_TEST_JAX_CACHE"],
                  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # so `configs` imports like it does from the repo root
# Before anything imports jax, as every command does first (mlmjax/cli.py): jax's CUDA plugin
# and libtpu hidden where this machine lacks their accelerator (parallel/plugins.py).
from mlmjax.parallel import plugins as _plugins  # pylint: disable=g-import-not-at-top,wrong-import-position

_plugins.hide()


def user_env() -> dict[str, str]:
  """The environment for a subprocess that should see what a user's machine has: one CPU
  device (without the 8 simulated ones set above)."""
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  return env

# A run trained in a child process on one CPU device (train_on_one_device below).
_TRAIN_ON_ONE_DEVICE = """
import sys
from absl import flags
flags.FLAGS.mark_as_parsed()  # grain's worker processes read absl's flags
from mlmjax.parallel import plugins
plugins.hide()
from mlmjax.training import saved_config, train
import gc
gc.freeze()  # as a command does once the library is imported (mlmjax/cli.py)
train.train_and_evaluate(saved_config.load(sys.argv[1]).settings, sys.argv[2])
"""


def train_on_one_device(config, workdir: str) -> str:
  """train.train_and_evaluate(config, workdir), run in a child process on one CPU device:
  for a test that needs a trained run and checks nothing of the 8 simulated devices. The tests'
  small models step 2-3 times faster on one device than sharded over 8 on two cores (200 steps
  of tests/commands/test_predict.py's model: 8.9 s against 17.2 s, compilations cached). The
  config travels as a run's config.json does (training/saved_config.py), the child sees what a
  user's machine has (user_env). Returns `workdir`."""
  from mlmjax.training import saved_config  # pylint: disable=g-import-not-at-top
  config_path = workdir.rstrip("/") + ".config.json"
  with open(config_path, "w", encoding="utf-8") as f:
    f.write(saved_config.dumps(config))
  proc = subprocess.run([sys.executable, "-c", _TRAIN_ON_ONE_DEVICE, config_path, workdir],
                        cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=900,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir


from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from mlmjax.configs import tiny  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.data.corpora import sources  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.data.text import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top

# The tests are the program here, with no command line of their own: absl's flags keep their
# defaults (grain's worker processes read them; mlmjax's commands parse theirs).
flags.FLAGS.mark_as_parsed()


# Each test file's seconds in a whole run (setup, call and teardown of its tests): xdist hands
# out whole files (pytest.ini: --dist loadfile) in collection order, so the longest go first and
# the two processes end together instead of one running a long file alone at the end. Refresh
# it after a change of the suite's costs: MLMJAX_RECORD_FILE_SECONDS=1 python -m pytest -q
FILE_SECONDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_seconds.json")


def pytest_collection_modifyitems(items):
  """Files by their recorded seconds, longest first (new files last); tests keep their order
  within a file."""
  with open(FILE_SECONDS, encoding="utf-8") as f:
    seconds = json.load(f)
  file = {item: item.nodeid.split("::")[0] for item in items}
  first = {}
  for i, item in enumerate(items):
    first.setdefault(file[item], i)
  items.sort(key=lambda item: (-seconds.get(file[item], 0.0), first[file[item]]))


def pytest_collection_finish(session):
  """Collection imported the library and every test module: objects that live as long as the
  process, frozen so that Python's collections stop walking them (as mlmjax/cli.py does for a
  command). Measured in the fast tier's two processes: 15.4 s of collections -> 11.4 s."""
  gc.collect()
  gc.freeze()


def pytest_terminal_summary(terminalreporter):
  """Each tier's test count and total time (setup, call and teardown summed over the tests,
  in whichever process ran them), after pytest's slowest-tests list (pytest.ini's
  --durations): where the suite's time goes, in every run. With MLMJAX_RECORD_FILE_SECONDS
  set, each file's total is written to FILE_SECONDS."""
  tiers, files = {}, {}
  for reports in terminalreporter.stats.values():
    for report in reports:
      if getattr(report, "when", None) not in ("setup", "call", "teardown"):
        continue
      tier = "slow" if "slow" in report.keywords else "fast"
      count, seconds = tiers.get(tier, (set(), 0.0))
      count.add(report.nodeid)
      tiers[tier] = (count, seconds + report.duration)
      file = report.nodeid.split("::")[0]
      files[file] = files.get(file, 0.0) + report.duration
  for tier, (count, seconds) in sorted(tiers.items()):
    terminalreporter.write_line(f"{tier} tier: {len(count)} tests, {seconds:.0f} s of test time")
  if os.environ.get("MLMJAX_RECORD_FILE_SECONDS"):
    with open(FILE_SECONDS, "w", encoding="utf-8") as f:
      json.dump({k: round(v, 1) for k, v in sorted(files.items(), key=lambda kv: -kv[1])}, f,
                indent=0)
      f.write("\n")
    terminalreporter.write_line(f"recorded each file's seconds in {FILE_SECONDS}")


@pytest.fixture(scope="session")
def two_process_run(tokenizer_path) -> tuple[str, list[str]]:
  """shared_runs.two_processes: (workdir, logs) of the tiny preset's 8 steps on two processes.
  tests/parallel/test_multiprocess.py checks it against one process, tests/training/
  test_buckets.py a bucket's run against it."""
  import shared_runs  # pylint: disable=g-import-not-at-top
  return shared_runs.two_processes(tokenizer_path)


@pytest.fixture(scope="session")
def corpus():
  """(train, eval) sources of the built-in corpus."""
  return sources.load_splits("builtin", 50)


@pytest.fixture(scope="session")
def tokenizer_path(corpus, tmp_path_factory):
  """A small sentencepiece model trained once per session on the built-in corpus."""
  tok = tokenizer_lib.train_tokenizer(corpus[0][:300], 512, "unigram", 100_000)
  path = str(tmp_path_factory.mktemp("tok") / "test.model")
  tok.save(path)
  return path


@pytest.fixture(scope="session")
def wordpiece(corpus, tmp_path_factory):
  """A BERT WordPiece tokenizer (lower-cased, accents stripped) learned from the corpus."""
  from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from mlmjax.data.text import hf_tokenizer  # pylint: disable=g-import-not-at-top
  wp = BertWordPieceTokenizer(lowercase=True)
  wp.train_from_iterator(corpus[0][:100], vocab_size=400,
                         special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
  folder = tmp_path_factory.mktemp("wordpiece")
  wp.save_model(str(folder))
  transformers.BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(str(folder))
  return hf_tokenizer.HFTokenizer.load(str(folder))


@pytest.fixture(scope="session")
def vocab_stats_for_tests(tokenizer_path, corpus):
  """Word/frequency tables of the session tokenizer over the built-in training split."""
  from mlmjax.data.text import vocab_stats  # pylint: disable=g-import-not-at-top
  return vocab_stats.compute(tokenizer_lib.Tokenizer.load(tokenizer_path), corpus[0], 300)


@pytest.fixture
def make_masker(vocab_stats_for_tests):
  """config -> the Masker a run with that config would use (session tokenizer's tables)."""
  from mlmjax.data import masking  # pylint: disable=g-import-not-at-top
  return lambda config: masking.Masker(masking.Settings.from_config(config.masking),
                                       vocab_stats_for_tests)


@pytest.fixture
def micro_config(tokenizer_path):
  """A very small model/batch for fast unit-level training tests (8-device divisible)."""
  return micro(tokenizer_path)


def micro(tokenizer_path):
  """micro_config's config, for fixtures of a wider scope."""
  config = tiny.get_config()
  config.tokenizer.path = tokenizer_path
  config.data.seq_len = 32
  config.masking.mask_rate = 0.15  # BERT's rate, which the statistical tests are written for
  config.masking.max_predictions_per_seq = 6
  config.model.hidden_size = 32
  config.model.num_layers = 2
  config.model.num_heads = 2
  config.model.intermediate_size = 64
  config.model.max_position_embeddings = 32
  config.model.dropout_rate = 0.1  # on, so determinism tests cover dropout too
  config.model.attention_dropout_rate = 0.1
  config.train.batch_size = 16
  config.train.steps = 8
  config.optimizer.warmup_steps = 2
  config.train.log_every_steps = 2
  config.train.eval_every_steps = 4
  config.train.eval_batches = 2
  config.train.checkpoint_every_steps = 4
  return config


def train_iter(config, tok, source, masker, word_start=None, first_step=0):
  """data/pipeline.py's training iterator of a config's base shape (its data.seq_len,
  train.batch_size and seed)."""
  from mlmjax.data import pipeline  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run_settings import RunSettings  # pylint: disable=g-import-not-at-top
  s = RunSettings.from_config(config)
  return pipeline.make_train_iter(s.data, tok, source, masker, batch_size=s.train.batch_size,
                                  seq_len=s.data.seq_len, seed=s.seed, word_start=word_start,
                                  first_step=first_step)


def eval_iter(config, tok, source, masker, word_start=None):
  """data/pipeline.py's held-out iterator of a config's base shape (train.eval_batches)."""
  from mlmjax.data import pipeline  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run_settings import RunSettings  # pylint: disable=g-import-not-at-top
  s = RunSettings.from_config(config)
  return pipeline.make_eval_iter(s.data, tok, source, masker, batch_size=s.train.batch_size,
                                 seq_len=s.data.seq_len, seed=s.seed,
                                 num_batches=s.train.eval_batches, word_start=word_start)


def build_input(config, tokenizer_paths, stats_path):
  """A run's input (training/assembly.py) from a config."""
  from mlmjax.training import assembly  # pylint: disable=g-import-not-at-top
  return assembly.Assembly.of(config).input(tokenizer_paths, stats_path)


def base_shape(config):
  """The config's run as one phase (training/planning/phases.py's Plan.whole_run)."""
  from mlmjax.training.planning import phases  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run_settings import RunSettings  # pylint: disable=g-import-not-at-top
  return phases.plan(RunSettings.from_config(config)).whole_run


def saved_state(workdir, step=None):
  """Checkpoint `step` (default: the latest) of a run as numpy arrays, rebuilt on one device
  from the run's own config.json."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from mlmjax.training import finished_run  # pylint: disable=g-import-not-at-top
  return jax.tree.map(np.asarray, finished_run.load(workdir, step).state)


def assert_resumes_exactly(config, straight, split, stop_after, caplog):
  """Trains `config` in `split` as two runs, the first stopped after step `stop_after`, the
  second resumed, and checks it ends exactly where the uninterrupted run in `straight` ended:
  the same tree of arrays, bit for bit. That the resume happened is checked too, so a run that
  ignored `stop_after` or retrained from step 0 fails: the first run's newest checkpoint is
  `stop_after`, the second logs restoring it and logs no training step a second time.
  Returns the two final states (straight, split)."""
  from mlmjax.training import train  # pylint: disable=g-import-not-at-top
  train.train_and_evaluate(config, split, stop_after=stop_after)
  assert latest_step(split) == stop_after
  caplog.clear()
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(config, split)
  assert_resumed(split, stop_after, caplog.text)
  a, b = saved_state(straight), saved_state(split)
  assert int(a["step"]) == int(b["step"]) > stop_after
  assert_same_arrays(a, b)
  return a, b


def assert_resumed(workdir, step, log: str) -> None:
  """The run in `workdir` (pretraining or fine-tuning) resumed from its checkpoint of `step`,
  as `log` says, and trained no step twice (its metrics.jsonl): a run that ignored its
  checkpoint and trained from step 0 fails, though it may end with the same state."""
  assert f"from checkpoint at step {step} in " in log
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    logged = [row["step"] for row in map(json.loads, f) if "loss" in row]
  assert logged == sorted(set(logged)), f"a step was trained twice: {logged}"


def assert_same_arrays(a, b, **tolerance):
  """Two trees of arrays with the same structure and equal leaves: exactly, or within
  `rtol`/`atol` when given. (A bare zip over their leaves would drop the leaves one tree has
  in excess.) A failure names the leaf's path."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    name = jax.tree_util.keystr(path)
    if tolerance:
      np.testing.assert_allclose(x, y, err_msg=name, **tolerance)
    else:
      np.testing.assert_array_equal(x, y, err_msg=name)


def latest_step(workdir):
  """The step of a run's newest complete checkpoint (None if there is none)."""
  from mlmjax.training.run import checkpoint  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  run = workdir_lib.Workdir(workdir)
  ckpt = checkpoint.Checkpointer(run.checkpoints, run.corrupt_checkpoints, 1)
  try:
    return ckpt.latest_step()
  finally:
    ckpt.close()


class FakeClock:
  """The workdir lock's clock in tests: `sleep` advances `now` at once and then runs
  `on_sleep()`, what the rest of the world does meanwhile; nothing waits for real time, so a
  loaded machine changes no outcome. Everything else is the real `time` module."""

  def __init__(self):
    self.now = 0.0
    self.on_sleep = lambda: None

  def monotonic(self) -> float:
    return self.now

  def sleep(self, seconds: float) -> None:
    self.now += seconds
    self.on_sleep()

  def __getattr__(self, name):
    import time  # pylint: disable=g-import-not-at-top
    return getattr(time, name)


@pytest.fixture
def lock_clock(monkeypatch):
  """A FakeClock in place of the time module of training/run/workdir_lock.py (its heartbeat thread
  waits on an Event, in real time, untouched)."""
  from mlmjax.training.run import workdir_lock  # pylint: disable=g-import-not-at-top
  clock = FakeClock()
  monkeypatch.setattr(workdir_lock, "time", clock)
  return clock


def prepare(config, source, out, num_files=64, **kw):
  """data/writer.prepare of `source` into `out` for a run with `config`."""
  from mlmjax.data import run_input  # pylint: disable=g-import-not-at-top
  from mlmjax.data.prepared import writer  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run_settings import RunSettings  # pylint: disable=g-import-not-at-top
  s = RunSettings.from_config(config)
  plan = run_input.preparation_plan(s.data, s.tokenizer, s.masking, source, num_files)
  return writer.prepare(plan, out, **kw)
