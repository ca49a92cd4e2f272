"""Sharding on 8 fake CPU devices: DP, FSDP, TP and their product train like one device;
parameters and optimizer state are sharded as the rules say; restoring across meshes is exact;
the compiled steps communicate what they should and no more."""

import collections
import functools
import logging

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint._src.serialization import type_handler_registry
import pytest

from conftest import assert_same_arrays, train_iter
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax import errors
from mlmjax.models import param_names
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training.run import checkpoint
from synthetic_steps import (VOCAB, collectives_in, init_state, losses_of, small_config,
                             synthetic_batches, train)


# ---- the rule table ---------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_rules_shard_parameters_and_optimizer_state(optimizer):
  config = small_config((2, 2, 2))
  config.optimizer.kind = optimizer
  setup = assembly.Assembly.of(config).setup(VOCAB, sharding.make_mesh(config.mesh))
  params = setup.state_shardings["params"]
  block = params["blocks"][0]
  P = jax.sharding.PartitionSpec
  assert params["token_embedding"].spec == P("tensor", "fsdp")  # (vocab, embed)
  assert block["attention"]["qkv_kernel"].spec == P(None, "fsdp", "tensor", None)
  assert block["attention"]["out_kernel"].spec == P("tensor", None, "fsdp")
  assert block["mlp_in"]["kernel"].spec == P("fsdp", "tensor")
  assert block["mlp_out"]["kernel"].spec == P("tensor", "fsdp")
  assert block["mlp_norm"]["scale"].spec == P("fsdp")
  # For compute the weights are gathered over fsdp only; the tensor split stays.
  assert setup.compute_shardings["blocks"][0]["mlp_in"]["kernel"].spec == P(None, "tensor")

  state = setup.abstract_state  # what init_fn creates (test_every_mesh_... checks that)
  qkv = state["params"]["blocks"][0]["attention"]["qkv_kernel"]
  assert qkv.shape == (3, 64, 8, 8) and qkv.sharding.shard_shape(qkv.shape) == (3, 32, 4, 8)
  # Adam/LAMB moments (opt_state...mu[path], ...nu[path]) are sharded like params[path].
  param_specs = {_key(path): p.sharding.spec
                 for path, p in jax.tree_util.tree_leaves_with_path(state["params"])}
  moments = 0
  for path, x in jax.tree_util.tree_leaves_with_path(state["opt_state"]):
    names = [getattr(k, "name", None) for k in path]
    if "mu" in names or "nu" in names:
      moments += 1
      where = max(i for i, n in enumerate(names) if n in ("mu", "nu"))
      assert x.sharding.spec == param_specs[_key(path[where + 1:])], jax.tree_util.keystr(path)
    else:  # counters
      assert x.ndim == 0 and x.sharding.is_fully_replicated, jax.tree_util.keystr(path)
  assert moments == 2 * len(param_specs)


def _key(path):
  return param_names.param_name(param_names.path_keys(path))


def test_indivisible_dimension_is_replicated_with_a_warning(caplog):
  config = small_config((1, 1, 8))
  config.model.num_heads = 4  # 4 heads cannot be split 8 ways; MLP 128 and vocab 512 can
  with caplog.at_level(logging.WARNING):
    setup = assembly.Assembly.of(config).setup(VOCAB, sharding.make_mesh(config.mesh))
  qkv = setup.state_shardings["params"]["blocks"][0]["attention"]["qkv_kernel"]
  assert qkv.spec == jax.sharding.PartitionSpec(None, "fsdp", None, None)
  mlp = setup.state_shardings["params"]["blocks"][0]["mlp_in"]["kernel"]
  assert mlp.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
  warnings = [r.getMessage() for r in caplog.records if "not divisible" in r.getMessage()]
  assert warnings == [
      "Logical axis 'heads' of size 4 is not divisible by mesh axis tensor (size 8):"
      " replicated along it instead in 6 parameter(s): blocks/0/attention/out_kernel,"
      " blocks/0/attention/qkv_bias, blocks/0/attention/qkv_kernel,"
      " blocks/1/attention/out_kernel, ..."]


