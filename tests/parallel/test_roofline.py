"""The predicted step time (mlmjax/parallel/roofline.py) of programs small enough to time by
hand from an H100's datasheet: 989 TFLOP/s of dense bfloat16, 3.35 TB/s of HBM, NVLink's
900 GB/s both ways (450 one way). The compile report's use of it: tests/parallel/
test_compile_targets.py (a TPU slice and a GPU node)."""

import pytest

from mlmjax import errors
from mlmjax.models import chip_rates
from mlmjax.parallel import roofline

H100 = "NVIDIA H100 80GB HBM3"
PEAK, HBM, LINK = 989e12, 3.35e12, 450e9
MIB = 2**20
ONE = dict.fromkeys(roofline.CLASSES, 1.0)  # the rooflines before calibration

# A 3-iteration loop whose body slices its layer's f32[128,256] out of a stacked f32[3,128,256]
# and runs a 1024^3 bf16 matmul; then an all-reduce of 4 MiB over 4 devices, started before a
# 4 MiB elementwise kernel and finished after it; then a copy (a layout change) of 4 MiB.
_PROGRAM = """
%fused_dot (p0: bf16[1024,1024], p1: bf16[1024,1024]) -> bf16[1024,1024] {
  %p0 = bf16[1024,1024]{1,0} parameter(0)
  %p1 = bf16[1024,1024]{1,0} parameter(1)
  ROOT %dot.1 = bf16[1024,1024]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_slice (s0: f32[3,128,256], s1: s32[]) -> f32[128,256] {
  %s0 = f32[3,128,256]{2,1,0} parameter(0)
  %s1 = s32[] parameter(1)
  %zero = s32[] constant(0)
  %ds = f32[1,128,256]{2,1,0} dynamic-slice(%s0, %s1, %zero, %zero), dynamic_slice_sizes={1,128,256}
  ROOT %r = f32[128,256]{1,0} bitcast(%ds)
}

%fused_negate (n0: f32[1024,1024]) -> f32[1024,1024] {
  %n0 = f32[1024,1024]{1,0} parameter(0)
  ROOT %neg = f32[1024,1024]{1,0} negate(%n0)
}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%body (state: (s32[], f32[3,128,256], bf16[1024,1024])) -> (s32[], f32[3,128,256], bf16[1024,1024]) {
  %state = (s32[], f32[3,128,256]{2,1,0}, bf16[1024,1024]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %w = f32[3,128,256]{2,1,0} get-tuple-element(%state), index=1
  %a = bf16[1024,1024]{1,0} get-tuple-element(%state), index=2
  %layer = f32[128,256]{1,0} fusion(%w, %i), kind=kLoop, calls=%fused_slice
  %mm = bf16[1024,1024]{1,0} fusion(%a, %a), kind=kOutput, calls=%fused_dot
  ROOT %next = (s32[], f32[3,128,256]{2,1,0}, bf16[1024,1024]{1,0}) tuple(%i, %w, %mm)
}

%cond (c: (s32[], f32[3,128,256], bf16[1024,1024])) -> pred[] {
  %c = (s32[], f32[3,128,256]{2,1,0}, bf16[1024,1024]{1,0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %three), direction=LT
}

ENTRY %main (init: (s32[], f32[3,128,256], bf16[1024,1024]), x: f32[1024,1024]) -> f32[1024,1024] {
  %init = (s32[], f32[3,128,256]{2,1,0}, bf16[1024,1024]{1,0}) parameter(0)
  %x = f32[1024,1024]{1,0} parameter(1)
  %loop = (s32[], f32[3,128,256]{2,1,0}, bf16[1024,1024]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %ar-start = f32[1024,1024]{1,0} all-reduce-start(%x), replica_groups=[1,4]<=[4], to_apply=%add
  %negated = f32[1024,1024]{1,0} fusion(%x), kind=kLoop, calls=%fused_negate
  %ar-done = f32[1024,1024]{1,0} all-reduce-done(%ar-start)
  ROOT %copy.1 = f32[1024,1024]{0,1} copy(%ar-done)
}
"""


