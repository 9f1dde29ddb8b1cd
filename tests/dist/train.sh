#!/bin/sh
# tests/dist/train.sh REMAT — `mpirun -np 2 remat train` (CTest dist_train):
#  1. 2 ranks x batch 2 vs 1 process x batch 4: losses within 1e-5
#     relative for 20 steps (reentrant checkpointing under DDP);
#  2. --save under mpirun then --resume under mpirun = the uninterrupted
#     run, bitwise (loss_bits and every loss);
#  2b. --zero (ZeRO-1): half the AdamW state per rank, losses bitwise those
#     of DDP + AdamW; --zero --save / --resume (np 2 and 3) bitwise the
#     uninterrupted run, its file interchangeable with a plain run's;
#  2c. --accum under mpirun (DDP and --zero): one gradient reduction per
#     bucket per step, losses those of one process with the global batch;
#  3. only rank 0 prints (one JSON object, one summary); `remat bench`
#     under mpirun reports once, with the communication figures;
#  4. a rank that cannot start (a missing --resume file) fails the whole
#     job with a message, non-zero, within the time bound;
#  5. ranks given different flags (mpirun's MPMD form) stop before the first
#     step with one message naming the option and both values; `remat bench`
#     too;
#  6. a Hugging Face Llama (--init-from tests/fixtures/hf_cli/llama): 2 ranks
#     x batch 1 vs 1 process x batch 2 within 1e-5, under block checkpointing;
#     rank 0 alone writes --export, which `remat eval` reads.
set -u
remat=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
if [ -n "${REMAT_LSAN_SUPP:-}" ]; then
  export LSAN_OPTIONS="suppressions=$REMAT_LSAN_SUPP:print_suppressions=0"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
