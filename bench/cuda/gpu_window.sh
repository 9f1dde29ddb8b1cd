#!/bin/bash
# bench/cuda/gpu_window.sh — issue 30's whole GPU window in ONE device call, every step
# time-boxed against a deadline so that a hang cannot eat the window. Run on the GPU machine
# (one H100/H200, CUDA 13, python3 with PyTorch; no -dev packages, no network), from the
# repository root, with carry [".gpu"]:
#
#   here:   sh bench/cuda/gpu_prepare.sh && sh bench/cuda/gpu_carry.sh    # ~2 min + the build
#   there:  bash bench/cuda/gpu_window.sh                                  # <= WINDOW s
#
# gpu_carry.sh packs a CUDA build made HERE (build-gpu: Release, sm_90, naive cpu GEMM, no
# MPI) into .gpu/build-gpu.tar.xz, saving the build's minutes of GPU time. Its paths are
# absolute (/work/main/build-gpu: ctest's files, rpaths), so this script links /work/main to
# the copy it runs in. If the carried programs do not start there (other system libraries),
# it builds there instead (bench/cuda/gpu_session.sh build, 3-5 min on 16 cores).
#
# Steps, in order: the environment and a smoke run; the device suites with
# REMAT_TEST_DEVICE=cuda (ctest); the GEMM bench (linears vs cuBLAS); `remat train --device
# cuda` (loss curve, --trace); `remat bench --device cuda` on GPT L=12 D=768 H=12 T=1024 B=8
# in f32 and bf16 autocast against bench/cuda/torch_gpt.py, and its per-kernel profile
# (--profile, f32, none and block); bf16 with cuDNN's attention (REMAT_CUDA_ATTENTION=cudnn:
# its attention suites, step and profile); compute-sanitizer on the
# attention kernels and the offload test; the strategy table on a small GPT.
# What comes back ($OUT, at most 8 files): summary.txt (one line per step: rc, seconds),
# test.log, gemm.log, train.log, bench.log, sanitizer.log, ncu.log, files.tgz (JSON results, the
# per-step training log, the allocator trace).
# Environment: WINDOW (s, default 450), REPS (default 5), OUT (default ./gpu-out), SUITE_BOX
# (s for the device suites, default 150), SKIP (step names or globs to leave out, e.g.
# SKIP='train* torch-*' for a window that reruns only the suites and remat's benches).
set -u
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
FILES=$(mktemp -d)
START=$(date +%s)
DEADLINE=$((START + ${WINDOW:-450}))
REPS=${REPS:-5}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# the carried build expects /work/main
if [ "$ROOT" != /work/main ]; then
  if [ -e /work/main ] && [ "$(readlink -f /work/main)" != "$ROOT" ]; then
    note "gpu_window: /work/main exists and is not this copy; the carried build cannot run"
  else
    mkdir -p /work && ln -sfn "$ROOT" /work/main
  fi
fi
cd /work/main 2>/dev/null || cd "$ROOT" || exit 2
BUILD=build-gpu
CARRY=$(pwd)/.gpu

# our programs get .gpu/lib (Criterion, cJSON, PCRE2, zlib, libgomp) and cuBLAS's folder;
# python3 (PyTorch) gets neither
CUBLAS_DIR=$(dirname "$(find /usr/local/cuda/lib64/ /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.1[0-9]*' 2>/dev/null | head -1)" 2>/dev/null)
LDP="$CARRY/lib:${CUBLAS_DIR:-/usr/local/cuda/lib64}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# step NAME SECONDS LOG CMD...: runs CMD with the lesser of SECONDS and what is left of the
# window, appending to LOG; one summary line per step
step() {
  # local: the callers' loops use $name too (window 9's variant steps were misnamed)
  local name=$1 want=$2 log=$3 pat left t s0 rc; shift 3
  set -f  # SKIP's globs match step names, not files
  for pat in ${SKIP:-}; do
    # shellcheck disable=SC2254
    case $name in $pat) set +f; note "SKIP $name"; return 0 ;; esac
  done
  set +f
  left=$((DEADLINE - $(date +%s)))
  if [ "$left" -lt 8 ]; then note "SKIP $name (window spent)"; return 124; fi
  t=$want; [ "$t" -gt "$left" ] && t=$left
  echo "== $(date -u +%T) $name (<= ${t}s): $*" >> "$log"
  s0=$(date +%s)
  timeout -k 5 "$t" "$@" >> "$log" 2>&1
  rc=$?
  note "$(printf '%-28s rc %3d  %4d s  (limit %d s)' "$name" "$rc" $(( $(date +%s) - s0 )) "$t")"
  return $rc
}
pack() { tar czf "$OUT/files.tgz" -C "$FILES" . 2>/dev/null; }

