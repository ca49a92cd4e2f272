#!/usr/bin/env bash
# Everything docs/performance.md's GPU section reports, on one NVIDIA GPU, in one go: the
# attention kernels compiled for the GPU against the einsum oracle, then `mlmjax.bench` on
# BERT-base seq 128 and BERT-large seq 512 in bfloat16 from prepared data with 8 input worker
# processes (each attention kernel, with and without remat), the input wait of a real training
# run, a profile trace of three steps, and the rest of the model tests.
#
#   benchmarks/gpu.sh OUT PREPARED      # PREPARED: python -m mlmjax.prepare --out=PREPARED
#                                       #   --source=... --config=configs/bert.py:base
#   ONLY="base_cudnn large_cudnn" benchmarks/gpu.sh OUT PREPARED    # some parts only
#
# Ordered by what matters most, each part under its own time limit and all of them under
# SECONDS_LEFT (default: no limit), results appended as they come (OUT/bench.jsonl: one mlmjax.bench JSON line per variant, tagged; OUT/*.log), so a lease
# that ends early still leaves the first figures. Attention dropout is 0 except in the
# `preset` variant: no fused kernel takes it (models/attention.py).
set -u
OUT=${1:?usage: benchmarks/gpu.sh OUT PREPARED}
DATA=${2:?usage: benchmarks/gpu.sh OUT PREPARED}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# one compilation per program: the bench's timed step and its training run share it
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/mlmjax_gpu_cache}
PY=${PYTHON:-python3}
DEADLINE=$((SECONDS + ${SECONDS_LEFT:-100000}))
limit() {  # the smaller of $1 and the time left (less 10 s to print the table); 0: skip
  local left=$((DEADLINE - SECONDS - 10))
  if ((left < 20)); then echo 0; elif (($1 < left)); then echo "$1"; else echo "$left"; fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv \
  | tee "$OUT/device.txt"
"$PY" -c "import jax, jaxlib, flax, optax, orbax.checkpoint as o, grain
print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'flax', flax.__version__,
      'optax', optax.__version__, 'orbax', o.__version__, 'grain', grain.__version__)
print(jax.devices())
assert jax.default_backend() == 'gpu', 'no GPU: nothing to measure'" 2>&1 | tee -a "$OUT/device.txt"
((PIPESTATUS[0] == 0)) || exit 1

want() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }  # part $1 is to run

tests() {  # $1: part, $2: seconds, then pytest arguments
  want "$1" || return 0
  local limit; limit=$(limit "$2"); shift 2
  ((limit)) || return
  MLMJAX_TEST_ON_GPU=1 timeout "$limit" "$PY" -m pytest -q -n 0 -p no:cacheprovider "$@" 2>&1 \
    | tail -25 | tee -a "$OUT/tests.log"
}

BASE=(--config=configs/bert.py:base --config.train.batch_size=256)
LARGE=(--config=configs/bert.py:large --config.data.seq_len=512
       --config.masking.max_predictions_per_seq=80 --config.train.batch_size=64)
FUSED=(--config.model.attention_dropout_rate=0)
bench() {  # $1: part, $2: seconds, $3: --config=..., then more mlmjax.bench flags
  want "$1" || return 0
  local tag=$1 limit config=$3; limit=$(limit "$2"); shift 3
  ((limit)) || return
  echo "== $tag" | tee -a "$OUT/bench.log"
  timeout "$limit" "$PY" -m mlmjax.bench "$config" --config.train.phases="()" \
    --config.data.source="prepared:$DATA" --config.data.worker_count=8 \
    --config.model.dtype=bfloat16 --steps=20 --input_seconds=0 --trace="/tmp/trace_$tag" "$@" \
    > "/tmp/$tag.json" 2>> "$OUT/bench.log"
  echo "rc=$?" >> "$OUT/bench.log"
  # the JSON line, tagged; the trace's Perfetto file, up from the folders jax nests it in
  "$PY" -c "import json,sys; r=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]);
r['variant']=sys.argv[2]; print(json.dumps(r))" "/tmp/$tag.json" "$tag" >> "$OUT/bench.jsonl" \
    2>> "$OUT/bench.log"
  find "/tmp/trace_$tag" -name perfetto_trace.json.gz -exec cp {} "$OUT/$tag.trace.json.gz" \;
}

