#!/usr/bin/env bash
# H200 call B: call A's script after the registration fix (gs_torch.h: one torch::Library per module), without
# the build timing: `python -m bench moe_gemm moe_combine`, every GPU-marked test of tests/, `make verify` cold.
# bash reports/measurements/h200-2026-12-02-session13/run_b.sh   (carry: .whl, with .whl/real-world's wheels)
set -u
mkdir -p /tmp/rw /tmp/b && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
git rev-parse HEAD > "$OUT/b_tree.txt"; git status --short >> "$OUT/b_tree.txt"; git diff | sha256sum >> "$OUT/b_tree.txt"
python3 -c "import torch; print(torch.__version__, torch.version.git_version)" >> "$OUT/b_tree.txt"; g++ --version | head -1 >> "$OUT/b_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 100 python3 -m bench moe_gemm moe_combine --out-dir /tmp/b/bench > /tmp/b/bench.txt 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
cp /tmp/b/bench.txt "$OUT/b_bench.txt"
PYTHONPATH=$PWD timeout 230 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/b/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/b/gpu_tests.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/b/gpu_tests.txt | head -60 > "$OUT/b_failures.txt"
export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b-verify
PYTHONPATH=/tmp/rw timeout 110 make verify ARGS="--report-dir /tmp/b/verify_cold" > /tmp/b/verify_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/b/verify_cold.log | tail -1)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
tar czf "$OUT/b_logs.tgz" --exclude='*.html' -C /tmp b
