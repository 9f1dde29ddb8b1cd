#!/bin/sh
# bench/autocast.sh — bf16 autocast against f32, side by side in one run: remat bench
# (--autocast off / bf16, strategies none and block) and PyTorch 1.13's torch.autocast('cpu',
# bfloat16) on the same model (bench/pytorch/bench_torch.py), at 1 and 2 threads, ROUNDS
# interleaved rounds of REPS repetitions each (every figure: the median of its round; the
# rounds give the spread). GPT L=6 D=384 H=6 T=256 B=8 unless overridden.
# Usage: bench/autocast.sh [ROUNDS] [REPS]   (from the repository root, after make build)
set -eu
ROUNDS=${1:-2}
REPS=${2:-3}
M="--model gpt --layers 6 --width 384 --heads 6 --context 256 --batch 8"
grep -m1 "model name" /proc/cpuinfo
grep -qw avx512_bf16 /proc/cpuinfo && echo "cpu flags: avx512_bf16" || echo "cpu flags: no avx512_bf16"
for r in $(seq 1 "$ROUNDS"); do
  for t in 1 2; do
    for ac in off bf16; do
      echo "== round $r threads $t remat autocast $ac"
      ./build/remat bench $M --threads "$t" --strategies none,block --reps "$REPS" --autocast "$ac" \
        2>/dev/null | grep -E "^(none|block) "
      echo "== round $r threads $t torch autocast $ac"
      /usr/bin/python3 bench/pytorch/bench_torch.py $M --threads "$t" --strategies none,block \
        --reps "$REPS" --autocast "$ac" 2>/dev/null | grep -E "^(none|block) "
    done
  done
done
