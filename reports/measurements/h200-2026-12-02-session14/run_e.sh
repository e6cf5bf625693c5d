#!/usr/bin/env bash
# H200 call E, the final code with bench moe_gemm's host_us as the best of 7 x 50 calls: `python -m bench moe_gemm
# moe_combine` twice, host_parts.py.
# bash reports/measurements/h200-2026-12-02-session14/run_e.sh
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
git status --short > "$OUT/e_tree.txt"; git diff | sha256sum >> "$OUT/e_tree.txt"
SECONDS=0
for round in 1 2; do
  PYTHONPATH=$PWD timeout 100 python3 -m bench moe_gemm moe_combine --out-dir /tmp/e/bench-$round > "$OUT/e_bench_$round.txt" 2>&1
  echo "bench $round rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 40 python3 reports/measurements/h200-2026-12-02-session13/host_parts.py > "$OUT/e_host_parts.txt" 2>&1
echo "host parts rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"
