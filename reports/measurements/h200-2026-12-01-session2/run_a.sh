#!/usr/bin/env bash
# H200 call A (nvidia-h200-x2): GPU tests of the changed harness, capture cost breakdown, throughput, first half
# of the built-in suite, cold build times. bash reports/measurements/h200-2026-12-01-session2/run_a.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache GRAPHSAFE_SEARCH_DB=/tmp/gs-search
D=reports/measurements/h200-2026-12-01-session2; W=/tmp/w; mkdir -p $W
export CUDA_VISIBLE_DEVICES=0
SECONDS=0
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -x tests/test_scan.py tests/test_gpu_backend.py tests/test_protocol.py tests/test_trust.py > $W/a_gpu_tests.txt 2>&1; echo "gpu tests rc=$? ${SECONDS}s" | tee $W/a_rc.txt
timeout 60 python3 $D/capture_costs.py 20 > $W/a_capture_costs.txt 2>&1; echo "capture costs rc=$? ${SECONDS}s" | tee -a $W/a_rc.txt
timeout 90 python3 bench/harness_throughput.py --backend gpu --repeats 50 > $W/a_throughput.txt 2>&1; echo "throughput rc=$? ${SECONDS}s" | tee -a $W/a_rc.txt
timeout 60 python3 $D/profile_check.py 30 > $W/a_profile_check.txt 2>&1; echo "profile rc=$? ${SECONDS}s" | tee -a $W/a_rc.txt
unset CUDA_VISIBLE_DEVICES
timeout 200 python3 -m harness verify --backend gpu -k "not real_world" --shard 1/2 --report-dir $W/verify_shard1 > $W/a_verify_shard1.log 2>&1; echo "verify shard 1/2 rc=$? ${SECONDS}s" | tee -a $W/a_rc.txt
cp $W/a_rc.txt $W/a_capture_costs.txt $W/a_throughput.txt "$OUT/"
tar czf "$OUT/a_logs.tgz" -C $W a_gpu_tests.txt a_profile_check.txt a_verify_shard1.log verify_shard1
