#!/usr/bin/env bash
# H200 call E (session 10): call D's Nsight Compute step again with a kernel filter that matches ncu's demangled
# names ("gs_moe_gemm_wgmma_kernel<(int)0, (int)256, ..."; call D's filter matched none and profiled nothing).
# bash reports/measurements/h200-2026-12-02-session10/run_e.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
R=/tmp/eout && mkdir -p $R
SECONDS=0
GS_VARIANTS_SHAPE=DSv3-prefill GS_VARIANTS_ONCE=1 timeout 240 ncu --kernel-name-base demangled \
  --kernel-name "regex:wgmma_kernel<.int.[01], .int.256, .int.4, .int.128," \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis $V > "$R/e_ncu_wgmma.txt" 2>&1
echo "ncu rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"
gzip $R/e_ncu_wgmma.txt
cp $R/* "$OUT/" 2>/dev/null