def test_each_kernel_takes_its_roofline_time_and_a_collective_what_outlasts_the_kernels_beside_it():
  matmul = 2 * 1024**3 / PEAK  # compute-bound: 6 MiB moved take less
  assert 3 * 2 * MIB / HBM < matmul
  # the slice of one layer (not the stack), the counter, the layer written
  layer = (128 * 256 * 4 + 4 + 128 * 256 * 4) / HBM
  negate = 2 * 4 * MIB / HBM
  all_reduce = 2 * 3 / 4 * 4 * MIB / LINK  # a ring's bytes over 4 devices
  copy = 2 * 4 * MIB / HBM
  p = roofline.predict(_PROGRAM, H100, "bfloat16", devices=4, efficiency=ONE)
  expected = {"matmul": 3 * matmul, "elementwise": 3 * layer + negate,
              "copies": copy, "collectives": all_reduce - negate, "attention": 0.0}
  assert p.by_class_s == pytest.approx(expected, rel=1e-9)
  assert p.step_s == pytest.approx(sum(expected.values()), rel=1e-9)
  assert p.kernels == 3 + 3 + 1 + 1


def test_the_loop_runs_as_often_as_its_condition_says_without_a_known_trip_count():
  text = _PROGRAM.replace(', backend_config={"known_trip_count":{"n":"3"}}', "")
  assert roofline.predict(text, H100, "bfloat16", 4, efficiency=ONE).by_class_s[
      "matmul"] == pytest.approx(
      3 * 2 * 1024**3 / PEAK)


def test_a_synchronous_collective_is_added_whole():
  text = (_PROGRAM.replace("all-reduce-start(%x)", "all-reduce(%x)")
          .replace("  %ar-done = f32[1024,1024]{1,0} all-reduce-done(%ar-start)\n", "")
          .replace("copy(%ar-done)", "copy(%ar-start)"))
  assert roofline.predict(text, H100, "bfloat16", 4, efficiency=ONE).by_class_s[
      "collectives"] == pytest.approx(2 * 3 / 4 * 4 * MIB / LINK)


# cuDNN's fused attention, forward and backward, on [8, 128, 12, 64] q, k, v.
_ATTENTION = """
ENTRY %main (q: bf16[8,128,12,64], k: bf16[8,128,12,64], v: bf16[8,128,12,64]) -> bf16[8,128,12,64] {
  %q = bf16[8,128,12,64]{3,2,1,0} parameter(0)
  %k = bf16[8,128,12,64]{3,2,1,0} parameter(1)
  %v = bf16[8,128,12,64]{3,2,1,0} parameter(2)
  %fwd = (bf16[8,128,12,64]{3,2,1,0}, u8[0]{0}) custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaScaleBiasSoftmax"
  %out = bf16[8,128,12,64]{3,2,1,0} get-tuple-element(%fwd), index=0
  %bwd = (bf16[8,128,12,64]{3,2,1,0}, bf16[8,128,12,64]{3,2,1,0}, bf16[8,128,12,64]{3,2,1,0}, u8[0]{0}) custom-call(%q, %k, %v, %out), custom_call_target="__cudnn$fmhaScaleBiasSoftmaxBackward"
  ROOT %dq = bf16[8,128,12,64]{3,2,1,0} get-tuple-element(%bwd), index=0
}
"""


