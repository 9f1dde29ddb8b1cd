#!/bin/sh
# bench/cuda/gpu_session.sh STEP... — everything issue 17 has left for a GPU, run ON the GPU
# machine (one H100, CUDA 13, nvcc, CMake, python3 with PyTorch 2.11; no Debian -dev packages,
# no network) through the device tool, one step per call so that each stays inside the
# tool's 10-minute limit. Prepare once here with bench/cuda/gpu_prepare.sh (Criterion and
# zlib into .gpu/), then, calling the device tool with carry [".gpu"]:
#
#   bench/cuda/gpu_session.sh build       # configure + build (about 3-5 min on 16 cores)
#   bench/cuda/gpu_session.sh test        # the device suites with REMAT_TEST_DEVICE=cuda
#   bench/cuda/gpu_session.sh gemm        # bench/cuda/gemm.c: remat's linears vs cuBLAS
#   bench/cuda/gpu_session.sh bench       # bench/cuda/run.sh: remat vs PyTorch, 4 strategies
#
# A step finds the build of an earlier call while the machine is still warm (the tool keeps
# ignored build outputs between calls and gives a machine back 30 s after the last one); on
# a fresh machine the step first rebuilds (add the build's minutes). `all` runs every step
# in one call (fits in 10 minutes only if the build and the suite are quick).
#
# Everything a step writes lands in $OUT (the device tool brings it back; at most 8 files)
# under names the session commits as bench/results/<date>-<gpu>-<name>:
#   build.log, test.log (ctest's output), test-summary.txt, gemm.json, gemm.log,
#   bench.log, bench-remat.json, bench-torch.json.
# Environment: BUILD (default build-gpu), JOBS (default nproc), TEST_J (parallel tests,
# default 4), TEST_TIMEOUT (s per test, default 300), REPS (bench, default 10).
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
CARRY=$ROOT/.gpu

# Criterion and zlib from .gpu/ for the build and the tests only: python3 (PyTorch) must not
# see these libraries.
with_carry() {
  if [ -d "$CARRY/lib" ]; then
    LD_LIBRARY_PATH="$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
  else
    "$@"
  fi
}

build_body() {
  echo "== $(date -u +%FT%TZ) build on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  nvcc --version | tail -2
  cmake --version | head -1
  cc --version | head -1
  args="-DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=on -DREMAT_GEMM=naive -DREMAT_MPI=OFF"
  if [ -d "$CARRY/include/criterion" ]; then
    args="$args -DCRITERION_INCLUDE=$CARRY/include -DCRITERION_LIB=$CARRY/lib/libcriterion.so"
  fi
  if [ -f "$CARRY/include/cjson/cJSON.h" ]; then
    args="$args -DCMAKE_PREFIX_PATH=$CARRY"
  fi
  if [ -f "$CARRY/include/zlib.h" ] && [ ! -f /usr/include/zlib.h ]; then
    args="$args -DZLIB_INCLUDE_DIR=$CARRY/include -DZLIB_LIBRARY=$CARRY/lib/libz.so"
  fi
  echo "== cmake -S . -B $BUILD $args"
  # shellcheck disable=SC2086
  with_carry cmake -S . -B "$BUILD" $args || return 1
  with_carry cmake --build "$BUILD" -j "$JOBS" || return 1
  # the GEMM microbenchmark: plain C against the library just built and cuBLAS
  cuda=${CUDA_HOME:-/usr/local/cuda}
  if command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(command -v nvcc)")"); fi
  echo "== cc bench/cuda/gemm.c -> $BUILD/bench_cuda_gemm (CUDA at $cuda)"
  cc -std=c11 -O2 -Iinclude -I"$cuda/include" bench/cuda/gemm.c -L"$BUILD" -lremat \
    -L"$cuda/lib64" -lcublas -lcudart -Wl,-rpath,"$ROOT/$BUILD" -Wl,-rpath,"$cuda/lib64" \
    -o "$BUILD/bench_cuda_gemm" || return 1
  echo "== built $(date -u +%FT%TZ)"
}

step_build() {
  if [ -f "$BUILD/remat" ] && [ -f "$BUILD/test_cuda_kernels" ] && [ -f "$BUILD/bench_cuda_gemm" ]; then
    echo "gpu_session: $BUILD is already built"
    return 0
  fi
  build_body > "$OUT/build.log" 2>&1
  rc=$?
  tail -20 "$OUT/build.log"
  return $rc
}

step_test() {
  step_build || return 1
  regex='^test_(fixtures|checkpoint|checkpoint_models|checkpoint_rng|selective|planner|cuda_.*|fenced_device)$'
  echo "== REMAT_TEST_DEVICE=cuda ctest -R '$regex' -j ${TEST_J:-4}" > "$OUT/test.log"
  (cd "$BUILD" && export REMAT_TEST_DEVICE=cuda && with_carry ctest --output-on-failure \
     -j "${TEST_J:-4}" --timeout "${TEST_TIMEOUT:-300}" -R "$regex") >> "$OUT/test.log" 2>&1
  rc=$?
  # one line per failing test case (Criterion's [FAIL] lines), for the issue
  grep -E '^\[FAIL\]|tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)' \
    "$OUT/test.log" | sort | uniq -c > "$OUT/test-summary.txt"
  tail -30 "$OUT/test.log"
  return $rc
}

step_gemm() {
  step_build || return 1
  {
    echo "== $BUILD/bench_cuda_gemm --tokens 8192 --width 768 --reps 20 --trials 5"
    with_carry "$BUILD/bench_cuda_gemm" --tokens 8192 --width 768 --reps 20 --trials 5 \
      > "$OUT/gemm.json"
    rc=$?
    cat "$OUT/gemm.json"
    echo "== the same with --tf32"
    with_carry "$BUILD/bench_cuda_gemm" --tokens 8192 --width 768 --reps 20 --trials 5 --tf32
    exit $rc
  } > "$OUT/gemm.log" 2>&1
  rc=$?
  tail -5 "$OUT/gemm.log"
  return $rc
}

step_bench() {
  step_build || return 1
  # bench/cuda/run.sh on this build; its files go to $OUT (python3 without .gpu/'s libraries)
  NO_BUILD=1 BUILD="$BUILD" OUT_DIR="$OUT" REPS="${REPS:-10}" sh bench/cuda/run.sh
  rc=$?
  for f in "$OUT"/*-remat.json; do [ -f "$f" ] && mv "$f" "$OUT/bench-remat.json"; done
  for f in "$OUT"/*-torch.json; do [ -f "$f" ] && mv "$f" "$OUT/bench-torch.json"; done
  for f in "$OUT"/20*.log; do [ -f "$f" ] && mv "$f" "$OUT/bench.log"; done
  return $rc
}

[ $# -gt 0 ] || { sed -n '2,28p' "$0"; exit 2; }
status=0
for s in "$@"; do
  case $s in
    build) step_build || status=1 ;;
    test) step_test || status=1 ;;
    gemm) step_gemm || status=1 ;;
    bench) step_bench || status=1 ;;
    all) step_build && { step_test; step_gemm; step_bench; } || status=1 ;;
    *) echo "gpu_session: unknown step '$s' (build, test, gemm, bench, all)" >&2; exit 2 ;;
  esac
done
exit $status
