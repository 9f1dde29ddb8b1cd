#!/bin/sh
# bench/cuda/gpu_variants.sh — run HERE after gpu_carry.sh: builds `remat` again with other
# tuning values of the tensor-core attention (attention_mma.cu's RMK_TC_* knobs: blocks per
# SM asked of the register allocator, queries per dK/dV step) and packs the programs into
# .gpu/variants.tar.xz, so that one GPU window times every variant side by side
# (gpu_window.sh's step att-variants: `remat bench --profile` per variant).
#   VARIANTS="name:DEF=V;DEF=V ..."  (default below); each builds in build-gpu-var/<name>
# The C objects come from ccache when CMAKE_C_COMPILER_LAUNCHER=ccache is exported; only
# attention_mma.cu is compiled anew per variant (~1 min) plus the link.
set -eu
cd "$(git rev-parse --show-toplevel)"
[ "$(pwd)" = /work/main ] || { echo "gpu_variants: run in /work/main" >&2; exit 1; }
VARIANTS=${VARIANTS:-"occ-4-3-3-q32:RMK_TC_MINB_FWD=4;RMK_TC_MINB_DQ=3;RMK_TC_MINB_DKDV=3;RMK_TC_BCQ64=32 occ-3-3-3:RMK_TC_MINB_FWD=3;RMK_TC_MINB_DQ=3;RMK_TC_MINB_DKDV=3 occ-4-3-2:RMK_TC_MINB_FWD=4;RMK_TC_MINB_DQ=3;RMK_TC_MINB_DKDV=2"}
mkdir -p .gpu/variants
rm -f .gpu/variants/remat-* .gpu/variants/list.txt.new
for v in $VARIANTS; do
  name=${v%%:*} defs=${v#*:}
  b=build-gpu-var/$name
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=on -DREMAT_GEMM=naive \
    -DREMAT_MPI=OFF -DREMAT_CUDA_ATT_DEFS="$defs" -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  cmake --build "$b" -j "${JOBS:-2}" --target remat_cli
  cp "$b/remat" ".gpu/variants/remat-$name"
  echo "$name: $defs" >> .gpu/variants/list.txt.new
done
mv .gpu/variants/list.txt.new .gpu/variants/list.txt
XZ_OPT=-9 tar cJf .gpu/variants.tar.xz -C .gpu variants
rm -rf .gpu/variants
du -sh .gpu/variants.tar.xz .gpu
