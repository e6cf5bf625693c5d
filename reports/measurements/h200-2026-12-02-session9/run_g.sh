#!/usr/bin/env bash
# H200 call G (session 9), the final tree .whl/lead.tar: every GPU-marked test of tests/ (pytest -m gpu).
# bash reports/measurements/h200-2026-12-02-session9/run_g.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
R=/tmp/gout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/g_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-g GRAPHSAFE_SEARCH_DB=/tmp/gs-search-g
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 250 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > "$R/g_gpu_tests.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 $R/g_gpu_tests.txt)" | tee -a "$R/g_rc.txt"
grep -E "FAILED|ERROR" "$R/g_gpu_tests.txt" | head -40 > "$R/g_failures.txt"
cp $R/g_rc.txt $R/g_failures.txt $R/g_tree.txt "$OUT/"
tail -40 "$R/g_gpu_tests.txt" > "$OUT/g_gpu_tests_tail.txt"
