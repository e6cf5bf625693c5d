#!/usr/bin/env bash
# H200 call B, the final kernels (the bf16 warpgroup-MMA kernel's own zero-fill blocks, the workspace from
# torch's allocator, the capture's collector pause): every GPU-marked test, `make verify` cold, then
# `python -m bench moe_gemm` and host_parts.py on this tree and on 4319479 (.whl/before.tar) in turn, and the
# platform cases' tests three more times (the flaky rebuild control of session 13, call D).
# bash reports/measurements/h200-2026-12-02-session14/run_b.sh   (carry: .whl)
set -u
mkdir -p /tmp/rw /tmp/b /tmp/before && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
git status --short > "$OUT/b_tree.txt"; git diff | sha256sum >> "$OUT/b_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 170 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/b/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/b/gpu_tests.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/b/gpu_tests.txt | head -60 > "$OUT/b_failures.txt"
PYTHONPATH=/tmp/rw GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b-verify timeout 100 make verify ARGS="--report-dir /tmp/b/verify_cold" > /tmp/b/verify_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/b/verify_cold.log | tail -1)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
grep -h "as expected\|graphsafe: time\|Overriding" /tmp/b/verify_cold.log > "$OUT/b_verify_lines.txt"
for tree in after before; do
  dir=$PWD; [ $tree = before ] && dir=/tmp/before
  (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 90 python3 -m bench moe_gemm \
    --out-dir /tmp/b/bench-$tree) > /tmp/b/bench_$tree.txt 2>&1
  echo "bench $tree rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
  (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 40 python3 \
    reports/measurements/h200-2026-12-02-session13/host_parts.py) > /tmp/b/host_$tree.txt 2>&1
  echo "host parts $tree rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
for f in /tmp/b/bench_*.txt /tmp/b/host_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/b_bench_and_host.txt"
for i in 1 2 3; do
  PYTHONPATH=$PWD timeout 60 python3 -m pytest tests/test_platform_cases.py -m gpu -n 4 -q -p no:cacheprovider > /tmp/b/platform_$i.txt 2>&1
  echo "platform tests $i rc=$? ${SECONDS}s $(tail -1 /tmp/b/platform_$i.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
