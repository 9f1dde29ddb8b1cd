#!/bin/sh
# tests/dist/run.sh NP BINARY MODE — runs BINARY MODE under `mpirun -np NP`
# (CTest's dist tests). As root, Open MPI wants the two ALLOW_RUN_AS_ROOT
# variables; --oversubscribe lets 3 ranks share 2 cores; OMP_NUM_THREADS=1
# keeps the ranks from fighting over them.
#   MODE all          every check must pass
#   MODE hang|kill|error   rank 1 fails: the job must end non-zero within
#                     20 s and the output must name rank 1
np=$1; bin=$2; mode=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# shared memory between the ranks, no network probing on a machine without one
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
if [ -n "$REMAT_LSAN_SUPP" ]; then
  export LSAN_OPTIONS="suppressions=$REMAT_LSAN_SUPP:print_suppressions=0"
  # keep Open MPI's plug-ins loaded at exit so that their frames can be named
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  # Open MPI is built without frame pointers: unwind allocations the slow way
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
fi
if [ "$mode" = all ]; then
  exec mpirun --oversubscribe -np "$np" "$bin" all
fi
start=$(date +%s)
out=$(timeout 60 mpirun --oversubscribe -np "$np" "$bin" "$mode" 2>&1); rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "exit status $rc after ${elapsed} s"
[ "$rc" -ne 0 ] || { echo "FAIL: the job succeeded although rank 1 failed"; exit 1; }
[ "$rc" -ne 124 ] || { echo "FAIL: the job hung"; exit 1; }
[ "$elapsed" -le 20 ] || { echo "FAIL: took ${elapsed} s (bound 20 s)"; exit 1; }
case "$mode" in
  hang) pat="no answer from rank 1 within 2 s" ;;
  kill) pat="rank 1" ;;
  error) pat="rank 1 failed" ;;
esac
echo "$out" | grep -q "$pat" || { echo "FAIL: no message naming the failed rank ('$pat')"; exit 1; }
echo "ok: $mode"
