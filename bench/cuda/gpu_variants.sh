#!/bin/sh
# bench/cuda/gpu_variants.sh — run HERE after gpu_carry.sh: builds remat again with other
# values of the tensor-core attention's build-time knobs (attention_mma.cu's RMK_TC_*: blocks
# per SM asked of the register allocator, queries per dK/dV step, warps of a forward block,
# the fused backward) and packs each variant into .gpu/variants.tar.xz, so that one GPU
# window checks and times every variant beside the default (gpu_window.sh's att-* steps):
#   variants/<name>/remat                  `remat bench --profile` of the GPT step
#   variants/<name>/test_cuda_kernels      f32 attention against the cpu's (every head class)
#   variants/<name>/test_cuda_bf16         bf16 attention against the cpu's
#   variants/<name>/test_checkpoint_models checkpointed gradients bitwise equal on the GPU
#   variants/<name>/ptxas.txt              registers, spills, shared memory of its kernels
#   VARIANTS="name:DEF=V;DEF=V ..."  (default below); each builds in build-gpu-var/<name>
# The C objects come from ccache when CMAKE_C_COMPILER_LAUNCHER=ccache is exported; only
# attention_mma.cu is compiled anew per variant (~3 min on 2 busy cores) plus the links.
set -eu
cd "$(git rev-parse --show-toplevel)"
[ "$(pwd)" = /work/main ] || { echo "gpu_variants: run in /work/main" >&2; exit 1; }
# The default list is the next window's (window 9 timed fused, fused-2, fused-q32 and fwd8:
# none faster in bf16; docs/cuda.md). The combinations first, then each knob alone so that
# each gain can be told apart (the forward and backward knobs touch different kernels):
# all-lean: the forward's lean softmax (RMK_TC_FWD_LEAN: bf16 128 registers, 16 / 28 bytes of
#   spills at head 64; f32 none) and the backward's lean per-score code (RMK_TC_LEAN: bf16
#   dK/dV 168, 148 / 304, none left in the step loop);
# all-lean-mt2: the same with 2 m-tiles a forward warp, 2 blocks an SM (bf16 252, f32 233,
#   no spills);
# all-lean-fused: all-lean with the fused backward (fused was the faster in f32 in window 9,
#   the slower in bf16);
# fwdlean, bwdlean, fwdmt2: each knob alone; fused: window 9's, beside all-lean-fused.
# (fwdmt2-q0: RMK_TC_FWD_MT=2;RMK_TC_FWD_QREG=0;RMK_TC_MINB_FWD=2 — Q's fragments loaded at
# each key tile, bf16 246 registers, no spills — by VARIANTS= when fwdmt2 wins.)
VARIANTS=${VARIANTS:-"all-lean:RMK_TC_FWD_LEAN=1;RMK_TC_LEAN=1 all-lean-mt2:RMK_TC_FWD_MT=2;RMK_TC_MINB_FWD=2;RMK_TC_FWD_LEAN=1;RMK_TC_LEAN=1 all-lean-fused:RMK_TC_FWD_LEAN=1;RMK_TC_LEAN=1;RMK_TC_BWD_FUSED=1 fwdlean:RMK_TC_FWD_LEAN=1 bwdlean:RMK_TC_LEAN=1 fwdmt2:RMK_TC_FWD_MT=2;RMK_TC_MINB_FWD=2 fused:RMK_TC_BWD_FUSED=1"}
TESTS="test_cuda_kernels test_cuda_bf16 test_checkpoint_models"
mkdir -p .gpu/variants
rm -rf .gpu/variants/* .gpu/list.txt.new
for v in $VARIANTS; do
  name=${v%%:*} defs=${v#*:}
  b=build-gpu-var/$name
  # attention_mma.cu with ptxas's account of each kernel (registers, spills) in the build log
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=on -DREMAT_GEMM=naive \
    -DREMAT_MPI=OFF -DREMAT_CUDA_ATT_DEFS="$defs" -DREMAT_CUDA_ATT_OPTS="-Xptxas=-v" \
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  rm -f "$b/CMakeFiles/remat_objects.dir/src/backends/cuda/attention_mma.cu.o" # the log again
  # shellcheck disable=SC2086
  cmake --build "$b" -j "${JOBS:-2}" --target remat_cli $TESTS > "$b/build.log" 2>&1 ||
    { tail -30 "$b/build.log" >&2; exit 1; }
  mkdir -p ".gpu/variants/$name"
  cp "$b/remat" ".gpu/variants/$name/remat"
  for t in $TESTS; do cp "$b/$t" ".gpu/variants/$name/"; done
  sh bench/cuda/ptxas_table.sh < "$b/build.log" > ".gpu/variants/$name/ptxas.txt"
  echo "$name: $defs" >> .gpu/list.txt.new
done
mv .gpu/list.txt.new .gpu/variants/list.txt
XZ_OPT=-9 tar cJf .gpu/variants.tar.xz -C .gpu variants
rm -rf .gpu/variants
du -sh .gpu/variants.tar.xz .gpu
