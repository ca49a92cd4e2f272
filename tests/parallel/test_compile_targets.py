"""Compiling for TPU slices and GPU nodes from this CPU machine (parallel/targets.py,
training/planning/aot.py, mlmjax.compile): the real steps, the TPU/GPU compilers, no accelerator.

The CPU tests can run the Pallas kernels only in interpret mode on one device, where nothing
is partitioned: only the target's compiler shows whether a kernel runs on a multi-device mesh
(before the kernels ran under shard_map, lowering for any TPU mesh of more than one chip
raised "Mosaic kernels cannot be automatically partitioned").
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from mlmjax.configs import tiny
from conftest import REPO, user_env
from mlmjax import errors
from mlmjax.models import attention
from mlmjax.parallel import hlo
from mlmjax.parallel import sharding
from mlmjax.parallel import targets
from mlmjax.training import assembly
from mlmjax.training.core import train_state
from mlmjax.training.planning import aot

def _config(**model):
  """tiny (2 of its layers: half the compile time) at a length the TPU kernel takes (multiples
  of 128), as a user would override it."""
  config = tiny.get_config()
  config.model.num_layers = 2
  config.data.seq_len = 128
  config.model.max_position_embeddings = 128
  config.masking.max_predictions_per_seq = 38  # 30% of 126 maskable tokens
  config.model.update(model)
  return config


def _abstract_params(config, target):
  mesh = sharding.make_mesh(config.mesh, target.devices)
  parts = assembly.Assembly.of(config)
  return parts.setup(aot.vocab_size(parts.settings.tokenizer), mesh).abstract_state["params"]


def test_target_names():
  environment = dict(os.environ)
  for name, chips, kind in [("v4-8", 4, "TPU v4"), ("v5p-8", 4, "TPU v5"),
                            ("v5p-128", 64, "TPU v5"), ("v5litepod-16", 16, "TPU v5 lite"),
                            ("v6e-8", 8, "TPU v6 lite"), ("2xv5p-64", 64, "TPU v5")]:
    t = targets.get(name)
    assert (len(t.devices), t.device_kind, t.platform) == (chips, kind, "tpu"), name
  assert targets.get("2xv5p-64").num_slices == 2
  # Loading libtpu left nothing in the environment: jax sets TPU_LIBRARY_PATH as it loads it,
  # and a run started from this process would load libtpu from there (and print its noise).
  assert dict(os.environ) == environment
  # Only `data` spans the slices (the data-center network): each data index is one slice.
  two = sharding.make_mesh(ml_collections.ConfigDict({"shape": (2, -1, 1)}),
                           targets.get("2xv5p-64").devices)
  assert dict(two.shape) == {"data": 2, "fsdp": 32, "tensor": 1}
  assert [{d.slice_index for d in two.devices[i].flat} for i in (0, 1)] == [{0}, {1}]
  with pytest.raises(errors.ConfigError, match="multiple of the 2 slices"):
    sharding.make_mesh(ml_collections.ConfigDict({"shape": (1, -1, 1)}),
                       targets.get("2xv5p-64").devices)
  assert targets.get("v5litepod-16").hbm_bytes == 16 * 2**30
  for bad in ("v5p-7", "v7x-8", "h100"):
    with pytest.raises(errors.UserError, match=r"unknown target .* use v4-N, v5p-N"):
      targets.get(bad)


# Per-device bytes (arguments + outputs - aliased + temporaries + generated code) of tiny at
# seq 128 (2 layers), by the jax version that compiled them (jax[tpu] pins libtpu: 0.10.2's is
# 0.0.42.1). Under that version a change of more than 10% is a change in what the step keeps,
# to look at; under another, a step may need less (a newer compiler), but not over 10% more
# than the newest figure here (then look, and record that version's figures).
_MEMORY = {"0.10.2": {("v5p-8", "train"): 47_141_600, ("v5p-8", "eval"): 14_298_816,
                      ("v5litepod-16", "train"): 19_070_464,
                      ("v5litepod-16", "eval"): 6_132_736}}


def _version(v: str) -> tuple[int, ...]:
  return tuple(int(p) for p in v.split(".")[:3])


def _check_memory(name: str, totals: dict[str, int], params_bytes: int) -> None:
  """The steps' memory per chip (`totals` by step) against _MEMORY, and what holds under any
  version: each step holds at least its chip's share of the parameters, and the train step
  (gradients, optimizer state, activations kept for the backward pass) more than the eval step."""
  newest = _MEMORY[max(_MEMORY, key=_version)]
  recorded = _MEMORY.get(jax.__version__)
  for step, total in totals.items():
    assert total <= 1.1 * newest[(name, step)], (step, total, newest[(name, step)])
    if recorded is not None:
      want = recorded[(name, step)]
      assert abs(total - want) <= 0.1 * want, (step, total, want)
  assert totals["train"] > totals["eval"] >= params_bytes, (totals, params_bytes)


# The shape of what libtpu 0.0.42.1 made of BERT-large's weight gradients on v5p-64 with FSDP
# 32 (96 such loops), cut down: the condition compares the loop counter with 16.
_WINDOWED = """
%wide.windowed_dot_general_cond_rs.95.clone (p: (bf16[8,128,4096], u32[])) -> pred[] {
  %constant.23830 = u32[]{:T(128)} constant(16), metadata={op_name="dot_general"}
  %wide.param.1666 = (bf16[8,128,4096], u32[]) parameter(0)
  %get-tuple-element.29451 = u32[]{:T(128)} get-tuple-element(%wide.param.1666), index=1
  ROOT %compare.642 = pred[]{:T(512)} compare(%get-tuple-element.29451, %constant.23830), direction=LT
}

