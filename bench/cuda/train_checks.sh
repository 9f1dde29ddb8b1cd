#!/bin/bash
# bench/cuda/train_checks.sh — `remat train --device cuda` beyond one run (issue 30), for the
# GPU window (gpu_window.sh runs it after the training steps; ~30 s on an H100):
#   - every strategy (none, block, selective=dots, budget=70%: 50% is below this small
#     model's floor) on the built-in task, with
#     --eval-every (greedy accuracy) and --log; the last loss of each next to cpu's run of the
#     same flags (the same numbers to rounding: the optimizer's kernels do the cpu's
#     operations; GEMMs and reductions sum in other orders);
#   - AdamW with clipping, accumulation and the cosine schedule, and SGD with momentum;
#   - --save at step 10 then --resume to 20 against an uninterrupted run to 20 (the files
#     byte for byte: the cuda kernels are deterministic run to run);
#   - a cpu run's file resumed on cuda; greedy `remat sample --device cuda` from the file.
# Prints one line per check: OK / DIFF / FAIL with the numbers; the exit status is the
# number of FAILs. Usage: bash bench/cuda/train_checks.sh BUILD_DIR [WORK_DIR]
set -u
BUILD=${1:?usage: train_checks.sh BUILD_DIR [WORK_DIR]}
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
R=$BUILD/remat
SMALL="--layers 2 --width 64 --heads 2 --context 32 --batch 16"
fails=0
say() { echo "$*"; }
# last_loss FILE: the loss of the last step line of a --log file
last_loss() { grep '"loss"' "$1" | tail -1 | sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p'; }
# run NAME DEVICE FLAGS...: one training run, log in $WORK/NAME-DEVICE.jsonl
run() {
  name=$1 dev=$2; shift 2
  timeout -k 2 60 "$R" train --device "$dev" $SMALL --quiet --log "$WORK/$name-$dev.jsonl" "$@" \
    > "$WORK/$name-$dev.out" 2>&1
}
# compare NAME FLAGS...: cpu and cuda runs of the same flags, their last losses
compare() {
  name=$1; shift
  if ! run "$name" cuda "$@"; then
    say "FAIL $name: cuda run: $(tail -3 "$WORK/$name-cuda.out" | tr '\n' ' ')"; fails=$((fails + 1)); return
  fi
  run "$name" cpu "$@" || { say "FAIL $name: cpu run: $(tail -2 "$WORK/$name-cpu.out")"; fails=$((fails + 1)); return; }
  a=$(last_loss "$WORK/$name-cuda.jsonl") b=$(last_loss "$WORK/$name-cpu.jsonl")
  ok=$(python3 -c "a,b=float('$a'),float('$b'); print('OK' if abs(a-b) <= 1e-3*max(1,abs(b)) else 'DIFF')" 2>/dev/null || echo '?')
  say "$ok $name: last loss cuda $a, cpu $b; eval: $(grep '"eval_loss"' "$WORK/$name-cuda.jsonl" | tail -1)"
}
for s in none block selective=dots budget=70%; do
  compare "strategy-${s%%=*}" --steps 20 --eval-every 10 --checkpoint "$s"
done
compare adamw-clip --steps 20 --clip 0.5 --accum 2 --lr-schedule cosine --warmup 4
compare sgd-momentum --steps 20 --optim sgd --lr 0.05 --momentum 0.9
# save at 10, resume to 20, against 20 in one go
if run whole cuda --steps 20 --save "$WORK/whole.bin" && run half cuda --steps 10 --save "$WORK/half.bin" &&
  run resumed cuda --steps 20 --resume "$WORK/half.bin" --save "$WORK/resumed.bin"; then
  if cmp -s "$WORK/whole.bin" "$WORK/resumed.bin"; then say "OK save/resume: the resumed run's file is the uninterrupted one's"
  else say "DIFF save/resume: files differ ($(cmp "$WORK/whole.bin" "$WORK/resumed.bin" | head -1)); last losses $(last_loss "$WORK/whole-cuda.jsonl") vs $(last_loss "$WORK/resumed-cuda.jsonl")"; fi
else
  say "FAIL save/resume: $(tail -2 "$WORK"/whole-cuda.out "$WORK"/half-cuda.out "$WORK"/resumed-cuda.out 2>/dev/null | tr '\n' ' ')"; fails=$((fails + 1))
fi
# a cpu run's file resumed on cuda
if run cpu-half cpu --steps 10 --save "$WORK/cpu-half.bin" &&
  run cpu-resumed cuda --steps 20 --resume "$WORK/cpu-half.bin"; then
  say "OK cpu file resumed on cuda: last loss $(last_loss "$WORK/cpu-resumed-cuda.jsonl") (cpu to 20: $(last_loss "$WORK/whole-cuda.jsonl") on cuda)"
else
  say "FAIL cpu file resumed on cuda: $(tail -2 "$WORK/cpu-resumed-cuda.out")"; fails=$((fails + 1))
fi
# greedy sampling from the cuda run's file, on cuda and on cpu: the same text
if [ -f "$WORK/whole.bin" ]; then
  for dev in cuda cpu; do
    timeout -k 2 30 "$R" sample --device $dev --resume "$WORK/whole.bin" --prompt '12+34=' \
      --tokens 12 --temperature 0 --json > "$WORK/sample-$dev.json" 2>&1
  done
  a=$(sed -n 's/.*"text":\("[^"]*"\).*/\1/p' "$WORK/sample-cuda.json")
  b=$(sed -n 's/.*"text":\("[^"]*"\).*/\1/p' "$WORK/sample-cpu.json")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then say "OK sample --device cuda: $a, as on cpu"
  elif [ -n "$a" ]; then say "DIFF sample --device cuda: $a, cpu $b"
  else say "FAIL sample --device cuda: $(tail -2 "$WORK/sample-cuda.json")"; fails=$((fails + 1)); fi
fi
exit $fails
