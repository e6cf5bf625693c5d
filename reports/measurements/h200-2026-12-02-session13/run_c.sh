#!/usr/bin/env bash
# H200 call C, on the final dispatcher units (torch.empty through empty_ops.h): every family's cold build at
# sm_90a, host_parts.py (the parts of one eager moe_gemm call per kernel path), `python -m bench moe_gemm
# moe_combine`, bench/harness_throughput.py, and every GPU-marked test of tests/.
# bash reports/measurements/h200-2026-12-02-session13/run_c.sh
set -u
mkdir -p /tmp/c
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
git status --short > "$OUT/c_tree.txt"; git diff | sha256sum >> "$OUT/c_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 120 python3 bench/build_times.py --backends cuda,cpu --arch sm_90a --parallel --parallel-cache /tmp/gs-par-c > "$OUT/c_build_times.txt" 2>&1
echo "build times rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 90 python3 reports/measurements/h200-2026-12-02-session13/host_parts.py > "$OUT/c_host_parts.txt" 2>&1
echo "host parts rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 100 python3 -m bench moe_gemm moe_combine --out-dir /tmp/c/bench > "$OUT/c_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py > "$OUT/c_throughput.txt" 2>&1
echo "throughput rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/c/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/c/gpu_tests.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/c/gpu_tests.txt | head -60 > "$OUT/c_failures.txt"
tar czf "$OUT/c_logs.tgz" -C /tmp c
