#!/usr/bin/env bash
# H200 call E, on committed HEAD carried as .whl/head.tar (`git archive HEAD -o .whl/head.tar`): cold then warm
# `make verify` with 8 workers on the one GPU (real-world packages from the carried wheels), between them the
# GPU tests of what changed since call D (moe_gemm's split build, the spin control's deadline), then the
# harness throughput.
# bash reports/measurements/h200-2026-12-01-session3/run_e.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head && cp -r .whl /tmp/head/ && cd /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONPATH=/tmp/rw PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
echo "HEAD tarball: $(sha256sum .whl/head.tar)" > "$OUT/e_tree.txt"
SECONDS=0
timeout 200 make verify ARGS="--jobs 8 --report-dir /tmp/e_cold" > /tmp/e_cold.log 2>&1; echo "cold verify rc=$? ${SECONDS}s" | tee "$OUT/e_rc.txt"
S=$SECONDS
PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_scan.py \
  tests/test_moe_gemm_ops.py tests/test_platform_cases.py > /tmp/e_gpu_tests.txt 2>&1
echo "gpu tests rc=$? $((SECONDS-S))s" | tee -a "$OUT/e_rc.txt"; S=$SECONDS
timeout 120 make verify ARGS="--jobs 8 --report-dir /tmp/e_warm" > /tmp/e_warm.log 2>&1; echo "warm verify rc=$? $((SECONDS-S))s" | tee -a "$OUT/e_rc.txt"
PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/e_throughput.txt 2>&1; echo "throughput rc=$?" | tee -a "$OUT/e_rc.txt"
tail -3 /tmp/e_gpu_tests.txt > "$OUT/e_gpu_tests_tail.txt"
tar czf "$OUT/e_all.tgz" -C /tmp e_cold.log e_warm.log e_cold e_warm e_gpu_tests.txt e_throughput.txt
grep -h "graphsafe: time\|as expected" /tmp/e_cold.log /tmp/e_warm.log; tail -2 /tmp/e_gpu_tests.txt
