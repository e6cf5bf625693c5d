#!/usr/bin/env bash
# H200 call A: bf16 prefill's warp-specialized persistent kernel (gs_moe_gemm_wgmma_ws_kernel) against the
# kernel it replaces: the kernel sweep (bench/moe_gemm_variants.cu, built off the device for sm_90a and carried
# as .whl/moe_gemm_variants), the moe_gemm GPU tests, `bench/moe_gemm.py --fmt bf16` on this tree and on
# 7b3d074 (.whl/before.tar) in turn, twice, and compute-sanitizer memcheck / synccheck over the bf16
# accuracy tests.   bash reports/measurements/h200-2026-12-02-session15/run_a.sh   (carry: .whl)
set -u
mkdir -p /tmp/a /tmp/before && tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1
git status --short > "$OUT/a_tree.txt"; git diff | sha256sum >> "$OUT/a_tree.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/a_gpu.txt" 2>&1
SECONDS=0
for run in DSv3-prefill small-K-MoE DSv3-prefill; do
  GS_VARIANTS_FMT=bf16 GS_VARIANTS_SHAPE=$run timeout 60 .whl/moe_gemm_variants >> "$OUT/a_variants.txt" 2>&1
  echo "variants $run rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py \
  -m gpu -n 4 -q -p no:cacheprovider > /tmp/a/gpu_tests.txt 2>&1
echo "moe_gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/a/gpu_tests.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error|assert" /tmp/a/gpu_tests.txt | head -60 > "$OUT/a_failures.txt"
for round in 1 2; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 100 python3 bench/moe_gemm.py \
      --fmt bf16 --shapes DSv3-prefill small-K-MoE --out /tmp/a/bench_${tree}_$round.csv) > /tmp/a/bench_${tree}_$round.txt 2>&1
    echo "bench $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
  done
done
for f in /tmp/a/bench_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/a_bench.txt"
for tool in memcheck synccheck; do
  GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
    -k "accuracy_and_determinism and bf16 and (128 or 256)" > /tmp/a/$tool.txt 2>&1
  echo "$tool rc=$? ${SECONDS}s $(tail -1 /tmp/a/$tool.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
  grep -E "ERROR SUMMARY|Invalid|Race|Barrier|passed|failed" /tmp/a/$tool.txt | head -20 > "$OUT/a_$tool.txt"
done
