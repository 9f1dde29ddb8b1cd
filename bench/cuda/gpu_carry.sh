#!/bin/sh
# bench/cuda/gpu_carry.sh — run HERE, after bench/cuda/gpu_prepare.sh: builds remat with the
# cuda backend in /work/main/build-gpu (Release, sm_90 + compute_90 PTX, naive cpu GEMM so
# that no BLAS must travel, no MPI), the GEMM microbenchmark against cuBLAS, and packs what
# bench/cuda/gpu_window.sh runs on the GPU machine into .gpu/build-gpu.tar.xz (about 30 MiB:
# the program, the device suites' test programs, ctest's files) plus libgomp and cudart into
# .gpu/lib. The paths inside are absolute, so this must run in /work/main (gpu_window.sh
# links /work/main to its copy there).
set -eu
cd "$(git rev-parse --show-toplevel)"
[ "$(pwd)" = /work/main ] || { echo "gpu_carry: run in /work/main (the build's paths are absolute)" >&2; exit 1; }
[ -d .gpu/lib ] || { echo "gpu_carry: run bench/cuda/gpu_prepare.sh first" >&2; exit 1; }
BUILD=build-gpu
CUDA=${CUDA_HOME:-/usr/local/cuda}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=on -DREMAT_GEMM=naive \
  -DREMAT_MPI=OFF >/dev/null
cmake --build "$BUILD" -j "${JOBS:-2}"
cc -std=c11 -O2 -Iinclude -I"$CUDA/include" bench/cuda/gemm.c -L"$BUILD" -lremat \
  -L"$CUDA/lib64" -lcublas -lcudart -Wl,-rpath,/work/main/$BUILD -Wl,-rpath,"$CUDA/lib64" \
  -o "$BUILD/bench_cuda_gemm"
suites="fixtures checkpoint checkpoint_models selective planner autograd attention ck_semantics
  dispatch_nn double_backward_checkpoint nesting ops_matmul ops_reduce split_backward models
  checkpoint_rng optim_device timing grad_meter cuda_bf16 cuda_cudnn_map cuda_indexing cuda_kernels
  cuda_pool cuda_rng grad_layout ops_ce_bf16 ops_layer_norm_to ops_rms_norm_to"
# (every suite gpu_window.sh's SUITES names must be here: window 9 found four "Not Run")
files="$BUILD/remat $BUILD/bench_cuda_gemm $(ls $BUILD/libremat.so*) $BUILD/CTestTestfile.cmake"
# the CPU emulator's test is a cuda_* ctest entry too (tests/cuda_emu)
for emu in $(cd "$BUILD" && ls cuda_emu_* 2>/dev/null); do
  [ -f "$BUILD/$emu" ] && files="$files $BUILD/$emu"
done
for s in $suites; do files="$files $BUILD/test_$s"; done
# shellcheck disable=SC2086
# xz -9: a 64 MiB dictionary, so the test programs' shared library code compresses once
XZ_OPT=-9 tar cJf .gpu/build-gpu.tar.xz $files
for lib in libgomp.so.1; do cp -L "$(ldconfig -p | awk -v l=$lib '$1 == l {print $NF; exit}')" .gpu/lib/; done
cp -L "$CUDA/lib/libcudart.so.13" .gpu/lib/ 2>/dev/null || cp -L "$CUDA/lib64/libcudart.so.13" .gpu/lib/
du -sh .gpu .gpu/build-gpu.tar.xz