ENTRY %main.1 (a: bf16[8,128,4096]) -> bf16[4096,32] {
  %while.287 = (bf16[8,128,4096]{2,1,0}, u32[]{:T(128)}) while(%tuple.20), condition=%wide.windowed_dot_general_cond_rs.95.clone, body=%wide.windowed_dot_general_body_rs.95.clone.sunk, metadata={op_name="dot_general"}
  %while.3 = (s32[], f32[8,16]{1,0}) while(%tuple.23), condition=%region_3.10, body=%region_2.9
}
"""


def test_windowed_einsum_loops_are_found_with_their_iterations():
  assert hlo.windowed_einsum_loops(_WINDOWED) == {"16": 1}  # the layer loop is not one
  assert hlo.windowed_einsum_loops("") == {}


@pytest.mark.slow
@pytest.mark.parametrize("name,mesh", [("v5p-8", (-1, 1, 1)), ("v5litepod-16", (2, -1, 1))])
def test_tpu_steps_compile_with_splash_on_a_multi_chip_mesh(name, mesh):
  """`auto` is splash on TPU (training too, with attention dropout 0); it must be in both
  programs, no all-gather may be bigger than one parameter (no whole-model gather), and the
  memory per chip stays where it was (_check_memory). With FSDP (v5litepod-16: data 2 x fsdp 8)
  the gradients of the blocks come back reduce-scattered."""
  target = targets.get(name)
  config = _config()
  config.mesh.shape = mesh
  tree = _abstract_params(config, target)
  biggest = max(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
  params_bytes = sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
                     for x in jax.tree.leaves(tree))
  totals = {}
  matrices = sum(1 for x in jax.tree.leaves(tree["blocks"])  # stored sharded over fsdp
                 if x.ndim >= 2 and "fsdp" in jax.tree.leaves(tuple(x.sharding.spec)))
  steps = aot.compile_steps(config, target)
  for step in steps:
    r = step.report
    _check_predicted(r)
    assert r["attention_kernels"] == ["splash"], r
    assert r["dtype"] == "bfloat16" and r["devices"] == len(target.devices) and r["fits"]
    assert hlo.largest(step.hlo_text, "all-gather") <= biggest
    if r["step"] == "train" and r["mesh"]["fsdp"] > 1:
      # Every weight matrix of the blocks (the bulk of a model); before, none was.
      reduce_scatters = r["collectives"].get("reduce-scatter", {}).get("count", 0)
      assert reduce_scatters >= matrices, r["collectives"]
    # Windowed einsums (loops XLA makes of a matmul and its collective), if any, are reported
    # with their iterations: the compiler's FLOP count sees one iteration of each.
    assert all(k.isdigit() and int(k) > 1 for k in r["windowed_einsum_loops"]), r
    totals[r["step"]] = r["memory_bytes"]["total"]
  _check_memory(name, totals, params_bytes)
  run = aot.time_to_train(config, steps, target)
  train = next(s.report for s in steps if s.report["step"] == "train")
  assert run["train_steps"] == config.train.steps and run["chips"] == len(target.devices)
  assert run["predicted_hours"] == pytest.approx(
      config.train.steps * train["predicted"]["step_s"] / 3600)
  assert run["chip_hours"] == pytest.approx(run["predicted_hours"] * len(target.devices))


def _check_predicted(r: dict):
  """The report's predicted time: every class named, their times adding up to the step's, and
  tokens/s and MFU from it (parallel/roofline.py)."""
  p = r["predicted"]
  assert set(p["by_class_s"]) == {"matmul", "attention", "elementwise", "copies",
                                  "collectives"}, p
  assert sum(p["by_class_s"].values()) == pytest.approx(p["step_s"]) and p["step_s"] > 0
  assert p["by_class_s"]["matmul"] > 0 and p["kernel_runs"] >= r["kernels"]["count"], p
  tokens = r["batch"] * r["seq_len"] / r["devices"]
  assert p["tokens_per_s_per_device"] == pytest.approx(tokens / p["step_s"])
  assert 0 < p["mfu"] < 1, p


@pytest.mark.slow  # two compiles for a TPU slice
def test_each_fused_default_is_predicted_faster_than_the_path_it_replaced():
  """A fusion is the default on TPU and GPU only where the predicted step time falls
  (parallel/roofline.py): LayerNorm's written-out backward ('auto' there) against jax's, the
  train step compiled for v5p-8."""
  target = targets.get("v5p-8")
  seconds = {}
  for backward in ("auto", "autodiff"):
    config = _config(layer_norm_backward=backward, attention_dropout_rate=0.0, num_layers=1)
    [step] = aot.compile_steps(config, target, which=("train",))
    seconds[backward] = step.report["predicted"]["step_s"]
  assert seconds["auto"] < seconds["autodiff"], seconds


# A program cut down: a loop fusion whose body holds an add and a nested fusion (as TPU programs
# have; neither a kernel of its own), a cuBLAS call, and a copy (no kernel).
_KERNELS = """
%fused_negate (param_0.1: f32[4,8]) -> f32[4,8] {
  %param_0.1 = f32[4,8]{1,0} parameter(0)
  ROOT %negate.1 = f32[4,8]{1,0} negate(%param_0.1)
}