def test_fused_attention_takes_a_third_of_the_model_attention_flops_forward_two_thirds_back():
  flops = 3e12  # compute-bound: a few MiB take microseconds, these take milliseconds
  p = roofline.predict(_ATTENTION, H100, "bfloat16", 1, attention_flops=flops, efficiency=ONE)
  assert p.by_class_s["attention"] == pytest.approx(flops / PEAK)
  # forward alone (an eval step): all of them forward
  text = _ATTENTION.replace('"__cudnn$fmhaScaleBiasSoftmaxBackward"', '"__cudnn$fmhaSoftmax"')
  assert roofline.predict(text, H100, "bfloat16", 1, attention_flops=flops,
                          efficiency=ONE).by_class_s["attention"] == pytest.approx(flops / PEAK)
  # without FLOPs, a kernel is its bytes: q, k, v and the output forward; and back q, k, v,
  # the output, and dq, dk, dv
  nbytes = 8 * 128 * 12 * 64 * 2
  p = roofline.predict(_ATTENTION, H100, "bfloat16", 1, efficiency=ONE)
  assert p.by_class_s["attention"] == pytest.approx((4 + 7) * nbytes / HBM)
  # the split shows where one kernel is bound by its bytes and the other by its FLOPs: the
  # forward's third of 5.25 GFLOP takes less than its bytes, the backward's two thirds more
  p = roofline.predict(_ATTENTION, H100, "bfloat16", 1, attention_flops=5.25e9, efficiency=ONE)
  assert 1.75e9 / PEAK < 4 * nbytes / HBM and 3.5e9 / PEAK > 7 * nbytes / HBM
  assert p.by_class_s["attention"] == pytest.approx(4 * nbytes / HBM + 3.5e9 / PEAK)


def test_each_class_is_divided_by_its_efficiency_the_calibrated_ones_by_default():
  plain = roofline.predict(_PROGRAM, H100, "bfloat16", 4, efficiency=ONE)
  half = roofline.predict(_PROGRAM, H100, "bfloat16", 4, efficiency={**ONE, "matmul": 0.5})
  assert half.by_class_s["matmul"] == pytest.approx(2 * plain.by_class_s["matmul"])
  assert half.by_class_s["elementwise"] == pytest.approx(plain.by_class_s["elementwise"])
  calibrated = roofline.predict(_PROGRAM, H100, "bfloat16", 4)
  for kind in ("matmul", "elementwise", "copies"):
    assert calibrated.by_class_s[kind] == pytest.approx(
        plain.by_class_s[kind] / roofline.EFFICIENCY[kind])


def test_a_chip_or_dtype_without_published_rates_is_one_line():
  with pytest.raises(errors.UserError, match=r"^no published rates for 'TPU v9' to predict"
                     r" time from \(mlmjax knows TPU v4, TPU v5 lite, TPU v5, TPU v6 lite,"
                     r" A100, H100, H200\)$"):
    roofline.predict(_PROGRAM, "TPU v9", "bfloat16", 4)
  with pytest.raises(errors.UserError, match=r"^TPU v5 publishes no float32 peak to predict"
                     r" time from \(it has bfloat16's: set model.dtype='bfloat16'\)$"):
    chip_rates.get("TPU v5", "float32")
  assert chip_rates.get("NVIDIA H200", "float32")[1] == 67e12


