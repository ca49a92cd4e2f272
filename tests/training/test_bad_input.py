"""Bad input fails early with one exact, actionable line and damages nothing already saved."""

import errno
import hashlib
import logging
import os
import shutil
import types

from etils import epath
import jax
import numpy as np
import pytest

from conftest import latest_step, micro, saved_state
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax import errors
from mlmjax.training.run import checkpoint
from mlmjax.training import train

pytestmark = pytest.mark.slow  # every test first trains a run, then must leave it unharmed


def _snapshot(workdir):
  """Every file under the workdir except logs and goodput's records (rewritten as the run goes)
  -> its sha256."""
  out = {}
  for d, _, files in os.walk(workdir):
    for f in files:
      path = os.path.join(d, f)
      if not any(w in path for w in ("tensorboard", "goodput")) and not f.endswith(".jsonl"):
        out[os.path.relpath(path, workdir)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
  return out


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory, tokenizer_path):
  """A workdir holding a finished 4-step run (checkpoint 4), trained once for the module."""
  config = micro(tokenizer_path)
  config.train.steps = 4
  workdir = str(tmp_path_factory.mktemp("trained") / "run")
  train.train_and_evaluate(config, workdir)
  return workdir


@pytest.fixture
def trained(trained_once, tmp_path):
  """A copy of that run for the test to try to harm, and its file snapshot."""
  workdir = str(tmp_path / "run")
  shutil.copytree(trained_once, workdir)
  return workdir, _snapshot(workdir)


def _set(config, dotted, value):
  node = config
  *parents, leaf = dotted.split(".")
  for p in parents:
    node = node[p]
  node[leaf] = value


@pytest.mark.parametrize("key,value,message", [
    ("masking.mask_rate", 1.5, "masking.mask_rate=1.5 must be strictly between 0 and 1"),
    ("masking.mask_rate", 0.0, "masking.mask_rate=0.0 must be strictly between 0 and 1"),
    ("train.batch_size", 12, "train.batch_size=12 must be divisible by"
                             " train.grad_accum_steps=1 x the data-parallel size 8 (data x fsdp"
                             " of the mesh {'data': 8, 'fsdp': 1, 'tensor': 1}) and by the"
                             " process count 1"),
    ("data.seq_len", 64, "data.seq_len=64 exceeds model.max_position_embeddings=32"),
    ("masking.max_predictions_per_seq", 2,
     "masking.max_predictions_per_seq=2 is too small for masking.mask_rate=0.15 at seq_len 32:"
     " a full row wants 5 predictions; set it to at least 5"),  # 0.15 x 30 = 4.5, rounded up
    ("mesh.shape", (3, 1, 1), "config.mesh.shape=(3, 1, 1) needs 3 devices, have 8"),
    ("data.format", "pairs", "data.format='pairs' is not one of full_sentences, doc_sentences,"
                             " segment_pair, sentence_pair, sop"),
    ("data.source", "/nonexistent/*.txt",
     "/nonexistent/*.txt: no files match; config.data.source takes 'builtin', a"
     " .txt/.jsonl(.gz/.zst)/.parquet file or a datasets folder, a glob such as 'corpus/*.txt',"
     " a comma-separated list of these,"
     " tfds:NAME[:SPLIT[:FEATURE]], or prepared:DIR (made by python -m mlmjax.prepare)"),
])
def test_config_and_data_errors_change_nothing(trained, micro_config, key, value, message):
  workdir, before = trained
  micro_config.train.steps = 8  # a resume that would train on
  _set(micro_config, key, value)
  with pytest.raises(errors.UserError) as e:
    train.train_and_evaluate(micro_config, workdir)
  assert str(e.value) == message
  assert _snapshot(workdir) == before


@pytest.mark.parametrize("content,message", [
    (b"   \n\n  ", "{path}: no text in 1 file (empty, or only blank lines or empty documents);"
                 ' give .txt documents separated by blank lines or .jsonl lines with a "text"'
                 " field"),
    (b"one document only", "config.data.source='{path}' has 1 non-empty document(s); need at"
                           " least 2 (one to train on, one held out): add text, or separate"
                           " .txt documents by blank lines"),
    (b"text\0\1\2binary", "{path}: looks like a binary file (it contains NUL bytes); give"
                         " UTF-8 .txt or .jsonl text"),
])
def test_empty_tiny_or_binary_corpus_changes_nothing(trained, micro_config, tmp_path, content,
                                                     message):
  workdir, before = trained
  path = tmp_path / "corpus.txt"
  path.write_bytes(content)
  micro_config.data.source = str(path)
  with pytest.raises(errors.UserError) as e:
    train.train_and_evaluate(micro_config, workdir)
  assert str(e.value) == message.format(path=path)
  assert _snapshot(workdir) == before