M="--layers 2 --width 32 --heads 4 --context 16 --threads 1 --quiet --json"
run2() { mpirun --oversubscribe -np 2 "$remat" train $M "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

run2 --batch 2 --steps 20 --checkpoint block --reentrant > "$tmp/a.json" || fail "2-rank run"
"$remat" train $M --batch 4 --steps 20 > "$tmp/b.json" || fail "1-process run"
[ "$(wc -l < "$tmp/a.json")" -eq 1 ] || fail "more than one JSON object under mpirun (rank 0 only)"
python3 - "$tmp/a.json" "$tmp/b.json" <<'PY' || fail "2 x 2 vs 1 x 4"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["world_size"] == 2 and b["world_size"] == 1, (a["world_size"], b["world_size"])
worst = max(abs(x - y) / abs(y) for x, y in zip(a["losses"], b["losses"]))
assert len(a["losses"]) == 20 and worst <= 1e-5, worst
assert a["tokens_per_s"] > 0 and "comm_hidden_fraction" in a
assert 0 <= a["comm_done_in_backward"] <= 1, a["comm_done_in_backward"]
print("2 ranks x batch 2 vs 1 x batch 4: worst relative loss difference %.2e" % worst)
PY
run2 --batch 2 --steps 20 --checkpoint block --reentrant --zero > "$tmp/z.json" || fail "--zero run"
python3 - "$tmp/a.json" "$tmp/z.json" <<'PY' || fail "--zero"
import json, sys
a, z = (json.load(open(f)) for f in sys.argv[1:3])
assert z["zero"] and not a["zero"]
assert 2 * z["optim_state_bytes"] == a["optim_state_bytes"], (z["optim_state_bytes"], a["optim_state_bytes"])
assert z["losses"] == a["losses"], "ZeRO-1 losses differ from DDP + AdamW"
print("--zero: AdamW state per rank %d of %d bytes; losses bitwise DDP's" % (z["optim_state_bytes"], a["optim_state_bytes"]))
PY
run2 --batch 2 --steps 10 --checkpoint block --save "$tmp/s.bin" > /dev/null || fail "save run"
run2 --batch 2 --steps 20 --checkpoint block --resume "$tmp/s.bin" > "$tmp/c.json" || fail "resume run"
python3 - "$tmp/a.json" "$tmp/c.json" <<'PY' || fail "resume"
import json, sys
a, c = (json.load(open(f)) for f in sys.argv[1:3])
assert a["loss_bits"] == c["loss_bits"] and a["losses"][10:] == c["losses"], (a["loss_bits"], c["loss_bits"])
print("save/resume under mpirun: bitwise the uninterrupted run")
PY
# --zero with --save/--resume: rank 0 gathers the sharded state and writes
# the file a run without --zero writes; either kind resumes the other's
run2 --batch 2 --steps 10 --checkpoint block --zero --save "$tmp/zs.bin" > /dev/null || fail "--zero save run"
run2 --batch 2 --steps 20 --checkpoint block --zero --resume "$tmp/zs.bin" > "$tmp/zz.json" || fail "--zero resume run"
run2 --batch 2 --steps 20 --checkpoint block --resume "$tmp/zs.bin" > "$tmp/zp.json" || fail "resume of a --zero file without --zero"
run2 --batch 2 --steps 20 --checkpoint block --zero --resume "$tmp/s.bin" > "$tmp/pz.json" || fail "--zero resume of a plain file"
run3() { mpirun --oversubscribe -np 3 "$remat" train $M "$@"; }
run3 --batch 2 --steps 12 --zero > "$tmp/z3.json" || fail "--zero np 3"
run3 --batch 2 --steps 6 --zero --save "$tmp/z3.bin" > /dev/null || fail "--zero save np 3"
run3 --batch 2 --steps 12 --zero --resume "$tmp/z3.bin" > "$tmp/z3r.json" || fail "--zero resume np 3"
python3 - "$tmp/a.json" "$tmp/zz.json" "$tmp/zp.json" "$tmp/pz.json" "$tmp/z3.json" "$tmp/z3r.json" <<'PY' || fail "--zero save/resume"
import json, sys
a, zz, zp, pz, z3, z3r = (json.load(open(f)) for f in sys.argv[1:7])
for name, r in (("--zero -> --zero", zz), ("--zero -> plain", zp), ("plain -> --zero", pz)):
    assert r["losses"] == a["losses"][10:] and r["loss_bits"] == a["loss_bits"], name
assert z3r["losses"] == z3["losses"][6:] and z3r["loss_bits"] == z3["loss_bits"], "np 3"
print("--zero save/resume (np 2 and 3; --zero and plain files interchangeable): bitwise the uninterrupted run")
PY
# --accum under mpirun: no_sync before the last micro-batch (one reduction per
# bucket per step), the same trajectory as one process with the global batch;
# --zero --accum bitwise DDP's
run2 --batch 2 --steps 8 --accum 2 --bucket-size 0.01 > "$tmp/acc.json" || fail "--accum run"
"$remat" train $M --batch 4 --steps 8 --accum 2 > "$tmp/acc1.json" || fail "--accum 1-process run"
run2 --batch 2 --steps 8 --accum 2 --bucket-size 0.01 --zero > "$tmp/accz.json" || fail "--zero --accum run"
python3 - "$tmp/acc.json" "$tmp/acc1.json" "$tmp/accz.json" <<'PY' || fail "--accum"
import json, sys
a, b, z = (json.load(open(f)) for f in sys.argv[1:4])
worst = max(abs(x - y) / abs(y) for x, y in zip(a["losses"], b["losses"]))
assert len(a["losses"]) == 8 and worst <= 1e-5, worst
assert a["buckets"] > 1 and a["grad_reductions"] == 8 * a["buckets"], (a["buckets"], a["grad_reductions"])
assert z["grad_reductions"] == 8 * z["buckets"], (z["buckets"], z["grad_reductions"])
assert z["losses"] == a["losses"], "--zero --accum differs from DDP --accum"
print("--accum 2 under mpirun: %d reductions in 8 steps (%d buckets), worst relative loss difference to 1 process %.2e; --zero bitwise" % (a["grad_reductions"], a["buckets"], worst))
PY
mpirun --oversubscribe -np 2 "$remat" bench --layers 2 --width 32 --heads 4 --context 16 \
  --threads 1 --reps 2 --strategies none,block,selective=dots --json 2> /dev/null > "$tmp/bench.json" \
  || fail "bench under mpirun"
python3 - "$tmp/bench.json" <<'PY' || fail "bench under mpirun"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["world_size"] == 2, d["world_size"]
for s in d["strategies"]:
    assert s["grads_bitwise_equal"] and "comm_hidden_fraction" in s, s["strategy"]
print("remat bench under mpirun: one report, gradients bitwise equal across strategies")
PY
# 5. ranks given different configurations (mpirun's MPMD form: one command line
#    per rank) all stop before the first step, with one message naming the option
#    and both values; before this check a different --save-every under --zero
#    overflowed a ZeRO bucket buffer and a different --lr trained apart silently
differ() { # differ WANT RANK0-FLAGS -- RANK1-FLAGS
  want=$1; shift; a=""; while [ "$1" != "--" ]; do a="$a $1"; shift; done; shift
  out=$(timeout 60 mpirun --oversubscribe -np 1 "$remat" train $M --batch 2 --steps 6 $a : \
        -np 1 "$remat" train $M --batch 2 --steps 6 "$@" 2>&1); rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "ranks with$a vs $* ran (rc $rc): $out"
  echo "$out" | grep -qF -- "$want" || fail "no message naming $want: $out"
  [ "$(echo "$out" | grep -c 'different configurations')" -eq 1 ] || fail "not one message: $out"
  ! echo "$out" | grep -q '"losses"' || fail "a step ran: $out"
}
differ "--lr is 0.001 on rank 0 but 0.002 on rank 1" --lr 1e-3 -- --lr 2e-3
differ "--save-every is 2 on rank 0 but 3 on rank 1" --zero --save "$tmp/d.bin" --save-every 2 -- \
  --zero --save "$tmp/d.bin" --save-every 3
differ "--zero is on on rank 0 but off on rank 1" --zero -- --lr 3e-3
differ "--resume is a file of" --checkpoint block --resume "$tmp/s.bin" -- \
  --checkpoint block --resume "$tmp/z3.bin"
echo "ranks given different flags: one message naming the option and both values, no step"
# 5b. the same for `remat bench` (its strategy list and repetitions decide its
#     collectives: a rank with another list ran mismatched steps)
differ_bench() { # differ_bench WANT RANK0-FLAGS -- RANK1-FLAGS
  want=$1; shift; a=""; while [ "$1" != "--" ]; do a="$a $1"; shift; done; shift
  out=$(timeout 60 mpirun --oversubscribe -np 1 "$remat" bench $M --batch 2 --reps 1 $a : \
        -np 1 "$remat" bench $M --batch 2 --reps 1 "$@" 2>&1); rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "bench ranks with$a vs $* ran (rc $rc): $out"
  echo "$out" | grep -qF -- "$want" || fail "no message naming $want: $out"
  [ "$(echo "$out" | grep -c 'different configurations')" -eq 1 ] || fail "not one message: $out"
  ! echo "$out" | grep -q '"strategies"' || fail "bench ran: $out"
}
differ_bench "--strategies is none,block on rank 0 but none,sequential=2 on rank 1" \
  --strategies none,block -- --strategies none,sequential=2
differ_bench "--reps is 1 on rank 0 but 2 on rank 1" -- --reps 2
differ_bench "--width is 32 on rank 0 but 16 on rank 1" -- --width 16
echo "remat bench: ranks given different flags stop the same way"
hf=$(dirname "$0")/../fixtures/hf_cli
H="--init-from $hf/llama --data $hf/data.txt --context 16 --threads 1 --quiet --json --steps 6"
mpirun --oversubscribe -np 2 "$remat" train $H --batch 1 --checkpoint block --export "$tmp/hf2" \
  > "$tmp/h2.json" || fail "2-rank --init-from run"
"$remat" train $H --batch 2 > "$tmp/h1.json" || fail "1-process --init-from run"
"$remat" eval --init-from "$tmp/hf2" --data "$hf/data.txt" --context 16 --json 2>/dev/null \
  | tail -1 > "$tmp/he.json" || fail "eval of the export"
python3 - "$tmp/h2.json" "$tmp/h1.json" "$tmp/he.json" <<'PY' || fail "--init-from under mpirun"
import json, sys
a, b, e = (json.load(open(f)) for f in sys.argv[1:4])
assert a["world_size"] == 2 and a["model"] == "llama", a
worst = max(abs(x - y) / abs(y) for x, y in zip(a["losses"], b["losses"]))
assert len(a["losses"]) == 6 and worst <= 1e-5, worst
assert e["tokens"] > 0 and e["loss"] > 0, e
print("--init-from Llama, 2 ranks x batch 1 vs 1 x batch 2: worst relative loss difference %.2e" % worst)
PY
start=$(date +%s)
out=$(timeout 60 mpirun --oversubscribe -np 2 "$remat" train $M --resume "$tmp/none.bin" 2>&1); rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a failing start did not end the job (rc $rc)"
echo "$out" | grep -q "rank 0: --resume" || fail "no message: $out"
[ $(( $(date +%s) - start )) -le 20 ] || fail "took too long"
echo "ok"
