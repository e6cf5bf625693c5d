#!/usr/bin/env bash
# H200 call A: the ops' C++ kernels at torch's dispatch key (moe_gemm.torch.cpp, moe_combine.torch.cpp). Cold
# builds of both families at sm_90a, every GPU-marked test of tests/, `make verify` cold, and
# `python -m bench moe_gemm moe_combine` (host_us columns against the same run's grouped_mm / torch rows).
# bash reports/measurements/h200-2026-12-02-session13/run_a.sh   (carry: .whl, with .whl/real-world's wheels)
set -u
mkdir -p /tmp/rw /tmp/a && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
git rev-parse HEAD > "$OUT/a_tree.txt"; git status --short >> "$OUT/a_tree.txt"; git diff | sha256sum >> "$OUT/a_tree.txt"
python3 -c "import torch; print(torch.__version__, torch.version.git_version)" >> "$OUT/a_tree.txt"; g++ --version | head -1 >> "$OUT/a_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 120 python3 bench/build_times.py --backends cuda,cpu --arch sm_90a --parallel --parallel-cache /tmp/gs-par-a > /tmp/a/build_times.txt 2>&1
echo "build times rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
cp /tmp/a/build_times.txt "$OUT/a_build_times.txt"
PYTHONPATH=$PWD timeout 100 python3 -m bench moe_gemm moe_combine --out-dir /tmp/a/bench > /tmp/a/bench.txt 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
cp /tmp/a/bench.txt "$OUT/a_bench.txt"
PYTHONPATH=$PWD timeout 230 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/a/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/a/gpu_tests.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/a/gpu_tests.txt | head -60 > "$OUT/a_failures.txt"
export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a-verify
PYTHONPATH=/tmp/rw timeout 110 make verify ARGS="--report-dir /tmp/a/verify_cold" > /tmp/a/verify_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/a/verify_cold.log | tail -1)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
tar czf "$OUT/a_logs.tgz" --exclude='*.html' -C /tmp a
