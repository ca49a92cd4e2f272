"""Parallel input: grain worker processes (data.worker_count) and device prefetch change no
batch, no mask and no checkpointed position."""

import types

import jax
import numpy as np
import pytest

from mlmjax.data import masking
from mlmjax.data import pipeline
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.errors import ConfigError
from mlmjax.parallel import sharding
from mlmjax.training.run import masking_feedback

from conftest import train_iter

MIXTURE = "random=0.2,whole_word=0.2,span=0.2,entity=0.2,frequency=0.2"


def _iter(config, corpus, masker, workers, state=None):
  config.data.worker_count = workers
  tok = tok_lib.Tokenizer.load(config.tokenizer.path)
  it = train_iter(config, tok, corpus[0], masker)
  if state is not None:
    it.set_state(state)
  return it


def _same(a, b):
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("data_format,strategy", [
    ("full_sentences", "mixture"),  # every dynamic strategy, masked in the workers
    ("sop", "static"),  # masks fixed per example
    ("segment_pair", "adaptive"),  # masks made late, in this process
])
def test_two_workers_give_the_same_batches_and_resume_exactly(micro_config, corpus,
                                                              make_masker, data_format,
                                                              strategy):
  c = micro_config
  c.data.format, c.masking.strategy, c.masking.mixture = data_format, strategy, MIXTURE
  c.data.row_shuffle_window = 32  # windows of two batches: 8 batches cross several
  c.data.num_shards = 2  # two shards in this process, each walked by the workers
  masker = make_masker(c)
  ref = _iter(c, corpus, masker, 0)
  want = [ref.next_masked() for _ in range(8)]
  ref.close()
  workers = _iter(c, corpus, masker, 2)
  for w in want[:5]:
    _same(workers.next_masked(), w)
  state = workers.get_state()  # mid-window: window 2, one batch taken
  for w in want[5:]:
    _same(workers.next_masked(), w)
  workers.close()
  for count in (2, 0):  # resumed with workers, and the same position without
    again = _iter(c, corpus, masker, count, state)
    for w in want[5:]:
      _same(again.next_masked(), w)
    again.close()


def test_workers_need_absl_flags_parsed_by_the_program(micro_config, corpus, make_masker,
                                                       monkeypatch):
  """grain's workers read absl flags; the library does not parse them behind the program's
  back, it says what to do. (A program that parsed none, as the pipeline sees it: unparsing the
  real flags would also reset absl's logging level for the rest of the session.)"""
  unparsed = types.SimpleNamespace(FLAGS=types.SimpleNamespace(is_parsed=lambda: False))
  monkeypatch.setattr(pipeline, "flags", unparsed)
  with pytest.raises(ConfigError) as e:
    _iter(micro_config, corpus, make_masker(micro_config), 2)
  assert str(e.value) == (
      "data.worker_count=2 starts grain worker processes, which read absl flags, and this"
      " program has parsed none: call absl.flags.FLAGS.mark_as_parsed() (or absl.app.run)"
      " before training, as launch/colab_tpu.ipynb does")


def test_prefetch_checkpoints_what_was_taken_and_masks_after_the_feedback(
    micro_config, corpus, vocab_stats_for_tests):
  """The prefetch thread runs ahead, yet positions are those of the batches handed out, and
  adaptive masks use the loss table made after the step before (as without prefetch)."""
  c = micro_config
  c.masking.strategy = "adaptive"
  tok = tok_lib.Tokenizer.load(c.tokenizer.path)
  mesh = sharding.make_mesh(c.mesh)
  rng = np.random.default_rng(0)
  losses = [rng.random(len(tok)) for _ in range(6)]
  runs = []
  for depth in (0, 3):
    feedback = masking_feedback.TokenLossFeedback(len(tok), every_steps=2, decay=0.5)
    masker = masking.Masker(masking.Settings.from_config(c.masking), vocab_stats_for_tests,
                            None, feedback.weights_at)
    data = pipeline.on_mesh(train_iter(c, tok, corpus[0], masker), mesh, depth)
    seen = []
    for step in range(1, 7):
      batch = jax.device_get(next(data))
      seen.append((batch, data.global_state()))
      feedback.after_step(step, {"token_loss_sum": losses[step - 1],
                                 "token_count": np.ones(len(tok))}, applied=True)
    assert 0 <= data.take_wait_fraction() <= 1
    data.close()
    runs.append(seen)
  assert runs[0][3][1]["shards"]["0"]["batch"] == 4
  for (a, state_a), (b, state_b) in zip(*runs):
    _same(a, b)
    assert state_a == state_b
