#!/usr/bin/env bash
# H200 call G, the review's launcher change (the zero-fill row count computed once and passed to the ring and
# warpgroup-MMA launchers): the moe_gemm GPU tests of the zero-fill, launch counts, graph replay and accuracy.
# bash reports/measurements/h200-2026-12-02-session14/run_g.sh
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-g PYTHONPATH=$PWD
git status --short > "$OUT/g_tree.txt"; git diff | sha256sum >> "$OUT/g_tree.txt"
SECONDS=0
timeout 110 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -p no:cacheprovider \
  -k "zero_fill or launches_per_call or replays_from_a_graph or accuracy_and_determinism or matches_cpu_twin" > "$OUT/g_tests.txt" 2>&1
echo "tests rc=$? ${SECONDS}s $(tail -1 $OUT/g_tests.txt)" | tee -a "$OUT/g_rc.txt"
