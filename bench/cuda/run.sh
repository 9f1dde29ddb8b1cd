#!/bin/sh
# bench/cuda/run.sh — the H100 comparison of docs/cuda.md, on a machine with a GPU:
# builds remat with CUDA, runs `remat bench --device cuda` and the PyTorch yardstick
# (bench/cuda/torch_gpt.py) on GPT L=12 D=768 H=12 T=1024 B=8, f32, TF32 off, strategies
# none / block / selective=dots / budget=50%, and writes both JSON results and the logs
# under bench/results/ (DATE-GPU-remat.json, DATE-GPU-torch.json, DATE-GPU.log).
# Environment: REPS (default 10), PYTHON (default python3), BUILD (default build-cuda),
# NO_BUILD=1 (use BUILD as it is: bench/cuda/gpu_session.sh), OUT_DIR (default bench/results).
set -eu
cd "$(dirname "$0")/../.."
REPS=${REPS:-10}
PYTHON=${PYTHON:-python3}
BUILD=${BUILD:-build-cuda}
MODEL="--layers 12 --width 768 --heads 12 --context 1024 --batch 8"
STRATS="none,block,selective=dots,budget=50%"
if [ -z "${NO_BUILD:-}" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=on -DREMAT_GEMM=naive \
    -DREMAT_BUILD_TESTS=OFF -DREMAT_MPI=OFF >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target remat_cli
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')
day=$(date -u +%F)
out=${OUT_DIR:-bench/results}
mkdir -p "$out"
log="$out/$day-$gpu.log"
{
  echo "== $(date -u +%FT%TZ) $gpu"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "== ./$BUILD/remat bench --device cuda $MODEL --strategies $STRATS --reps $REPS --json"
  "./$BUILD/remat" bench --device cuda $MODEL --strategies "$STRATS" --reps "$REPS" --json \
    > "$out/$day-$gpu-remat.json"
  cat "$out/$day-$gpu-remat.json"
  echo "== $PYTHON bench/cuda/torch_gpt.py $MODEL --reps $REPS"
  "$PYTHON" bench/cuda/torch_gpt.py $MODEL --reps "$REPS" --out "$out/$day-$gpu-torch.json"
} 2>&1 | tee "$log"
