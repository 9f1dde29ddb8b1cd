#!/bin/sh
# tests/autocast_report.sh REMAT — under `remat train --autocast bf16` the residual report
# gives the saved tensors' real dtypes and bytes (linear inputs and gelu's in bf16, the
# weights as their f32 parameters, layer_norm's input in f32) and the memory timeline's
# title says the step ran under bf16 autocast (issue 19).
set -eu
REMAT=$1
TMP=${TMPDIR:-/tmp}/remat_autocast_report.$$
trap 'rm -f "$TMP".*' EXIT
"$REMAT" train --model gpt --layers 1 --width 32 --heads 2 --context 16 --batch 2 --steps 1 \
    --threads 1 --autocast bf16 --report --timeline "$TMP.svg" >"$TMP.out" 2>&1
fail() { echo "$1"; cat "$TMP.out"; exit 1; }
# GPT block: LinearBackward saves x [2, 16, 32] in bf16 (2 KiB) and the weight [96, 32] in f32
grep -Eq 'LinearBackward +remat_linear +- +\[2, 16, 32\] +bf16 +2\.0 KiB' "$TMP.out" ||
    fail "no bf16 linear input of 2.0 KiB in the report"
grep -Eq 'LinearBackward +remat_linear +h\.0\.attn_w +\[96, 32\] +f32 +12\.0 KiB' "$TMP.out" ||
    fail "no f32 qkv weight of 12.0 KiB in the report"
grep -Eq 'GeluBackward +remat_gelu +[a-z_]+ +\[2, 16, 128\] +bf16 +8\.0 KiB' "$TMP.out" ||
    fail "no bf16 gelu input of 8.0 KiB in the report"
grep -Eq 'LayerNormBackward +remat_layer_norm +- +\[2, 16, 32\] +f32 +4\.0 KiB' "$TMP.out" ||
    fail "no f32 layer_norm input of 4.0 KiB in the report"
grep -q 'bf16 autocast' "$TMP.svg" || fail "the timeline's title does not say bf16 autocast"
echo "report and timeline show the dtypes and bytes"
