#!/usr/bin/env bash
# H200 call A: block-FP8 prefill on fp8 warpgroup MMAs (gs_moe_gemm_wgmma_f8_kernel, x split into two e4m3
# parts): the kernel sweep (.whl/moe_gemm_variants, built off the device), every moe_gemm GPU test,
# `bench/moe_gemm.py --fmt block_fp8` on this tree and on b913136 (.whl/before.tar), compute-sanitizer memcheck
# and synccheck over the new kernel's tests.
# bash reports/measurements/h200-2026-12-03-session16/run_a.sh   (carry: .whl/before.tar, .whl/moe_gemm_variants)
set -u
mkdir -p /tmp/a /tmp/before && tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1
git status --short > "$OUT/a_tree.txt"; git diff | sha256sum >> "$OUT/a_tree.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> "$OUT/a_tree.txt"
SECONDS=0
for run in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_FMT=block_fp8 GS_VARIANTS_SHAPE=$run timeout 60 stdbuf -oL .whl/moe_gemm_variants >> "$OUT/a_variants.txt" 2>&1
  echo "variants $run rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 240 python3 -m pytest tests/test_moe_gemm_ops.py \
  -m gpu -n 4 -q -p no:cacheprovider > /tmp/a/gpu_tests.txt 2>&1
echo "moe_gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/a/gpu_tests.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error|assert" /tmp/a/gpu_tests.txt | head -80 > "$OUT/a_failures.txt"
for tree in after before; do
  dir=$PWD; [ $tree = before ] && dir=/tmp/before
  (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 150 python3 bench/moe_gemm.py \
    --fmt block_fp8 --shapes DSv3-prefill small-K-MoE --out /tmp/a/bench_${tree}.csv) > /tmp/a/bench_${tree}.txt 2>&1
  echo "bench $tree rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
done
for f in /tmp/a/bench_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/a_bench.txt"
for tool in memcheck synccheck; do
  GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
    -k "splits_x or (accuracy_and_determinism and block_fp8 and (128 or 256))" > /tmp/a/$tool.txt 2>&1
  echo "$tool rc=$? ${SECONDS}s $(tail -1 /tmp/a/$tool.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
  grep -E "ERROR SUMMARY|Invalid|Race|race|Barrier|passed|failed|hazard" /tmp/a/$tool.txt | head -30 > "$OUT/a_$tool.txt"
done
