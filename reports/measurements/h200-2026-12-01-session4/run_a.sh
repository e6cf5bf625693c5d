#!/usr/bin/env bash
# H200 call A (session 4), on the committed tree 8e8cb69: where a full check's host time goes (cProfile and
# the session-3 phase accumulator), and the harness throughput for this machine's baseline.
# bash reports/measurements/h200-2026-12-01-session4/run_a.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a
D=reports/measurements/h200-2026-12-01-session4
git rev-parse HEAD > "$OUT/a_tree.txt"; git status --short >> "$OUT/a_tree.txt"
timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/a_throughput.txt" 2>&1; echo "throughput rc=$?"
timeout 120 python3 $D/profile_check.py --backend gpu --checks 200 > "$OUT/a_profile.txt" 2>&1; echo "profile rc=$?"
timeout 60 python3 reports/measurements/h200-2026-12-01-session3/phase_times.py 100 > "$OUT/a_phase_times.txt" 2>&1; echo "phases rc=$?"
timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/a_throughput2.txt" 2>&1; echo "throughput rc=$?"
grep -h "harness.check\|unprofiled\|per check" "$OUT"/a_*.txt