%fused_add (param_0: f32[4,8], param_1: f32[4,8]) -> f32[4,8] {
  %param_0 = f32[4,8]{1,0} parameter(0)
  %param_1 = f32[4,8]{1,0} parameter(1)
  %inner = f32[4,8]{1,0} fusion(%param_0), kind=kLoop, calls=%fused_negate
  ROOT %add.1 = f32[4,8]{1,0} add(%inner, %param_1)
}

ENTRY %main (a: f32[4,8], b: bf16[8,16]) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = bf16[8,16]{1,0} parameter(1)
  %loop_add_fusion = f32[4,8]{1,0} fusion(%a, %a), kind=kLoop, calls=%fused_add
  %gemm = (bf16[4,16]{1,0}, s8[256]{0}) custom-call(%loop_add_fusion, %b), custom_call_target="__cublas$gemm"
  ROOT %copy = f32[4,8]{1,0} copy(%loop_add_fusion)
}
"""


def test_kernels_are_the_fusions_and_calls_with_the_bytes_they_touch():
  # fusion: 3 x 128 bytes (two reads, one write); the gemm: 128 + 256 read, 128 + 256 written
  assert hlo.kernels(_KERNELS) == {"count": 2, "bytes": 3 * 128 + 128 + 256 + 128 + 256}
  assert hlo.kernels("") == {"count": 0, "bytes": 0}


@pytest.mark.slow
def test_pallas_gpu_kernel_compiles_on_eight_h100():
  """The command, as a user runs it: this process started jax without the CUDA plugin (no GPU
  here, parallel/plugins.py), the command loads it for its GPU target, and says nothing of
  the CUDA driver this machine lacks."""
  overrides = ["--config.model.num_layers=2", "--config.data.seq_len=128",
               "--config.model.max_position_embeddings=128",
               "--config.masking.max_predictions_per_seq=38",
               "--config.model.attention_impl=pallas_gpu"]
  out = subprocess.run(
      [sys.executable, "-m", "mlmjax.compile", "--config=configs/tiny.py", "--target=h100x8",
       *overrides], cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=600,
      check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stderr == ""
  reports = [json.loads(line) for line in out.stdout.splitlines()]
  assert [r["step"] for r in reports] == ["train", "eval", "run"]
  for r in reports[:2]:
    _check_predicted(r)
    assert r["predicted"]["by_class_s"]["attention"] > 0, r  # the Pallas kernels
    assert r["attention_kernels"] == ["pallas_gpu"], r
    assert r["kernels"]["count"] > 10 and r["kernels"]["bytes"] > 0, r
    assert r["device"] == "NVIDIA H100 80GB HBM3" and r["devices"] == 8 and r["fits"]


def test_sharded_splash_matches_the_reference_on_eight_devices():
  """The shard_map around the kernel (rows over data x fsdp, heads over tensor) computes the
  same attention as the einsum oracle: run here in interpret mode on 8 CPU devices."""
  mesh = jax.make_mesh((2, 2, 2), sharding.MESH_AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(4, 128, 2, 16)), jnp.float32) for _ in range(3))
  seg = np.ones((4, 128), np.int32)
  seg[0, 60:] = 2
  seg[1, 100:] = 0
  seg = jnp.asarray(seg)

  @jax.jit
  def sharded(q, k, v, seg):
    return attention.attend(q, k, v, seg, "splash", interpret=True, window=32, local=True,
                            target=train_state.target(mesh))

  got = sharded(q, k, v, seg)
  want = attention.reference(q, k, v, seg, window=32, local=True)
  real = np.asarray(seg > 0)[:, :, None, None]
  np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), atol=2e-5)


@pytest.mark.slow
def test_a_config_too_big_for_the_chip_is_one_line():
  """The command, as a user runs it: 65,536 rows on one v5e chip (16 GiB) cannot fit."""
  out = subprocess.run(
      [sys.executable, "-m", "mlmjax.compile", "--config=configs/tiny.py",
       "--target=v5litepod-1", "--config.train.batch_size=65536", "--config.model.num_layers=2"],
      cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=300, check=False)
  assert out.returncode == 1 and out.stdout == "", out
  line = out.stderr.strip().splitlines()[-1]
  assert line.startswith("error: the train step needs "), out.stderr[-2000:]
  assert "on v5litepod-1 (TPU v5 lite, 16.00 GiB per device" in line and "GiB over" in line
  assert "Traceback" not in out.stderr