def test_another_tokenizer_is_refused(trained, micro_config, corpus, tmp_path):
  workdir, before = trained
  other = tok_lib.train_tokenizer(corpus[0][:200], 400, "unigram", 100_000)
  other_path = str(tmp_path / "other.model")
  other.save(other_path)
  micro_config.tokenizer.path = other_path
  with pytest.raises(tok_lib.TokenizerError) as e:
    train.train_and_evaluate(micro_config, workdir)
  assert str(e.value) == (
      f"config.tokenizer.path={other_path!r} is not the tokenizer this run was trained with"
      f" ({os.path.join(workdir, 'tokenizer.model')}); drop the setting to resume, or use a new"
      " --workdir")
  assert _snapshot(workdir) == before
  # Even with the run's own tokenizer files gone, the checkpoint's vocabulary gives it away.
  os.remove(os.path.join(workdir, "tokenizer.model"))
  os.remove(os.path.join(workdir, "tokenizer_stats.npz"))
  with pytest.raises(checkpoint.CheckpointMismatchError) as e:
    train.train_and_evaluate(micro_config, workdir)
  assert str(e.value) == (
      f"the checkpoints in {os.path.join(workdir, 'checkpoints')} were trained with a 512-piece"
      f" vocabulary but the tokenizer has {len(other)} pieces: resume with the run's own"
      " tokenizer.model, or use a new --workdir for another tokenizer")
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["4"]  # not set aside


def test_unwritable_workdir(tmp_path, micro_config):
  blocker = tmp_path / "a_file"
  blocker.write_text("x")
  with pytest.raises(errors.UserError) as e:
    train.train_and_evaluate(micro_config, str(blocker / "run"))
  assert str(e.value) == f"cannot write to --workdir={blocker / 'run'}: Not a directory"


ROOM = 20_000  # bytes left on the disk that fills up


class _FullDisk:
  """A file on a disk that fills up: the bytes that still fit are written, then ENOSPC."""

  def __init__(self, file, disk):
    self._file, self._disk = file, disk

  def write(self, data):
    fits = data[:self._disk.room]
    self._disk.room -= len(fits)
    self._file.write(fits)
    self._file.flush()
    if len(fits) < len(data):
      self._disk.failures += 1
      raise OSError(errno.ENOSPC, "No space left on device")
    return len(data)

  def __getattr__(self, name):
    return getattr(self._file, name)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._file.close()


@pytest.fixture
def disk_fills_during_save(monkeypatch):
  """-> set `.under` to a path prefix: from then on, the files orbax's real save opens for
  writing there (its JSON and metadata files; tensorstore writes the arrays itself, unhindered)
  share `room` bytes, then fail with ENOSPC, as on a disk that fills up in the middle of a save.
  `free()`: space freed."""
  path_class = type(epath.Path("/"))
  real_open = path_class.open
  disk = types.SimpleNamespace(under=None, room=ROOM, failures=0)

  def open_on_disk(self, mode="r", *args, **kwargs):
    f = real_open(self, mode, *args, **kwargs)
    if disk.under and str(self).startswith(disk.under) and any(c in mode for c in "wax+"):
      return _FullDisk(f, disk)
    return f
  monkeypatch.setattr(path_class, "open", open_on_disk)
  disk.free = lambda: monkeypatch.setattr(path_class, "open", real_open)
  return disk


def test_disk_full_during_a_save_keeps_earlier_checkpoints(trained, micro_config,
                                                           disk_fills_during_save, caplog):
  """The disk fills up while checkpoint 6 is being written (orbax's asynchronous save is under
  way; its metadata files run out of space partway): one clear line names checkpoint 6,
  checkpoint 4 still restores as it was, and once space is freed the same command resumes from
  step 4."""
  workdir, before = trained
  ckpt_dir = os.path.join(workdir, "checkpoints")
  state_4 = saved_state(workdir)
  disk_fills_during_save.under = os.path.join(ckpt_dir, "6.")  # 6's temporary folder
  micro_config.train.steps = 8
  micro_config.train.checkpoint_every_steps = 2
  with pytest.raises(checkpoint.CheckpointWriteError) as e:
    train.train_and_evaluate(micro_config, workdir)
  assert str(e.value) == (
      f"could not write checkpoint 6 in {ckpt_dir} (No space left on device); the complete"
      " checkpoints are intact: fix this and run the same command again to resume from step 4")
  # The save had really begun: all the room left went to checkpoint 6's files, in its
  # half-written folder, before the writes failed.
  assert disk_fills_during_save.failures > 0 and disk_fills_during_save.room == 0
  (partial,) = [d for d in os.listdir(ckpt_dir) if d.startswith("6.")]
  assert latest_step(workdir) == 4
  # Everything saved before is untouched (config.json now holds the new run's settings), and
  # checkpoint 4 restores to the same state.
  after = _snapshot(workdir)
  assert all(after[k] == v for k, v in before.items() if k != "config.json")
  restored = saved_state(workdir, 4)
  assert jax.tree.structure(restored) == jax.tree.structure(state_4)
  for x, y in zip(jax.tree.leaves(restored), jax.tree.leaves(state_4)):
    np.testing.assert_array_equal(x, y)
  disk_fills_during_save.free()
  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(micro_config, workdir)
  assert f"Resumed from checkpoint at step 4 in {ckpt_dir}" in caplog.text
  assert latest_step(workdir) == 8 and not os.path.exists(os.path.join(ckpt_dir, partial))