tests kernel_tests 90 tests/models/test_attention.py -k "not refused"
bench base_cudnn 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn
bench large_cudnn 120 "${LARGE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn
# dropout's random bits from the GPU's own generator (RngBitGenerator) instead of threefry:
# train.dropout_rng (jax's JAX_DEFAULT_PRNG_IMPL is not read: the run's keys name their own)
bench base_cudnn_rbg 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --config.train.dropout_rng=rbg
# LayerNorm's backward as jax derives it, against the written-out default
bench base_cudnn_ln_autodiff 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --config.model.layer_norm_backward=autodiff
# ModernBERT-base at its 1,024-token rows, the attention kernel `auto` picks for its local
# and global layers
bench modernbert_1024 150 --config=configs/modernbert.py:base --config.train.batch_size=32
# the host pipeline alone, and the input wait of a 150-step training run
bench base_cudnn_input 200 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --input_seconds=5 --loop_steps=150
bench base_pallas 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=pallas_gpu
bench base_preset_xla 90 "${BASE[@]}" --config.model.attention_impl=xla
bench base_cudnn_remat 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --config.model.remat=dots_saveable
bench large_cudnn_remat 180 "${LARGE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --config.model.remat=full
bench base_xla 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=xla
bench large_pallas 120 "${LARGE[@]}" "${FUSED[@]}" --config.model.attention_impl=pallas_gpu
bench base_cudnn_b512 90 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --config.train.batch_size=512
tests model_tests 150 tests/models/test_model.py tests/training/test_causal_lm.py

# train.fit='auto' on the GPU itself (issue 29): the device's memory limit as its runtime
# reports it, the choice for BERT-large seq 512 at batch 112, 10 steps and a checkpoint; then
# the resume, which takes the choice from WORKDIR/fit.json and its compiled steps from the
# compilation cache. The progress log's peak memory is what the device held.
FIT=(--config=configs/bert.py:large --config.data.seq_len=512 --config.train.batch_size=112
     --config.masking.max_predictions_per_seq=80 --config.train.phases="()" "${FUSED[@]}"
     --config.data.source="prepared:$DATA" --config.data.worker_count=8
     --config.model.dtype=bfloat16 --config.model.attention_impl=cudnn --config.train.fit=auto
     --config.train.steps=20 --config.train.log_every_steps=5 --config.train.eval_every_steps=20
     --config.train.eval_batches=1 --config.train.checkpoint_every_steps=10)
fit() {  # $1: part, $2: seconds, $3: workdir, then more mlmjax.main flags
  want "$1" || return 0
  local tag=$1 workdir=$3 limit; limit=$(limit "$2"); shift 3
  ((limit)) || return
  echo "== $tag" >> "$OUT/fit.log"
  local start=$SECONDS rc
  # Into a file, not a pipe: input workers that outlive a timeout would hold a pipe open.
  timeout "$limit" "$PY" -m mlmjax.main "${FIT[@]}" --workdir="$workdir" "$@" \
    > "/tmp/$tag.log" 2>&1
  rc=$?
  grep -E "Fit|Model:|step [0-9]+/|eval|rror|Resum|Traceback" "/tmp/$tag.log" >> "$OUT/fit.log"
  echo "$tag: exit $rc, $((SECONDS - start)) s" | tee -a "$OUT/fit.log"
  cp "$workdir/fit.json" "$OUT/$tag.fit.json" 2>/dev/null
}
fit fit_first 240 /tmp/fit --stop_after=10
fit fit_resume 150 /tmp/fit
# The search itself on the GPU: a 40 GiB budget (an A100-40GB's), which one micro-batch without
# remat (89.5 GiB) does not fit; the training steps show the device's peak beside the choice.
fit fit_search 420 /tmp/fit40 --config.train.fit_memory_gib=40 --config.train.steps=10

# The masking strategies' input on this host (issue 27): finished batches per second of
# BERT-base rows from data prepared with word annotations (mlmjax.prepare with
# --config.masking.strategy=syntax), 8 worker processes; then the slowest one, contextual,
# feeding the GPU in a training run (input wait).
if want strategies_input; then
  for s in random syntax semantic contextual entity; do
    limit=$(limit 60); ((limit)) || break
    extra=(); [[ $s == entity ]] && extra=(--config.masking.entity_ner=True
                                           --config.masking.entity_heuristic=False)
    timeout "$limit" "$PY" -m mlmjax.input_bench "${BASE[@]}" --config.data.source="prepared:$DATA" \
      --config.data.worker_count=8 --config.masking.strategy=$s "${extra[@]}" --seconds=5 \
      --noraw_too > "/tmp/input_$s.json" 2>> "$OUT/bench.log"
    tail -1 "/tmp/input_$s.json" | tee -a "$OUT/input.jsonl"
  done
fi
bench contextual_input 200 "${BASE[@]}" "${FUSED[@]}" --config.model.attention_impl=cudnn \
  --config.masking.strategy=contextual --input_seconds=5 --loop_steps=100
"$PY" - "$OUT/bench.jsonl" <<'EOF'
import json, sys
pct = lambda x: "" if x is None else f"{x:.1%}"
print(f"{'variant':18} {'step ms':>8} {'tok/s':>9} {'seq/s':>7} {'MFU':>6} {'wait':>6} {'GiB':>5}")
for line in open(sys.argv[1]):
  r = json.loads(line)
  print(f"{r['variant']:18} {r['step_ms_median']:8.1f} {r['tokens_per_sec']:9.0f}"
        f" {r['tokens_per_sec'] / r['seq_len']:7.0f} {pct(r['mfu_rated_peak']):>6}"
        f" {pct(r.get('input_wait_fraction')):>6} {(r['peak_memory_bytes'] or 0) / 2**30:5.1f}")
EOF
