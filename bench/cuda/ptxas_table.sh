#!/bin/sh
# bench/cuda/ptxas_table.sh — nvcc's `-Xptxas -v` output (stdin) as one line per kernel:
# registers, spill stores / loads (bytes), stack frame (bytes). Used by gpu_variants.sh:
#   nvcc -arch=sm_90a -Xptxas -v -c -o /dev/null ... src/backends/cuda/attention_mma.cu 2>&1 |
#     sh bench/cuda/ptxas_table.sh
demangle() { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }
awk '
/Compiling entry function/ { n = $0; sub(/.*function .(_Z)?/, "_Z", n); sub(/. for .*/, "", n) }
/bytes stack frame/ { st = $1; ss = $5; sl = $9 }
/Used [0-9]+ registers/ { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r);
  if (n != "") printf "%s\t%s regs\t%s B spill st\t%s B spill ld\t%s B stack\n", n, r, ss, sl, st; n = "" }
' | demangle | sed -e 's/(anonymous namespace):://g' -e 's/(tc_params<[^)]*>)//' \
  -e 's/void //' | sort