def test_bad_rules_and_uneven_batch_splits_fail_clearly():
  config = small_config((2, 2, 2))
  config.mesh.rules = (("embed", "fsdp"), ("mlp", "model"))
  with pytest.raises(errors.ConfigError, match=r"^config.mesh.rules maps 'mlp' to 'model',"
                     r" which is not a mesh axis \(data, fsdp, tensor\)$"):
    config_check.checked(config)
  config = small_config((2, 2, 2))
  config.train.batch_size, config.train.grad_accum_steps = 24, 4
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(config)
  assert str(e.value) == (
      "train.batch_size=24 must be divisible by train.grad_accum_steps=4 x the data-parallel"
      " size 4 (data x fsdp of the mesh {'data': 2, 'fsdp': 2, 'tensor': 2}) and by the process"
      " count 1")
  config.train.batch_size = 32
  config_check.checked(config)


# ---- the same numbers on every mesh -----------------------------------------------------------


@pytest.mark.slow
def test_every_mesh_trains_like_one_device():
  """DP, FSDP, TP and DP x FSDP x TP: the same losses and parameters as one device, step by
  step, with dropout on (its masks do not depend on the sharding: threefry is partitionable)."""
  config = small_config()
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.1
  batches = synthetic_batches(4)
  init, _ = init_state(config, jax.devices()[:1])
  one_metrics, one_state = train(config, batches, jax.devices()[:1], init=init)
  assert losses_of(one_metrics)[-1] < losses_of(one_metrics)[0]  # it does train
  for shape in [(8, 1, 1), (1, 8, 1), (1, 1, 8), (2, 2, 2)]:
    config.mesh.shape = shape
    if shape == (2, 2, 2):  # the sharded initialiser creates the very same numbers, sharded
      mesh_init, shardings = init_state(config)
      assert shardings == assembly.Assembly.of(config).setup(
          VOCAB, sharding.make_mesh(config.mesh)).state_shardings
      assert_same_arrays(mesh_init, init)
    metrics, state = train(config, batches, init=init)
    np.testing.assert_allclose(losses_of(metrics), losses_of(one_metrics), rtol=1e-5,
                               err_msg=str(shape))
    assert_same_arrays(state["params"], one_state["params"], rtol=1e-5, atol=1e-6)


def test_eval_step_on_a_sharded_mesh_matches_one_device():
  config = small_config((2, 2, 2))
  init, _ = init_state(small_config(), jax.devices()[:1])
  batch = synthetic_batches(1)[0]
  sums = []
  for devices in (jax.devices()[:1], jax.devices()):
    config.mesh.shape = (-1, 1, 1) if len(devices) == 1 else (2, 2, 2)
    mesh = sharding.make_mesh(config.mesh, devices)
    parts = assembly.Assembly.of(config)
    setup = parts.setup(VOCAB, mesh)
    params = jax.device_put(init["params"], setup.state_shardings["params"])
    out = parts.eval_step(setup)(params, sharding.to_device(batch, mesh))
    sums.append(jax.tree.map(np.asarray, out))
  assert sums[0]["mlm_count"] == 5 * 8 + 6 * 8
  for key in sums[0]:
    np.testing.assert_allclose(sums[1][key], sums[0][key], rtol=1e-6, err_msg=key)


