#!/usr/bin/env bash
# H200 call F: Nsight Compute on the DSv3-prefill kernels (the bf16 warpgroup-MMA kernel; the MXFP8 quantized
# kernel's one launch that does the work, the fast form), for the next step on prefill speed.
# bash reports/measurements/h200-2026-12-02-session14/run_f.sh
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-f PYTHONPATH=$PWD
S=reports/measurements/h200-2026-12-02-session14/ncu_shapes.py
SECTIONS="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section ComputeWorkloadAnalysis"
python3 $S bf16 > "$OUT/f_warm.txt" 2>&1; python3 $S mxfp8 >> "$OUT/f_warm.txt" 2>&1
timeout 80 ncu -k regex:gs_moe_gemm_wgmma_kernel -s 2 -c 1 $SECTIONS python3 $S bf16 > "$OUT/f_ncu_bf16.txt" 2>&1
echo "ncu bf16 rc=$?" >> "$OUT/f_rc.txt"
timeout 80 ncu -k regex:gs_moe_gemm_wgmma_q_kernel -s 4 -c 1 $SECTIONS python3 $S mxfp8 > "$OUT/f_ncu_mxfp8.txt" 2>&1
echo "ncu mxfp8 rc=$?" >> "$OUT/f_rc.txt"