{
  echo "== $(date -u +%FT%TZ) $(hostname) in $ROOT (as /work/main)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version 2>&1 | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  echo "cuBLAS folder: ${CUBLAS_DIR:-none found}"
  which compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer
  nproc; free -g | head -2
} >> "$SUMMARY" 2>&1

if [ -f "$CARRY/build-gpu.tar.xz" ]; then
  tar xJf "$CARRY/build-gpu.tar.xz" && note "unpacked the carried build ($(du -sh $BUILD | cut -f1))"
fi
if ! env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" --version >> "$SUMMARY" 2>&1; then
  note "the carried build does not start here: building on this machine"
  env LD_LIBRARY_PATH="$LDP" ldd "$BUILD/remat" >> "$SUMMARY" 2>&1
  BUILD=build-gpu-here
  export BUILD OUT
  step build 300 "$OUT/test.log" sh bench/cuda/gpu_session.sh build
fi

# 0. does anything run on the GPU at all (small, with every cuda error in the log)
step smoke 30 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" train --device cuda --layers 2 \
  --width 64 --heads 2 --context 32 --batch 4 --steps 3 --eval-every 3

# 1. the device suites with cuda as the test device (ctest: CTestTestfile names /work/main);
# test_fixtures (~100 s on 2 cpu cores) beside them with its own workers
SUITES='checkpoint|checkpoint_models|selective|planner|autograd|attention|ck_semantics|dispatch_nn|double_backward_checkpoint|nesting|ops_matmul|ops_reduce|split_backward|models|checkpoint_rng|optim_device|timing|grad_meter|ops_layer_norm_to|grad_layout|ops_ce_bf16|ops_rms_norm_to|cuda_.*'
(
  cd "$BUILD" && export REMAT_TEST_DEVICE=cuda OMP_NUM_THREADS=1 &&
  step fixtures "${SUITE_BOX:-150}" "$FILES/fixtures.log" env LD_LIBRARY_PATH="$LDP" ./test_fixtures --jobs 16
) &
(
  cd "$BUILD" && export REMAT_TEST_DEVICE=cuda &&
  step device-suites "${SUITE_BOX:-150}" "$OUT/test.log" env LD_LIBRARY_PATH="$LDP" ctest --output-on-failure -j 6 --timeout 190 \
    -R "^test_($SUITES)\$"
)
wait
cat "$FILES/fixtures.log" >> "$OUT/test.log"
grep -E '^\[FAIL\]|tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Subprocess aborted|Synthesis' \
  "$OUT/test.log" | sort | uniq -c | head -150 >> "$SUMMARY"

# 2. the GEMM microbenchmark: remat's linears against cuBLAS alone
step gemm 40 "$OUT/gemm.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/bench_cuda_gemm" --tokens 8192 --width 768 \
  --reps 20 --trials 5

# 3. training learns on the GPU: the addition task, loss per step, allocator trace; then
# one short run per strategy and bf16 autocast (each must run and report its peak)
step train 45 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" train --device cuda --layers 4 \
  --width 256 --heads 4 --context 32 --batch 64 --steps 400 --lr 1e-3 --eval-every 100 \
  --log "$FILES/train-steps.jsonl" --trace "$FILES/train-trace.json"
for s in block selective=dots budget=50% sequential=2; do
  step "train-$s" 15 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" train \
    --device cuda --layers 4 --width 256 --heads 4 --context 32 --batch 64 --steps 30 \
    --lr 1e-3 --eval-every 30 --checkpoint "$s"
done
step train-bf16 15 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" train --device cuda \
  --layers 4 --width 256 --heads 4 --context 32 --batch 64 --steps 30 --lr 1e-3 \
  --eval-every 30 --autocast bf16 --checkpoint block