@pytest.mark.slow
def test_restore_onto_another_mesh_is_exact(tmp_path, tokenizer_path, corpus, make_masker):
  config = small_config((8, 1, 1))
  config.tokenizer.path = tokenizer_path
  _, saved = train(config, synthetic_batches(2))  # a state with non-trivial Adam moments
  mesh = sharding.make_mesh(config.mesh)
  setup = assembly.Assembly.of(config).setup(VOCAB, mesh)
  data = train_iter(config, tok_lib.Tokenizer.load(tokenizer_path), corpus[0],
                                  make_masker(config))
  ckpt = checkpoint.Checkpointer(str(tmp_path), str(tmp_path / "corrupt"), 1)
  ckpt.save(2, jax.device_put(saved, setup.state_shardings), data, host={})
  ckpt.close()
  for shape, devices in [((1, 8, 1), 8), ((2, 2, 2), 8), ((1, 2, 1), 2), ((1, 1, 1), 1)]:
    config.mesh.shape = shape
    target = assembly.Assembly.of(config).setup(VOCAB,
                              sharding.make_mesh(config.mesh, jax.devices()[:devices]))
    ckpt = checkpoint.Checkpointer(str(tmp_path), str(tmp_path / "corrupt"), 1)
    restored = ckpt.restore(2, target.abstract_state).state
    ckpt.close()
    for x, want in zip(jax.tree.leaves(restored), jax.tree.leaves(target.state_shardings)):
      assert x.sharding == want
    for x, y in zip(jax.tree.leaves(restored), jax.tree.leaves(saved)):
      np.testing.assert_array_equal(np.asarray(x), y)


# ---- communication and memory -----------------------------------------------------------------


def _abstract_batch(mesh, batch):
  s = sharding.batch_sharding(mesh)
  return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s) for k, v in batch.items()}


@functools.lru_cache(maxsize=None)
def _compiled_step(mesh_shape):
  """(setup, compiled train step) of small_config on `mesh_shape`; compiled once per session."""
  config = small_config(mesh_shape)
  mesh = sharding.make_mesh(config.mesh)
  setup = assembly.Assembly.of(config).setup(VOCAB, mesh)
  step = assembly.Assembly.of(config).train_step(setup)
  batch = _abstract_batch(mesh, synthetic_batches(1)[0])
  return setup, step.lower(setup.abstract_state, batch).compile()


def test_data_parallel_step_reduces_gradients_once():
  """Pure data parallelism: one all-reduce carrying each gradient once, plus scalars.

  What the 8-device step on CPU holds, precisely:
  - one f32[] all-reduce of the global masked-token count: the loss divides by it, so it is
    needed before the backward pass;
  - one combined all-reduce (XLA's all-reduce combiner) of every parameter's gradient and the
    two remaining metric sums (mlm_loss_sum, mlm_correct), f32[] each;
  - the tied token embedding's gradient twice in it: its two uses (the input lookup and the
    MLM decoder) are reduced separately and added afterwards. XLA's GPU compiler runs the
    AllReduceReassociate pass, which folds add(all-reduce(a), all-reduce(b)) into one; the CPU
    compiler does not. So here: parameters + vocab x hidden + 2 scalars.
  """
  setup, compiled = _compiled_step((8, 1, 1))
  ops = collectives_in(compiled.as_text())
  assert set(ops) == {"all-reduce"}, dict(ops)  # no gathers, scatters or permutes
  param_shapes = [p.shape for p in jax.tree.leaves(setup.abstract_state["params"])]
  num_params = sum(int(np.prod(s)) for s in param_shapes)
  token_embedding = setup.abstract_state["params"]["token_embedding"].shape
  assert token_embedding == (VOCAB, 64)
  scalar, combined = sorted(ops["all-reduce"], key=len)
  assert scalar == [()]
  # Compared by size: XLA may reduce a gradient in another dimension order ([3, 8, 8, 64] for
  # the [3, 64, 8, 8] qkv kernel) and transpose it afterwards.
  sizes = lambda shapes: sorted(int(np.prod(s)) for s in shapes)
  assert sizes(combined) == sizes(param_shapes + [token_embedding] + [(), ()])
  reduced = sum(int(np.prod(s)) for s in combined)
  assert reduced == num_params + VOCAB * 64 + 2 == 106_816 + 32_768 + 2


