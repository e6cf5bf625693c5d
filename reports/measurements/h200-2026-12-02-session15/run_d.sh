#!/usr/bin/env bash
# H200 call D: Nsight Compute on the converting kernel's second form (call C's binary, .whl/moe_gemm_variants,
# built from call_c/converting_kernel_second_form.diff applied to 7b3d074) at DSv3-prefill MXFP8: why its
# stages take about 2 us (warp states, issue, pipes, the top stall locations in the SASS).
# bash reports/measurements/h200-2026-12-02-session15/run_d.sh   (carry: .whl/moe_gemm_variants)
set -u
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SourceCounters"
GS_VARIANTS_ONCE=1 GS_VARIANTS_FMT=mxfp8 GS_VARIANTS_SHAPE=DSv3-prefill timeout 150 \
  ncu -k regex:gs_moe_gemm_wgmma_cv_kernel -c 1 $SECTIONS .whl/moe_gemm_variants > "$OUT/d_ncu_cv.txt" 2>&1
echo "ncu cv rc=$?" >> "$OUT/d_rc.txt"
