#!/usr/bin/env bash
# H200 call A: GPU tests of the batched comparison pass, the harness throughput, and where a check's time goes.
# bash reports/measurements/h200-2026-12-01-session3/run_a.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a
D=reports/measurements/h200-2026-12-01-session3; SECONDS=0
git log -1 --format=%H > "$OUT/a_tree.txt" 2>/dev/null; git status --short >> "$OUT/a_tree.txt" 2>/dev/null
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_scan.py tests/test_protocol.py \
  tests/test_gpu_backend.py tests/test_trust.py > "$OUT/a_gpu_tests.txt" 2>&1; echo "tests rc=$? ${SECONDS}s" | tee "$OUT/a_rc.txt"
timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/a_throughput.txt" 2>&1; echo "throughput rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"
timeout 60 python3 $D/phase_times.py 100 > "$OUT/a_phase_times.txt" 2>&1; echo "phases rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"
