#!/usr/bin/env bash
# H200 call B (session 4): the working tree with inputs and references kept per check, the modification check
# in the comparison batch, direct synchronize, and the poisoning allocator's segment cache. GPU tests of the
# harness, then throughput (twice) and the profile of a check.
# bash reports/measurements/h200-2026-12-01-session4/run_b.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b
D=reports/measurements/h200-2026-12-01-session4
git rev-parse HEAD > "$OUT/b_tree.txt"; git status --short >> "$OUT/b_tree.txt"; git diff -- harness >> "$OUT/b_tree.txt"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_gpu_backend.py tests/test_gpu_backend_sequence.py \
  tests/test_scan.py tests/test_protocol.py tests/test_trust.py tests/test_compare.py > "$OUT/b_gpu_tests.txt" 2>&1; echo "gpu tests rc=$?"
timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/b_throughput.txt" 2>&1; echo "throughput rc=$?"
timeout 120 python3 $D/profile_check.py --backend gpu --checks 200 > "$OUT/b_profile.txt" 2>&1; echo "profile rc=$?"
timeout 60 python3 reports/measurements/h200-2026-12-01-session3/phase_times.py 100 > "$OUT/b_phase_times.txt" 2>&1; echo "phases rc=$?"
timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/b_throughput2.txt" 2>&1; echo "throughput rc=$?"
tail -3 "$OUT/b_gpu_tests.txt"; grep -h "harness.check\|unprofiled\|per check" "$OUT"/b_*.txt