# Hugging Face directories on cuda: eval loss, greedy sampling, fine-tuning with export
# (tests/fixtures/hf_cli: transformers' expected figures in expected.json)
HF=tests/fixtures/hf_cli
for m in gpt2 llama; do
  step "eval-$m" 15 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" eval --device cuda \
    --init-from "$HF/$m" --data "$HF/data.txt" --context 16 --json
  step "sample-$m" 15 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" sample \
    --device cuda --init-from "$HF/$m" --prompt 'Once' --tokens 20 --temperature 0 --json
  step "finetune-$m" 20 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" train \
    --device cuda --init-from "$HF/$m" --data "$HF/data.txt" --context 16 --batch 2 --steps 3 \
    --optim sgd --lr 0.1 --checkpoint block --export "$FILES/export-$m"
done
grep -o '"[a-z_]*loss[a-z_]*": *[0-9.e-]*' "$HF/expected.json" >> "$OUT/train.log"
# cpu beside cuda per strategy and optimizer, save/resume (bench/cuda/train_checks.sh)
step train-checks 45 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" bash bench/cuda/train_checks.sh \
  "$BUILD" "$FILES/train-checks"
pack

# 4. GPT-2 124M's blocks (byte vocabulary) against PyTorch on the same GPU
MODEL="--layers 12 --width 768 --heads 12 --context 1024 --batch 8"
step remat-f32 80 "$OUT/bench.log" sh -c "LD_LIBRARY_PATH=$LDP $BUILD/remat bench --device cuda $MODEL --strategies none,block,selective=dots,budget=50% --reps $REPS --json > $FILES/remat-f32.json; rc=\$?; cat $FILES/remat-f32.json; exit \$rc"
# (PyTorch eager only: window 1 timed torch.compile's activation_memory_budget=0.5)
step torch-f32 60 "$OUT/bench.log" python3 bench/cuda/torch_gpt.py $MODEL --reps "$REPS" \
  --strategies none,block,selective=dots --out "$FILES/torch-f32.json"
pack
# 4b. where remat's step goes: every kernel timed by its CUDA events, by op, kernel and phase,
# set against the measured copy bandwidth and GEMM rate (remat bench --profile; the JSON has
# every row)
step profile-f32 60 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" bench --device cuda \
  $MODEL --strategies none,block --reps 2 --profile=3
pack
step remat-bf16 60 "$OUT/bench.log" sh -c "LD_LIBRARY_PATH=$LDP $BUILD/remat bench --device cuda $MODEL --autocast bf16 --strategies none,block,selective=dots,budget=50% --reps $REPS --json > $FILES/remat-bf16.json; rc=\$?; cat $FILES/remat-bf16.json; exit \$rc"
step torch-bf16 60 "$OUT/bench.log" python3 bench/cuda/torch_gpt.py $MODEL --reps "$REPS" \
  --autocast bf16 --strategies none,block,selective=dots --out "$FILES/torch-bf16.json"
step profile-bf16 40 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" bench --device cuda \
  $MODEL --autocast bf16 --strategies none --reps 2 --profile=3
# 4a'. bf16 attention through cuDNN's fused SDPA (REMAT_CUDA_ATTENTION=cudnn:
# src/backends/cuda/attention_cudnn.cu, docs/cuda.md; never run on a GPU before): the suites
# that check bf16 attention against the cpu and checkpointed gradients bitwise, then GPT's
# bf16 step beside remat-bf16's above (the bench's "bitwise equal": block against none) and
# its profile (the attention rows beside profile-bf16's). libcudnn: the toolkit's, else
# PyTorch's wheel's. The log has cuDNN's version, every graph's dims and strides
# (REMAT_CUDNN_VERBOSE), why a call stayed on remat's kernels, and cuDNN's own error log.
CUDNN_LIB=$(find /usr/local/cuda/lib64/ /usr/local/cuda/lib/ -name 'libcudnn.so.9' 2>/dev/null | head -1)
# shellcheck disable=SC2046 # site-packages paths, one word each
[ -n "$CUDNN_LIB" ] || CUDNN_LIB=$(find $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
  -path '*nvidia/cudnn/lib/libcudnn.so.9' 2>/dev/null | head -1)
{ echo "libcudnn for REMAT_CUDA_ATTENTION=cudnn: ${CUDNN_LIB:-none found}"
  python3 -c 'import torch; print("torch cudnn", torch.backends.cudnn.version())'; } >> "$SUMMARY" 2>&1
