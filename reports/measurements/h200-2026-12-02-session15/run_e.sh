#!/usr/bin/env bash
# H200 call E: MXFP8 prefill's converting kernel, first form (call B) with the raw weights copied 4 threads per
# column (coalesced; call D found 41% excess sectors) and more converter registers, with call B's checks: the
# kernel sweep (.whl/moe_gemm_variants, built off the device), the moe_gemm GPU tests, `bench/moe_gemm.py
# --fmt mxfp8` on this tree and on 7b3d074 (.whl/before.tar), compute-sanitizer memcheck / synccheck.
# bash reports/measurements/h200-2026-12-02-session15/run_e.sh   (carry: .whl/before.tar, .whl/moe_gemm_variants)
set -u
mkdir -p /tmp/e /tmp/before && tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1
git status --short > "$OUT/e_tree.txt"; git diff | sha256sum >> "$OUT/e_tree.txt"
SECONDS=0
for run in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_FMT=mxfp8 GS_VARIANTS_SHAPE=$run timeout 45 stdbuf -oL .whl/moe_gemm_variants >> "$OUT/e_variants.txt" 2>&1
  echo "variants $run rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py \
  -m gpu -n 4  -q -p no:cacheprovider > /tmp/e/gpu_tests.txt 2>&1
echo "moe_gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/e/gpu_tests.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error|assert" /tmp/e/gpu_tests.txt | head -80 > "$OUT/e_failures.txt"
for round in 1; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 60 python3 bench/moe_gemm.py \
      --fmt mxfp8 --shapes DSv3-prefill small-K-MoE --out /tmp/e/bench_${tree}_$round.csv) > /tmp/e/bench_${tree}_$round.txt 2>&1
    echo "bench $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
  done
done
for f in /tmp/e/bench_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/e_bench.txt"
for tool in memcheck synccheck; do
  GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
    -k "(accuracy_and_determinism and mxfp8 and (128 or 256)) or (fast_and_exact and mxfp8 and 128)" > /tmp/e/$tool.txt 2>&1
  echo "$tool rc=$? ${SECONDS}s $(tail -1 /tmp/e/$tool.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
  grep -E "ERROR SUMMARY|Invalid|Race|race|Barrier|passed|failed|hazard" /tmp/e/$tool.txt | head -30 > "$OUT/e_$tool.txt"
done
