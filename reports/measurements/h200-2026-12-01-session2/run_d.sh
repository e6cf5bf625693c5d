#!/usr/bin/env bash
# H200 call D: capture_end probe, the scan tests and throughput after the 16-byte-word scan kernel.
# bash reports/measurements/h200-2026-12-01-session2/run_d.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d
D=reports/measurements/h200-2026-12-01-session2; W=/tmp/wd; mkdir -p $W
SECONDS=0
timeout 60 python3 $D/capture_end_probe.py 20 > $W/d_capture_end_probe.txt 2>&1; echo "probe rc=$? ${SECONDS}s" | tee $W/d_rc.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_scan.py > $W/d_scan_tests.txt 2>&1; echo "scan tests rc=$? ${SECONDS}s" | tee -a $W/d_rc.txt
timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > $W/d_throughput.txt 2>&1; echo "throughput rc=$? ${SECONDS}s" | tee -a $W/d_rc.txt
cp $W/* "$OUT/"