CUDNN_ENV="REMAT_CUDA_ATTENTION=cudnn REMAT_CUDNN_VERBOSE=1 CUDNN_LOGLEVEL_DBG=1 CUDNN_LOGDEST_DBG=stderr"
[ -n "$CUDNN_LIB" ] && CUDNN_ENV="$CUDNN_ENV REMAT_CUDNN_LIB=$CUDNN_LIB"
CUDNN_LDP="$LDP${CUDNN_LIB:+:$(dirname "$CUDNN_LIB")}"
# shellcheck disable=SC2086
(
  cd "$BUILD" && export REMAT_TEST_DEVICE=cuda &&
  step cudnn-suites 90 "$OUT/test.log" env LD_LIBRARY_PATH="$CUDNN_LDP" $CUDNN_ENV ctest \
    --output-on-failure -j 6 --timeout 85 -R '^test_(attention|cuda_bf16|checkpoint_models|checkpoint|cuda_kernels)$'
)
# shellcheck disable=SC2086
step cudnn-bf16 40 "$OUT/bench.log" sh -c "LD_LIBRARY_PATH=$CUDNN_LDP $CUDNN_ENV $BUILD/remat bench --device cuda $MODEL --autocast bf16 --strategies none,block --reps $REPS --json > $FILES/remat-bf16-cudnn.json; rc=\$?; cat $FILES/remat-bf16-cudnn.json; exit \$rc"
# shellcheck disable=SC2086
step cudnn-profile-bf16 40 "$OUT/bench.log" env LD_LIBRARY_PATH="$CUDNN_LDP" $CUDNN_ENV \
  "$BUILD/remat" bench --device cuda $MODEL --autocast bf16 --strategies none --reps 2 --profile=3
pack
# 4b. the same without cuBLASLt's bias epilogue (REMAT_CUDA_LT=0: bias broadcast, then
# cublasGemmEx with beta = 1), the A/B of the bf16 forward linears
step profile-bf16-nolt 40 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" REMAT_CUDA_LT=0 \
  "$BUILD/remat" bench --device cuda $MODEL --autocast bf16 --strategies none --reps 3 --profile=2
# 4b'. PyTorch's own kernels in its bf16 step (torch.profiler), beside remat's profile above
step torch-profile-bf16 60 "$OUT/bench.log" python3 bench/cuda/torch_gpt.py $MODEL --reps 2 \
  --autocast bf16 --strategies none --profile 3 --out "$FILES/torch-profile-bf16.json"
# 4b''. Nsight Compute on the attention kernels (bench/cuda/ncu_attention.sh): what limits
# them (tensor pipe, issue, shared-memory conflicts, stall reasons), remat's beside PyTorch's
step ncu-bf16 60 "$OUT/ncu.log" env LD_LIBRARY_PATH="$LDP" bash bench/cuda/ncu_attention.sh \
  remat "$BUILD/remat" bf16
step ncu-f32 60 "$OUT/ncu.log" env LD_LIBRARY_PATH="$LDP" bash bench/cuda/ncu_attention.sh \
  remat "$BUILD/remat" off
