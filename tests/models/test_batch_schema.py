"""One batch schema (models/batch_schema.py): what the input pipeline makes, what mlmjax.compile
traces the steps with and what the models check are the same keys, shapes and dtypes."""

import jax
import numpy as np
import pytest

from mlmjax.data import masking
from mlmjax.data.rows import formats
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.models import batch_schema
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training.planning import phases
from mlmjax.training.run_settings import RunSettings

from conftest import eval_iter, train_iter


def _schema(config):
  return batch_schema.shapes(config.train.batch_size, config.data.seq_len,
                             config.masking.max_predictions_per_seq,
                             pairs=formats.has_pair_labels(config.data.format),
                             span_boundaries=config.objective.span_boundary_weight > 0)


@pytest.mark.parametrize("data_format,span_boundaries", [
    ("full_sentences", False), ("doc_sentences", True), ("segment_pair", False),
    ("sentence_pair", True), ("sop", False)])
def test_the_pipeline_makes_the_schema(micro_config, corpus, vocab_stats_for_tests,
                                       data_format, span_boundaries):
  c = micro_config
  c.data.format = data_format
  c.objective.span_boundary_weight = 1.0 if span_boundaries else 0.0
  tok = tok_lib.Tokenizer.load(c.tokenizer.path)
  masker = masking.Masker(masking.Settings.from_config(c.masking), vocab_stats_for_tests,
                          span_boundaries=span_boundaries)
  for make in (train_iter, eval_iter):
    batch = next(iter(make(c, tok, corpus[0], masker)))
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == _schema(c), make.__name__


def test_compile_traces_the_steps_with_the_schema(micro_config):
  """The abstract batch of mlmjax.compile is the schema, and the steps trace with it: with the
  span-boundary head too (whose two boundary keys the compile command once left out)."""
  c = micro_config
  c.objective.span_boundary_weight = 1.0
  settings = RunSettings.from_config(c)
  mesh = sharding.make_mesh(c.mesh)
  spec = assembly.Assembly.of(settings).batch_spec(mesh, c.train.batch_size, c.data.seq_len,
                                c.masking.max_predictions_per_seq)
  assert {k: (v.shape, v.dtype) for k, v in spec.items()} == _schema(c)
  setup = assembly.Assembly.of(settings).setup(512, mesh)
  step = assembly.Assembly.of(settings).train_step(setup)
  _, metrics = jax.eval_shape(step, setup.abstract_state, spec)
  assert "sbo_loss_sum" in metrics


def test_a_diffusion_batch_is_the_schema_and_the_step_traces_with_it(micro_config, corpus,
                                                                    vocab_stats_for_tests):
  """The diffusion objective's batch: a slot per position and each slot's rate, from the
  pipeline as in mlmjax.compile's abstract batch; its step returns the bound's sums."""
  c = micro_config
  c.objective.kind = "diffusion"
  settings = RunSettings.from_config(c)
  slots = phases.plan(settings).whole_run.max_predictions  # one per position
  masker = masking.Masker(settings.masking.replace(max_predictions_per_seq=slots),
                          vocab_stats_for_tests, diffusion=settings.masking.diffusion())
  tok = tok_lib.Tokenizer.load(c.tokenizer.path)
  batch = next(iter(train_iter(c, tok, corpus[0], masker)))
  schema = batch_schema.shapes(c.train.batch_size, c.data.seq_len, c.data.seq_len, pairs=False,
                               span_boundaries=False, diffusion=True)
  assert {k: (v.shape, v.dtype) for k, v in batch.items()} == schema
  parts = assembly.Assembly.of(settings)
  mesh = sharding.make_mesh(c.mesh)
  spec = parts.batch_spec(mesh, c.train.batch_size, c.data.seq_len,
                          parts.plan.whole_run.max_predictions)
  assert {k: (v.shape, v.dtype) for k, v in spec.items()} == schema
  setup = parts.setup(512, mesh)
  _, metrics = jax.eval_shape(parts.train_step(setup), setup.abstract_state, spec)
  assert {"diffusion_bound_sum", "diffusion_token_count"} <= set(metrics)


def test_a_model_names_the_keys_a_batch_lacks(micro_config):
  c = micro_config
  settings = RunSettings.from_config(c)
  mesh = sharding.make_mesh(c.mesh)
  setup = assembly.Assembly.of(settings).setup(512, mesh)
  spec = assembly.Assembly.of(settings).batch_spec(mesh, c.train.batch_size, c.data.seq_len,
                                c.masking.max_predictions_per_seq)
  del spec["positions"]
  with pytest.raises(KeyError, match=r"the batch lacks \['positions'\] \(models/batch_schema.py"
                     r" says what makes them\)"):
    jax.eval_shape(assembly.Assembly.of(settings).train_step(setup), setup.abstract_state, spec)
  assert set(batch_schema.HOST_ONLY).isdisjoint(_schema(c))
  assert np.dtype(batch_schema.HOST_ONLY["sequence_keys"][1]) == np.int64
