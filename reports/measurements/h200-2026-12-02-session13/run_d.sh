#!/usr/bin/env bash
# H200 call D, the final code (the planner asked through gs_ask_planner, torch's include folder taken directly),
# in the order that matters if the session's last device seconds run out: every GPU-marked test of tests/,
# `make verify` cold, `python -m bench moe_gemm moe_combine`, host_parts.py. Each step writes to $OUT as it ends.
# bash reports/measurements/h200-2026-12-02-session13/run_d.sh   (carry: .whl, with .whl/real-world's wheels)
set -u
mkdir -p /tmp/rw /tmp/d && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
git status --short > "$OUT/d_tree.txt"; git diff | sha256sum >> "$OUT/d_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 150 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/d/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/d/gpu_tests.txt)" | tee -a "$OUT/d_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/d/gpu_tests.txt | head -60 > "$OUT/d_failures.txt"
tail -3 /tmp/d/gpu_tests.txt > "$OUT/d_gpu_tests_tail.txt"
PYTHONPATH=/tmp/rw GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d-verify timeout 80 make verify ARGS="--report-dir /tmp/d/verify_cold" > /tmp/d/verify_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/d/verify_cold.log | tail -1)" | tee -a "$OUT/d_rc.txt"; SECONDS=0
grep -h "as expected\|graphsafe: time\|Overriding" /tmp/d/verify_cold.log > "$OUT/d_verify_lines.txt"
PYTHONPATH=$PWD timeout 50 python3 -m bench moe_gemm moe_combine --out-dir /tmp/d/bench > "$OUT/d_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 25 python3 reports/measurements/h200-2026-12-02-session13/host_parts.py > "$OUT/d_host_parts.txt" 2>&1
echo "host parts rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"
