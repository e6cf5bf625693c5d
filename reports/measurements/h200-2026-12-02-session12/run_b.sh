#!/usr/bin/env bash
# H200 call B (session 12), the working tree as sent (recorded in b_tree.txt): every family's cold build at
# sm_90a after the moe_gemm unit split and the plan capsule (one family at a time, then all at once), every
# GPU-marked test of tests/, `make verify` cold then warm, bench/harness_throughput.py x2, `python -m bench
# moe_gemm moe_combine`. Each step's output goes to $OUT as it finishes; the logs go into one archive.
# bash reports/measurements/h200-2026-12-02-session12/run_b.sh   (carry: .whl, with .whl/real-world's wheels)
set -u
mkdir -p /tmp/rw /tmp/b && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
git rev-parse HEAD > "$OUT/b_tree.txt"; git status --short >> "$OUT/b_tree.txt"; git diff | sha256sum >> "$OUT/b_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 150 python3 bench/build_times.py --backends cuda,cpu --arch sm_90a --parallel --parallel-cache /tmp/gs-par-b > /tmp/b/build_times.txt 2>&1
echo "build times rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/b/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/b/gpu_tests.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR" /tmp/b/gpu_tests.txt | head -40 > "$OUT/b_failures.txt"
export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b-verify
for run in cold warm; do
  PYTHONPATH=/tmp/rw timeout 110 make verify ARGS="--report-dir /tmp/b/verify_$run" > /tmp/b/verify_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/b/verify_$run.log | tail -1)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
for i in 1 2; do
  PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py > /tmp/b/throughput$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 90 python3 -m bench moe_gemm moe_combine --out-dir /tmp/b/bench > /tmp/b/bench.txt 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
tar czf "$OUT/b_logs.tgz" --exclude='*.html' -C /tmp b
