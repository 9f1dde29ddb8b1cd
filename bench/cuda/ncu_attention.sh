#!/bin/bash
# bench/cuda/ncu_attention.sh — Nsight Compute's account of the fused attention kernels, run
# on the GPU machine by gpu_window.sh (steps ncu-*), so that the kernels can be tuned here,
# without a GPU, from what limits them there: tensor-pipe and issue utilisation, shared-memory
# bank conflicts, the warps' stall reasons, occupancy, registers, the hottest SASS lines.
#
#   bash bench/cuda/ncu_attention.sh remat PROG AUTOCAST   remat's kernels (tc_att_*) in one
#        GPT layer at GPT-2 124M's attention shape (B 8, H 12, T 1024, head 64), one step
#   bash bench/cuda/ncu_attention.sh torch AUTOCAST        PyTorch's SDPA kernels at the same
#        shape, causal, forward + backward (cuDNN / flash: the yardstick's metrics; every
#        kernel of the snippet, its randn fills included: SDPA's names vary by version)
#
# Prints the report as text (--page details); exits 3 when ncu is not installed there.
set -u
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda*/nsight-compute*/ncu \
  /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then
  echo "ncu_attention: Nsight Compute (ncu) not found; /usr/local/cuda/bin has:"
  ls /usr/local/cuda/bin
  exit 3
fi
"$NCU" --version | tail -1
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy
  --section SchedulerStats --section WarpStateStats --section InstructionStats
  --section SourceCounters"
METRICS=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed.sum,sm__inst_executed_pipe_xu.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum,sm__inst_executed_pipe_lsu.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum
what=${1:-remat}
case $what in
  remat)
    prog=$2 ac=${3:-bf16}
    # shellcheck disable=SC2086
    "$NCU" --clock-control none --target-processes all -k regex:tc_att -c 4 $SECTIONS --metrics "$METRICS" \
      --page details --print-units base \
      "$prog" bench --device cuda --layers 1 --width 768 --heads 12 --context 1024 --batch 8 \
      --autocast "$ac" --strategies none --reps 1
    ;;
  torch)
    ac=${2:-bf16}
    dt=$([ "$ac" = bf16 ] && echo bfloat16 || echo float32)
    # shellcheck disable=SC2086
    "$NCU" --clock-control none --target-processes all -c 16 $SECTIONS \
      --metrics "$METRICS" --page details --print-units base \
      python3 -c "
import torch, torch.nn.functional as F
q, k, v = (torch.randn(8, 12, 1024, 64, device='cuda', dtype=torch.$dt, requires_grad=True)
           for _ in range(3))
y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
y.backward(torch.randn_like(y))
torch.cuda.synchronize()
print('sdpa', y.dtype, y.shape)
"
    ;;
  *) echo "ncu_attention: remat PROG AUTOCAST | torch AUTOCAST" >&2; exit 2 ;;
esac
