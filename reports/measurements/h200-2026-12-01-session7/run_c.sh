#!/usr/bin/env bash
# H200 call C (session 7), the final tree .whl/lead.tar (git archive HEAD: scan.hip's per-thread finiteness
# flag, scan.py's lighter GPU batch): the GPU tests of scan and search, compare_micro.py, harness_throughput.py
# three times, a profile of where a full check's time goes, `make verify` warm twice (cold: builds only what
# changed since call B's cache is gone, so a fresh machine's cold run is measured as well).
# bash reports/measurements/h200-2026-12-01-session7/run_c.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/cout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/c_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
D=reports/measurements/h200-2026-12-01-session7
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 150 python3 -m pytest tests/test_scan.py tests/test_search.py tests/test_compare.py tests/test_protocol.py \
  -m gpu -n 4 -q -p no:cacheprovider > "$R/c_gpu_tests.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 $R/c_gpu_tests.txt)" | tee -a "$R/c_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 reports/measurements/h200-2026-12-02-session6/compare_micro.py --repeats 200 > "$R/c_compare_micro.txt" 2>&1
echo "compare micro rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
for i in 1 2 3; do
  PYTHONPATH=/tmp/new timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/c_throughput_$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
done
cat /tmp/c_throughput_*.txt > "$R/c_throughput.txt"
PYTHONPATH=/tmp/new timeout 60 python3 $D/profile_capture.py --checks 200 > "$R/c_profile.txt" 2>&1
echo "profile rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/c_$run" > /tmp/c_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/c_cold.log /tmp/c_warm*.log | tee "$R/c_time_lines.txt"
cp -r /tmp/c_cold /tmp/c_warm /tmp/c_warm2 /tmp/c_*.log $R/
cp $R/c_rc.txt $R/c_time_lines.txt $R/c_compare_micro.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|compare bandwidth / copy" $R/c_throughput.txt | tee "$OUT/c_throughput_lines.txt"
tar czf "$OUT/c_all.tgz" -C /tmp cout
