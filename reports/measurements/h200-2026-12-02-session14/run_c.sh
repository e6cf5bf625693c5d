#!/usr/bin/env bash
# H200 call C: the quantized prefill kernel's form decision spread over every thread of the CTA. The moe_gemm
# GPU tests, compute-sanitizer memcheck over the prefill form tests, then `python -m bench moe_gemm` on this tree
# and on 4319479 (.whl/before.tar) in turn, twice.
# bash reports/measurements/h200-2026-12-02-session14/run_c.sh   (carry: .whl)
set -u
mkdir -p /tmp/c /tmp/before && tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1 GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
git status --short > "$OUT/c_tree.txt"; git diff | sha256sum >> "$OUT/c_tree.txt"
SECONDS=0
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -p no:cacheprovider > /tmp/c/gemm_tests.txt 2>&1
echo "moe_gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/c/gemm_tests.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/c/gemm_tests.txt | head -40 > "$OUT/c_failures.txt"
for round in 1 2; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 90 python3 -m bench moe_gemm \
      --out-dir /tmp/c/bench-$tree-$round) > /tmp/c/bench_${tree}_$round.txt 2>&1
    echo "bench $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
  done
done
for f in /tmp/c/bench_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/c_bench.txt"
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or fast_path_is_exact or block_fp8_prefill or e8m0_0_and_255" > /tmp/c/memcheck.txt 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 /tmp/c/memcheck.txt)" | tee -a "$OUT/c_rc.txt"
grep -E "ERROR SUMMARY|Invalid|passed|failed" /tmp/c/memcheck.txt | head -20 > "$OUT/c_memcheck.txt"
