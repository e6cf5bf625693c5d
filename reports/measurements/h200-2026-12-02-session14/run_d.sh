#!/usr/bin/env bash
# H200 call D, the final code (the quantized prefill's form decision: one column per thread, 16-byte loads):
# every GPU-marked test, `make verify` cold, `python -m bench moe_gemm` on this tree and on 4319479
# (.whl/before.tar) in turn, twice, host_parts.py on both, compute-sanitizer memcheck over the prefill form tests.
# bash reports/measurements/h200-2026-12-02-session14/run_d.sh   (carry: .whl)
set -u
mkdir -p /tmp/rw /tmp/d /tmp/before && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1 GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
git status --short > "$OUT/d_tree.txt"; git diff | sha256sum >> "$OUT/d_tree.txt"
SECONDS=0
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 170 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/d/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/d/gpu_tests.txt)" | tee -a "$OUT/d_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/d/gpu_tests.txt | head -60 > "$OUT/d_failures.txt"
PYTHONPATH=/tmp/rw GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d-verify timeout 100 make verify ARGS="--report-dir /tmp/d/verify_cold" > /tmp/d/verify_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/d/verify_cold.log | tail -1)" | tee -a "$OUT/d_rc.txt"; SECONDS=0
grep -h "as expected\|graphsafe: time\|Overriding" /tmp/d/verify_cold.log > "$OUT/d_verify_lines.txt"
for round in 1 2; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 90 python3 -m bench moe_gemm \
      --out-dir /tmp/d/bench-$tree-$round) > /tmp/d/bench_${tree}_$round.txt 2>&1
    echo "bench $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
  done
done
for tree in after before; do
  dir=$PWD; [ $tree = before ] && dir=/tmp/before
  (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 40 python3 \
    reports/measurements/h200-2026-12-02-session13/host_parts.py) > /tmp/d/host_$tree.txt 2>&1
  echo "host parts $tree rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
done
for f in /tmp/d/bench_*.txt /tmp/d/host_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/d_bench_and_host.txt"
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or fast_path_is_exact or block_fp8_prefill or e8m0_0_and_255" > /tmp/d/memcheck.txt 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 /tmp/d/memcheck.txt)" | tee -a "$OUT/d_rc.txt"
grep -E "ERROR SUMMARY|Invalid|passed|failed" /tmp/d/memcheck.txt | head -20 > "$OUT/d_memcheck.txt"
