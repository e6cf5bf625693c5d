#!/usr/bin/env bash
# H200 diagnostic call: where the platform refusal control hangs, and where one harness.check's time goes.
# bash reports/measurements/h200-2026-12-01-session2/diag.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache PYTHONFAULTHANDLER=1
D=reports/measurements/h200-2026-12-01-session2
nvidia-smi -L > "$OUT/gpus.txt"
timeout -s KILL 120 python3 $D/diag_hang.py cases.platform.runtime_nodes platform_host_function_refused_control 45 > "$OUT/hang_direct.txt" 2>&1
echo "direct rc=$?" >> "$OUT/hang_direct.txt"
timeout -s KILL 60 python3 $D/diag_hang.py cases.platform.runtime_nodes platform_host_function_nodes 30 > "$OUT/hang_positive.txt" 2>&1
echo "positive rc=$?" >> "$OUT/hang_positive.txt"
timeout -s KILL 90 python3 $D/profile_check.py 30 > "$OUT/profile_check.txt" 2>&1
echo "profile rc=$?" >> "$OUT/profile_check.txt"
