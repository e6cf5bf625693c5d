#!/usr/bin/env bash
# H200 call B (nvidia-h200-x2): GPU tests of the changed harness and the shape search, capture cost breakdown,
# throughput and its profile. bash reports/measurements/h200-2026-12-01-session2/run_b.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
D=reports/measurements/h200-2026-12-01-session2; W=/tmp/wb; mkdir -p $W
SECONDS=0
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_scan.py tests/test_gpu_backend.py tests/test_protocol.py tests/test_trust.py tests/test_search.py > $W/b_gpu_tests.txt 2>&1; echo "gpu tests rc=$? ${SECONDS}s" | tee $W/b_rc.txt
CUDA_VISIBLE_DEVICES=0 timeout 40 python3 $D/capture_costs.py 20 > $W/b_capture_costs.txt 2>&1; echo "capture costs rc=$? ${SECONDS}s" | tee -a $W/b_rc.txt
CUDA_VISIBLE_DEVICES=0 timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > $W/b_throughput.txt 2>&1; echo "throughput rc=$? ${SECONDS}s" | tee -a $W/b_rc.txt
CUDA_VISIBLE_DEVICES=0 timeout 40 python3 $D/profile_check.py 30 > $W/b_profile_check.txt 2>&1; echo "profile rc=$? ${SECONDS}s" | tee -a $W/b_rc.txt
cp $W/b_rc.txt $W/b_capture_costs.txt $W/b_throughput.txt "$OUT/"
tar czf "$OUT/b_logs.tgz" -C $W b_gpu_tests.txt b_profile_check.txt