def test_fsdp_step_gathers_each_weight_for_compute_and_reduces_each_gradient_once():
  """FSDP over 8 devices: each fsdp-sharded weight is all-gathered for compute (see
  train_state.MeshSetup.forward): embeddings and heads once, a block's weights as the block runs and
  again in the backward pass (instead of keeping every layer's gathered copy alive); each
  gradient is reduced once; activations stay on their device (no permutes, which GSPMD picks
  without the compute constraint), but for the gradient of the token embedding's lookup: the
  device's [rows, T, width] hidden-state gradient sent once to the devices holding each slice
  of the table (one all-to-all, with the batch's token ids all-gathered), cheaper than summing
  the [vocab, width] table's gradient over every device as the data-parallel step does.

  The CPU compiler emits the other gradient reductions as all-reduce + slice."""
  setup, compiled = _compiled_step((1, 8, 1))
  ops = collectives_in(compiled.as_text())
  assert set(ops) == {"all-gather", "all-reduce", "all-to-all"}, dict(ops)
  sizes = lambda shapes: sorted(int(np.prod(s)) for s in shapes)
  params = jax.tree.leaves(setup.abstract_state["params"])
  in_blocks = jax.tree.leaves(setup.abstract_state["params"]["blocks"])
  fsdp = lambda ps: [int(np.prod(p.shape)) for p in ps
                     if "fsdp" in jax.tree.leaves(tuple(p.sharding.spec))]
  assert len(fsdp(params)) == 28
  # Every weight once; a block's matrices again for the backward pass; its vectors again only
  # where the backward pass reads them (a scale, not a bias).
  once_and_matrices = collections.Counter(fsdp(params) + fsdp(p for p in in_blocks if p.ndim > 1))
  at_most = once_and_matrices + collections.Counter(fsdp(p for p in in_blocks if p.ndim == 1))
  rows, seq_len = synthetic_batches(1)[0]["input_ids"].shape
  # ... and the batch's token ids, which the lookup's gradient scatters by, once.
  gathered = collections.Counter(sizes(sum(ops["all-gather"], [])))
  gathered -= collections.Counter({rows * seq_len: 1})
  assert once_and_matrices <= gathered <= at_most, gathered
  (moved,) = ops["all-to-all"]
  assert sum(sizes(moved)) == rows // 8 * seq_len * 64
  # Each gradient reduced once, besides scalars: the token embedding's for its use as the MLM
  # decoder only. (A gradient comes back in its fsdp sharding, sharding.gather_for_compute:
  # TPU's compiler reduce-scatters it, see test_compile_targets.py; the CPU compiler
  # all-reduces and slices.)
  combined = max(ops["all-reduce"], key=len)
  assert all(s == () for op in ops["all-reduce"] if op is not combined for s in op)
  assert sizes(s for s in combined if s) == sizes([p.shape for p in params])


