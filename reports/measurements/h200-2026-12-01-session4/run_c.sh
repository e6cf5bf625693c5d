#!/usr/bin/env bash
# H200 call C (session 4), on committed HEAD carried as .whl/head.tar (`git archive HEAD -o .whl/head.tar`):
# the harness's GPU tests, the throughput and phase times of a check, then `make verify` cold and warm with
# the real-world packages from the carried wheels.
# bash reports/measurements/h200-2026-12-01-session4/run_c.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head && cp -r .whl /tmp/head/ && cd /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
D=reports/measurements/h200-2026-12-01-session4
echo "HEAD tarball: $(sha256sum .whl/head.tar)" > "$OUT/c_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_gpu_backend.py \
  tests/test_gpu_backend_sequence.py tests/test_scan.py tests/test_protocol.py tests/test_trust.py tests/test_compare.py \
  > /tmp/c_gpu_tests.txt 2>&1; echo "gpu tests rc=$? ${SECONDS}s" | tee "$OUT/c_rc.txt"
PYTHONPATH=$PWD timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/c_throughput.txt 2>&1; echo "throughput rc=$?" | tee -a "$OUT/c_rc.txt"
PYTHONPATH=$PWD timeout 60 python3 $D/phase_times.py 100 > /tmp/c_phase_times.txt 2>&1; echo "phases rc=$?" | tee -a "$OUT/c_rc.txt"
S=$SECONDS
export PYTHONPATH=/tmp/rw
timeout 200 make verify ARGS="--report-dir /tmp/c_cold" > /tmp/c_cold.log 2>&1; echo "cold verify rc=$? $((SECONDS-S))s" | tee -a "$OUT/c_rc.txt"; S=$SECONDS
timeout 120 make verify ARGS="--report-dir /tmp/c_warm" > /tmp/c_warm.log 2>&1; echo "warm verify rc=$? $((SECONDS-S))s" | tee -a "$OUT/c_rc.txt"; S=$SECONDS
timeout 120 make verify ARGS="--report-dir /tmp/c_warm2" > /tmp/c_warm2.log 2>&1; echo "warm verify 2 rc=$? $((SECONDS-S))s" | tee -a "$OUT/c_rc.txt"
PYTHONPATH=$PWD timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/c_throughput2.txt 2>&1; echo "throughput rc=$?" | tee -a "$OUT/c_rc.txt"
PYTHONPATH=/tmp/rw:$PWD timeout 60 python3 -X importtime -c "from harness.suites import load_default_suites; load_default_suites()" 2> /tmp/c_importtime.txt; echo "importtime rc=$?" | tee -a "$OUT/c_rc.txt"
sort -t'|' -k2 -n -r /tmp/c_importtime.txt | head -60 > "$OUT/c_importtime_top.txt"
cp /tmp/c_throughput.txt /tmp/c_throughput2.txt /tmp/c_phase_times.txt "$OUT/"
tail -3 /tmp/c_gpu_tests.txt > "$OUT/c_gpu_tests_tail.txt"
tar czf "$OUT/c_all.tgz" -C /tmp c_cold.log c_warm.log c_warm2.log c_cold c_warm c_warm2 c_gpu_tests.txt
grep -h "graphsafe: time\|as expected" /tmp/c_cold.log /tmp/c_warm.log /tmp/c_warm2.log; tail -2 /tmp/c_gpu_tests.txt
grep -h "harness.check" /tmp/c_throughput*.txt; head -30 /tmp/c_phase_times.txt
