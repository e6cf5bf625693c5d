#!/usr/bin/env bash
# H200 call A: the new code's targeted GPU tests (the collector pause with its control, back-to-back calls),
# the back-to-back test on a copy whose grid dependency waits are removed (must fail), then
# `python -m bench moe_gemm` and host_parts.py on the tree before (4319479, .whl/before.tar) and after, in turn.
# bash reports/measurements/h200-2026-12-02-session14/run_a.sh   (carry: .whl)
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
git status --short > "$OUT/a_tree.txt"; git diff | sha256sum >> "$OUT/a_tree.txt"
mkdir -p /tmp/before /tmp/mut /tmp/a && tar -xf .whl/before.tar -C /tmp/before
cp -r . /tmp/mut && sed -i 's/asm volatile("griddepcontrol.wait;\\n" ::: "memory");//' /tmp/mut/kernels/moe_gemm/moe_gemm.hip
grep -c "griddepcontrol.wait" kernels/moe_gemm/moe_gemm.hip /tmp/mut/kernels/moe_gemm/moe_gemm.hip > "$OUT/a_mutant.txt"
SECONDS=0
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider \
  tests/test_gpu_backend.py "tests/test_moe_gemm_ops.py::test_gpu_back_to_back_calls_read_their_own_prepared_rows" \
  > /tmp/a/targeted.txt 2>&1
echo "targeted rc=$? ${SECONDS}s $(tail -1 /tmp/a/targeted.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
grep -E "FAILED|Error|assert" /tmp/a/targeted.txt | head -30 >> "$OUT/a_mutant.txt"
(cd /tmp/mut && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-mut PYTHONPATH=/tmp/mut timeout 100 python3 -m pytest -q -p no:cacheprovider \
  "tests/test_moe_gemm_ops.py::test_gpu_back_to_back_calls_read_their_own_prepared_rows" > /tmp/a/mutant.txt 2>&1)
echo "mutant (waits removed) rc=$? ${SECONDS}s $(tail -1 /tmp/a/mutant.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
grep -E "^FAILED|^E  .*(assert|Error)" /tmp/a/mutant.txt | head -20 >> "$OUT/a_mutant.txt"
for round in 1 2; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 90 python3 -m bench moe_gemm \
      --out-dir /tmp/a/bench-$tree-$round) > /tmp/a/bench_${tree}_$round.txt 2>&1
    echo "bench $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 40 python3 \
      reports/measurements/h200-2026-12-02-session13/host_parts.py) > /tmp/a/host_${tree}_$round.txt 2>&1
    echo "host parts $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
  done
done
for f in /tmp/a/bench_*.txt /tmp/a/host_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/a_bench_and_host.txt"
tail -40 /tmp/a/targeted.txt > "$OUT/a_targeted_tail.txt"