def test_fsdp_shards_parameter_and_optimizer_memory():
  """Per-device bytes of parameters + Adam moments shrink as 1/fsdp, up to the few small
  vectors that no rule shards over fsdp (biases of heads/vocab/mlm_transform): from the
  shardings' shard shapes for every fsdp size, and from the compiled step's arguments."""
  per_device = {}
  for fsdp in (1, 2, 4, 8):
    config = small_config((8 // fsdp, fsdp, 1))
    setup = assembly.Assembly.of(config).setup(VOCAB, sharding.make_mesh(config.mesh))
    state = setup.abstract_state
    per_device[fsdp] = sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
                           for x in jax.tree.leaves((state["params"], state["opt_state"])))
  full = per_device[1]
  assert full > 3 * 106_816 * 4  # params + mu + nu, float32, and a few counters
  for fsdp in (2, 4, 8):
    assert full / fsdp <= per_device[fsdp] < 1.15 * full / fsdp, (fsdp, per_device)
  # The compiled step's arguments: the state and this device's 2 rows of the batch.
  arguments = {s: _compiled_step(s)[1].memory_analysis().argument_size_in_bytes
               for s in [(8, 1, 1), (1, 8, 1)]}
  assert arguments[(1, 8, 1)] < 1.15 * arguments[(8, 1, 1)] / 8, arguments


def _compiled_memory(config, vocab=30522):
  """Bytes per device of the compiled train step (arguments + outputs + temporaries, less the
  donated state counted twice), from XLA's own buffer assignment."""
  mesh = sharding.make_mesh(config.mesh)
  setup = assembly.Assembly.of(config).setup(vocab, mesh)
  b, t, p = config.train.batch_size, config.data.seq_len, config.masking.max_predictions_per_seq
  s = sharding.batch_sharding(mesh)
  batch = {k: jax.ShapeDtypeStruct((b, t), np.int32, sharding=s)
           for k in ("input_ids", "segment_ids", "positions", "token_type_ids")}
  batch.update({k: jax.ShapeDtypeStruct((b, p), d, sharding=s) for k, d in (
      ("masked_positions", np.int32), ("masked_ids", np.int32), ("masked_weights", np.float32))})
  m = assembly.Assembly.of(config).train_step(setup).lower(setup.abstract_state, batch).compile()
  m = m.memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes)


@pytest.mark.slow
def test_fsdp_gathers_layer_by_layer_and_needs_under_half_the_memory():
  """BERT-large (335M parameters) on 8 devices, one row of 128 tokens per device: FSDP holds a
  shard of the weights and optimizer state and one layer's full weights at a time; data
  parallelism holds all of them everywhere. (Measured: 1.51 vs 6.25 GiB.)"""
  from mlmjax.configs import bert  # pylint: disable=g-import-not-at-top
  memory = {}
  for shape in ((8, 1, 1), (1, 8, 1)):
    config = bert.get_config("large")
    config.data.format = "full_sentences"
    config.data.seq_len, config.train.batch_size = 128, 8
    config.model.scan_layers = True
    config.mesh.shape = shape
    memory[shape] = _compiled_memory(config)
  assert memory[(1, 8, 1)] < 0.3 * memory[(8, 1, 1)], memory


class _NoData:
  """A data position for a checkpoint of arrays alone."""

  def global_state(self) -> dict:
    return {}

  def set_state(self, state: dict) -> None:
    del state


def test_replicated_arrays_save_from_one_cpu_device_without_slicing_programs(tmp_path, caplog):
  """On CPU, orbax writes a replicated array from its first replica (checkpoint.py's
  save_whole_shards_on_cpu): no program is compiled to slice it across the 8 devices, as its
  replica-parallel default does, and it restores exactly. Setting that handler says nothing:
  orbax's warning on overriding a handler stood in the notebook's output."""
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  state = {f"w{i}": jax.device_put(np.arange(8 * (i + 1), dtype=np.float32).reshape(8, -1),
                                   replicated) for i in range(3)}
  compiled = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _, fun_name="", **__: compiled.append(fun_name)
      if event == "/jax/core/compile/backend_compile_duration" else None)
  # orbax's own handler first, as in a fresh process (another test may have set ours)
  type_handler_registry.GLOBAL_TYPE_HANDLER_REGISTRY.add(
      jax.Array, ocp.type_handlers.ArrayHandler(), override=True, ignore_warnings=True)
  with caplog.at_level(logging.WARNING):
    ckpt = checkpoint.Checkpointer(str(tmp_path), str(tmp_path / "corrupt"), 1)
    checkpoint.save_whole_shards_on_cpu()  # again, as each Checkpointer of a process does
  assert not caplog.records, caplog.text
  ckpt.save(1, state, _NoData(), host={})
  ckpt.wait()
  saving = list(compiled)
  restored = ckpt.restore(1, jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)).state
  ckpt.close()
  assert not [name for name in saving if "slice" in name], saving
  for name, value in state.items():
    np.testing.assert_array_equal(np.asarray(restored[name]), np.asarray(value), err_msg=name)
