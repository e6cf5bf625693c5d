#!/usr/bin/env bash
# H200 call B: the block-FP8 fp8-MMA kernel with its two parts of x in either order (lo first, hi first),
# against the register-A kernel in the same sweep; Nsight Compute on both at DSv3-prefill.
# bash reports/measurements/h200-2026-12-03-session16/run_b.sh   (carry: .whl/moe_gemm_variants)
set -u
export PYTHONUNBUFFERED=1
git status --short > "$OUT/b_tree.txt"; git diff | sha256sum >> "$OUT/b_tree.txt"
SECONDS=0
for run in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_FMT=block_fp8 GS_VARIANTS_SHAPE=$run timeout 60 stdbuf -oL .whl/moe_gemm_variants >> "$OUT/b_variants.txt" 2>&1
  echo "variants $run rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
SECTIONS="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section ComputeWorkloadAnalysis --section SchedulerStats"
export GS_VARIANTS_ONCE=1 GS_VARIANTS_FMT=block_fp8 GS_VARIANTS_SHAPE=DSv3-prefill
timeout 100 ncu -k regex:gs_moe_gemm_wgmma_f8_kernel -c 1 $SECTIONS .whl/moe_gemm_variants > "$OUT/b_ncu_f8.txt" 2>&1
echo "ncu f8 rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
timeout 100 ncu -k regex:gs_moe_gemm_wgmma_q_kernel -s 1 -c 1 $SECTIONS .whl/moe_gemm_variants > "$OUT/b_ncu_q.txt" 2>&1
echo "ncu q rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"
