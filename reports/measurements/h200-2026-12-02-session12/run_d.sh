#!/usr/bin/env bash
# H200 call D (session 12): Nsight Compute on the MXFP8 fast form of the quantized warpgroup-MMA prefill kernel at
# DSv3-prefill (128 rows, 5 stages), lockstep (PP 0, the launcher's) and ping-pong (PP 1), from the variants
# binary built with call C's source (call_c/pingpong.diff applied; carried in .whl): why ping-pong was slower.
# bash reports/measurements/h200-2026-12-02-session12/run_d.sh   (carry: .whl)
set -u
SECONDS=0
GS_VARIANTS_SHAPE=DSv3-prefill GS_VARIANTS_ONCE=1 timeout 300 ncu --kernel-name-base demangled \
  --kernel-name regex:"gs_moe_gemm_wgmma_q_kernel<1, 128, 5, 1, 1, [01]>" --launch-count 4 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
  .whl/moe_gemm_variants > /tmp/d_ncu.txt 2>&1
echo "ncu rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"
gzip -c /tmp/d_ncu.txt > "$OUT/d_ncu.txt.gz"