# Two matmuls as XLA writes them for a TPU (from the tiny preset's train step compiled for
# v5p-8): the QKV projection, [512 tokens, 128] x [128, 3 x 4 heads x 32], as a convolution
# with windows of size 3x4 over padded dims; and attention's scores for 8 rows, 4 heads, 64 x 64
# positions, 32 wide, as a base-dilated convolution with one real tap in each 8x4 window.
_TPU_MATMULS = """
%fused_qkv (q0: bf16[8,64,128,1,1], q1: bf16[3,4,32,128,1]) -> bf16[8,64,3,4,32] {
  %q0 = bf16[8,64,128,1,1]{2,1,4,3,0:T(8,128)(2,1)} parameter(0)
  %q1 = bf16[3,4,32,128,1]{3,2,1,0,4:T(8,128)(2,1)} parameter(1)
  ROOT %convolution.72 = bf16[8,64,3,4,32]{1,4,3,2,0:T(8,128)(2,1)} convolution(%q0, %q1), window={size=1x3x4 pad=0_0x2_2x3_3 rhs_reversal=0x1x1}, dim_labels=0bf12_12oi0->0b12f
}

%fused_scores (s0: bf16[8,64,4,32], s1: bf16[8,64,4,32]) -> f32[8,4,64,64] {
  %s0 = bf16[8,64,4,32]{1,3,2,0:T(8,128)(2,1)} parameter(0)
  %s1 = bf16[8,64,4,32]{1,3,2,0:T(8,128)(2,1)} parameter(1)
  ROOT %convolution-base-dilated.35 = f32[8,4,64,64]{2,3,1,0:T(8,128)} convolution(%s0, %s1), window={size=8x4 stride=7x3 lhs_dilate=8x4}, dim_labels=0b1f_0o1i->01bf
}

ENTRY %main (x: bf16[8,64,128,1,1], w: bf16[3,4,32,128,1], q: bf16[8,64,4,32], k: bf16[8,64,4,32]) -> f32[8,4,64,64] {
  %x = bf16[8,64,128,1,1]{2,1,4,3,0:T(8,128)(2,1)} parameter(0)
  %w = bf16[3,4,32,128,1]{3,2,1,0,4:T(8,128)(2,1)} parameter(1)
  %q = bf16[8,64,4,32]{1,3,2,0:T(8,128)(2,1)} parameter(2)
  %k = bf16[8,64,4,32]{1,3,2,0:T(8,128)(2,1)} parameter(3)
  %qkv = bf16[8,64,3,4,32]{1,4,3,2,0:T(8,128)(2,1)} fusion(%x, %w), kind=kOutput, calls=%fused_qkv
  ROOT %scores = f32[8,4,64,64]{2,3,1,0:T(8,128)} fusion(%q, %k), kind=kOutput, calls=%fused_scores
}
"""


def test_tpu_convolutions_count_the_flops_of_the_matmuls_they_are():
  qkv, scores = 2 * 512 * 128 * 384, 2 * 8 * 4 * 64 * 64 * 32
  program = roofline._Program(_TPU_MATMULS)  # pylint: disable=protected-access
  kernels = [roofline._kernel(program, i, 1)  # pylint: disable=protected-access
             for i in program.by_computation["main"] if i.op == "fusion"]
  assert [(k.kind, k.flops) for k in kernels] == [("matmul", qkv), ("matmul", scores)]


# TPU's asynchronous slice (a prefetch of 4 MiB of weights into on-chip memory) around a 1 MiB
# elementwise kernel, and a ConcatBitcast (two buffers named as one: no work).
_PREFETCH = """
%fused_negate (n0: f32[512,512]) -> f32[512,512] {
  %n0 = f32[512,512]{1,0} parameter(0)
  ROOT %neg = f32[512,512]{1,0} negate(%n0)
}

ENTRY %main (w: s8[8388608], x: f32[512,512]) -> f32[512,512] {
  %w = s8[8388608]{0} parameter(0)
  %x = f32[512,512]{1,0} parameter(1)
  %slice-start.1 = ((s8[8388608]{0}), s8[4194304]{0:S(1)}, s32[]{:S(2)}) slice-start(%w), slice={[0:4194304]}
  %negated = f32[512,512]{1,0} fusion(%x), kind=kLoop, calls=%fused_negate
  %slice-done.1 = s8[4194304]{0:S(1)} slice-done(%slice-start.1)
  %both = f32[1024,512]{1,0} custom-call(%negated, %x), custom_call_target="ConcatBitcast"
  ROOT %out = f32[512,512]{1,0} copy(%negated)
}
"""


def test_an_asynchronous_slice_is_a_copy_beside_the_kernels_and_a_concat_bitcast_is_free():
  p = roofline.predict(_PREFETCH, "TPU v5", "bfloat16", 4, efficiency=ONE)
  hbm = 2765e9  # v5p's datasheet
  negate = 2 * MIB / hbm
  slice_, copy = 2 * 4 * MIB / hbm, 2 * MIB / hbm
  assert p.by_class_s["elementwise"] == pytest.approx(negate)
  assert p.by_class_s["copies"] == pytest.approx((slice_ - negate) + copy)