step ncu-torch-bf16 60 "$OUT/ncu.log" bash bench/cuda/ncu_attention.sh torch bf16
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# 4b'''. variants of the tensor-core attention (bench/cuda/gpu_variants.sh): each variant's
# own builds of the attention tests first (f32 and bf16 against the cpu, checkpointed
# gradients bitwise equal on the GPU: a variant that fails them is not timed), then its
# profile beside the default's: the attention rows and the step
if [ -f "$CARRY/variants.tar.xz" ]; then
  tar xJf "$CARRY/variants.tar.xz" -C "$FILES" && cp "$FILES/variants/list.txt" "$FILES/variants.txt"
  for d in "$FILES"/variants/*/; do
    name=$(basename "$d")
    cat "$d/ptxas.txt" >> "$FILES/variants.txt" 2>/dev/null
    (
      export REMAT_TEST_DEVICE=cuda
      step "attchk-$name" 40 "$OUT/test.log" env LD_LIBRARY_PATH="$LDP" sh -c "
        '$d/test_cuda_kernels' -j1 --filter='cuda_kernels/*attention*' &&
        '$d/test_cuda_bf16' -j1 --filter='cuda_bf16/*attention*' &&
        '$d/test_checkpoint_models' -j1 --filter='checkpoint_models/transformer_gradients_*' &&
        '$d/test_checkpoint_models' -j1 --filter='checkpoint_models/llama_block_*'"
    ) || { note "variant $name failed its tests: not timed"; rm -rf "$d"; continue; }
    # GPT's shape: block's gradients bitwise equal to none's (the backward run twice on the
    # same inputs, 16 key tiles a head: the fused backward's ordered adds) in bf16 and f32
    for ac in bf16 off; do
      step "attbit-$name-$ac" 25 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" "$d/remat" \
        bench --device cuda $MODEL --autocast $ac --strategies none,block --reps 1
    done
    step "attmem-$name" 40 "$OUT/sanitizer.log" env LD_LIBRARY_PATH="$LDP" REMAT_TEST_DEVICE=cuda \
      "$CS" --tool memcheck --error-exitcode 9 "$d/test_cuda_bf16" -j1 \
      --filter='cuda_bf16/fused_attention*'
    case " ${NCU_VARIANTS-all-lean all-lean-mt2} " in *" $name "*)
      step "ncu-$name" 45 "$OUT/ncu.log" env LD_LIBRARY_PATH="$LDP" bash bench/cuda/ncu_attention.sh \
        remat "$d/remat" bf16 ;;
    esac
  done
  for prog in "$BUILD/remat" "$FILES"/variants/*/remat; do
    name=$(basename "$(dirname "$prog")"); [ "$prog" = "$BUILD/remat" ] && name=default
    for ac in bf16 off; do
      step "att-$name-$ac" 25 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" "$prog" \
        bench --device cuda $MODEL --autocast $ac --strategies none --reps 3 --profile=2
    done
  done
  rm -rf "$FILES/variants"
fi
# 4c. the attention's other path on this GPU: the CUDA-core kernels
# (REMAT_CUDA_ATTENTION=simt) beside the tensor cores (the default), each op's time
step profile-bf16-simt 40 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" REMAT_CUDA_ATTENTION=simt \
  "$BUILD/remat" bench --device cuda $MODEL --autocast bf16 --strategies none --reps 2 --profile=3
step profile-f32-simt 40 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" REMAT_CUDA_ATTENTION=simt \
  "$BUILD/remat" bench --device cuda $MODEL --strategies none --reps 2 --profile=3
# 4d. torch.compile: the default partitioner (the stretch yardstick) and activation budgets
step torch-compile-bf16 150 "$OUT/bench.log" python3 bench/cuda/torch_gpt.py $MODEL --reps "$REPS" \
  --autocast bf16 --strategies none,compile,budget=50% --out "$FILES/torch-compile-bf16.json"
# 4e. the planner's offload choice on a real GPU (pinned host memory, a side stream)
step plan-offload 80 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" \
  bench --device cuda $MODEL --strategies none,budget=60%,budget=45%,budget=30% --reps 3 \
  --plan-offload
step plan-explain 30 "$OUT/bench.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" \
  train --device cuda $MODEL --steps 2 --eval-every 2 --checkpoint budget=45% --explain \
  --plan-offload
pack

# 5. compute-sanitizer (memcheck) on the fused attention kernels and the offload path
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(
  export REMAT_TEST_DEVICE=cuda
  step memcheck-attention 40 "$OUT/sanitizer.log" env LD_LIBRARY_PATH="$LDP" "$CS" --tool memcheck \
    --target-processes all --error-exitcode 9 "$BUILD/test_cuda_kernels" -j1 \
    --filter='cuda_kernels/fused_attention*'
  step memcheck-offload 40 "$OUT/sanitizer.log" env LD_LIBRARY_PATH="$LDP" "$CS" --tool memcheck \
    --target-processes all --error-exitcode 9 "$BUILD/test_selective" -j1 \
    --filter='selective/offload*'
  step memcheck-bf16 40 "$OUT/sanitizer.log" env LD_LIBRARY_PATH="$LDP" "$CS" --tool memcheck \
    --target-processes all --error-exitcode 9 "$BUILD/test_cuda_bf16" -j1
)

# 6. the strategy table as a user sees it
step bench-table 25 "$OUT/train.log" env LD_LIBRARY_PATH="$LDP" "$BUILD/remat" bench --device cuda --layers 6 \
  --width 384 --heads 6 --context 256 --batch 8 --reps 3
pack
note "total $(( $(date +%s) - START )) s"
exit 0
