#!/usr/bin/env bash
# H200 call C: the MX prefill at 64 rows of x in one launch (kWqAuto: each CTA takes the form its scan chose)
# against the fast / rest pair: the kernel sweep (.whl/moe_gemm_variants), every moe_gemm GPU test (launch counts,
# block-FP8's inf / NaN rows), `bench/moe_gemm.py --fmt mxfp8 / mxfp4` on this tree and on b913136
# (.whl/before.tar) twice, compute-sanitizer memcheck over the form tests.
# bash reports/measurements/h200-2026-12-03-session16/run_c.sh   (carry: .whl/before.tar, .whl/moe_gemm_variants)
set -u
mkdir -p /tmp/c /tmp/before && tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1
git status --short > "$OUT/c_tree.txt"; git diff | sha256sum >> "$OUT/c_tree.txt"
SECONDS=0
for fmt in mxfp8 mxfp4; do
  for run in DSv3-prefill small-K-MoE; do
    GS_VARIANTS_FMT=$fmt GS_VARIANTS_SHAPE=$run timeout 60 stdbuf -oL .whl/moe_gemm_variants >> "$OUT/c_variants.txt" 2>&1
    echo "variants $fmt $run rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
  done
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 240 python3 -m pytest tests/test_moe_gemm_ops.py \
  -m gpu -n 4 -q -p no:cacheprovider > /tmp/c/gpu_tests.txt 2>&1
echo "moe_gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/c/gpu_tests.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error|assert" /tmp/c/gpu_tests.txt | head -80 > "$OUT/c_failures.txt"
for round in 1 2; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    for fmt in mxfp8 mxfp4; do
      (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 150 python3 bench/moe_gemm.py \
        --fmt $fmt --shapes small-K-MoE DSv3-prefill --out /tmp/c/bench_${tree}_${fmt}_$round.csv) \
        > /tmp/c/bench_${tree}_${fmt}_$round.txt 2>&1
      echo "bench $tree $fmt $round rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
    done
  done
done
for f in /tmp/c/bench_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/c_bench.txt"
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or fast_path_is_exact or e8m0_0_and_255" > /tmp/c/memcheck.txt 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 /tmp/c/memcheck.txt)" | tee -a "$OUT/c_rc.txt"
grep -E "ERROR SUMMARY|Invalid|passed|failed" /tmp/c/memcheck.txt | head -20 > "$OUT/c_memcheck.txt"
