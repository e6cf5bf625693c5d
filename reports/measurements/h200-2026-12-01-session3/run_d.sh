#!/usr/bin/env bash
# H200 call D, on committed HEAD carried as .whl/head.tar (`git archive HEAD -o .whl/head.tar`): cold then warm
# `make verify` with 8 workers on the one GPU (real-world packages from the carried wheels), between them the
# GPU tests of the changed harness and kernels, then the harness throughput and the kernel benches.
# bash reports/measurements/h200-2026-12-01-session3/run_d.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head && cp -r .whl /tmp/head/ && cd /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONPATH=/tmp/rw PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
echo "HEAD tarball: $(sha256sum .whl/head.tar)" > "$OUT/d_tree.txt"
SECONDS=0
timeout 200 make verify ARGS="--jobs 8 --report-dir /tmp/d_cold" > /tmp/d_cold.log 2>&1; echo "cold verify rc=$? ${SECONDS}s" | tee "$OUT/d_rc.txt"
S=$SECONDS
PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_scan.py tests/test_protocol.py \
  tests/test_gpu_backend.py tests/test_trust.py tests/test_moe_gemm_ops.py tests/test_moe_combine_ops.py \
  tests/test_handshake.py tests/test_platform_cases.py tests/test_search.py > /tmp/d_gpu_tests.txt 2>&1
echo "gpu tests rc=$? $((SECONDS-S))s" | tee -a "$OUT/d_rc.txt"; S=$SECONDS
timeout 120 make verify ARGS="--jobs 8 --report-dir /tmp/d_warm" > /tmp/d_warm.log 2>&1; echo "warm verify rc=$? $((SECONDS-S))s" | tee -a "$OUT/d_rc.txt"
PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/d_throughput.txt 2>&1; echo "throughput rc=$?" | tee -a "$OUT/d_rc.txt"
PYTHONPATH=$PWD timeout 30 python3 -P -m bench.moe_combine --out /tmp/d_moe_combine.csv --tokens 1 64 4096 --reps 100 > /tmp/d_bench.txt 2>&1
PYTHONPATH=$PWD timeout 90 python3 -P -m bench.moe_gemm --out /tmp/d_moe_gemm.csv --fmt mxfp4 mxfp8 bf16 \
  --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode >> /tmp/d_bench.txt 2>&1; echo "benches rc=$?" | tee -a "$OUT/d_rc.txt"
tail -3 /tmp/d_gpu_tests.txt > "$OUT/d_gpu_tests_tail.txt"
tar czf "$OUT/d_all.tgz" -C /tmp d_cold.log d_warm.log d_cold d_warm d_gpu_tests.txt d_throughput.txt d_bench.txt \
  d_moe_combine.csv d_moe_gemm.csv 2>/dev/null
grep -h "graphsafe: time\|as expected" /tmp/d_cold.log /tmp/d_warm.log; tail -2 /tmp/d_gpu_tests.txt
