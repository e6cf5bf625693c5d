#!/usr/bin/env bash
# H200 call F (session 9): Nsight Compute over the decode kernels' variants in bench/moe_gemm_variants.cu at
# Hy4-TP8-decode (the MXFP8 CUDA-core kernel, the MXFP8 and MXFP4 rings; one launch per variant).
# bash reports/measurements/h200-2026-12-02-session9/run_f.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
R=/tmp/fout && mkdir -p $R
SECONDS=0
GS_VARIANTS_SHAPE=Hy4-TP8-decode GS_VARIANTS_ONCE=1 timeout 300 ncu \
  --kernel-name regex:"gs_moe_gemm_kernel|gs_moe_gemm_mma_ring_kernel" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis $V > "$R/f_ncu_decode.txt" 2>&1
echo "ncu rc=$? ${SECONDS}s" | tee -a "$R/f_rc.txt"
cp $R/f_rc.txt "$OUT/"
gzip -c $R/f_ncu_decode.txt > "$OUT/f_ncu_decode.txt.gz"
