#!/usr/bin/env bash
# H200 call A (session 7), tree .whl/lead.tar (git archive HEAD): the search's GPU tests (the aligned-tail
# control among them), bench/scan_variants.py, compare_micro.py and compare_profile.py, harness_throughput.py
# twice, `make verify` cold and warm twice.
# bash reports/measurements/h200-2026-12-01-session7/run_a.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/aout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/a_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
D=reports/measurements/h200-2026-12-01-session7
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 120 python3 bench/scan_variants.py --variants 4x4,8x4,16x4,4x8,8x8,2x8,8x2,16x2,32x2 > "$R/a_scan_variants.txt" 2>&1
echo "scan variants rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 reports/measurements/h200-2026-12-02-session6/compare_micro.py --repeats 200 > "$R/a_compare_micro.txt" 2>&1
echo "compare micro rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 $D/compare_profile.py --calls 3000 > "$R/a_compare_profile.txt" 2>&1
echo "compare profile rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 120 python3 -m pytest tests/test_search.py -m gpu -n 4 -q -p no:cacheprovider > "$R/a_search_gpu_tests.txt" 2>&1
echo "search gpu tests rc=$? ${SECONDS}s $(tail -1 $R/a_search_gpu_tests.txt)" | tee -a "$R/a_rc.txt"; SECONDS=0
for i in 1 2; do
  PYTHONPATH=/tmp/new timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/a_throughput_$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
done
cat /tmp/a_throughput_*.txt > "$R/a_throughput.txt"
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/a_$run" > /tmp/a_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/a_cold.log /tmp/a_warm*.log | tee "$R/a_time_lines.txt"
grep -h "shape_search\|search" /tmp/a_warm/summary.md 2>/dev/null | head -20 > "$R/a_search_rows.txt"
cp -r /tmp/a_cold /tmp/a_warm /tmp/a_warm2 /tmp/a_*.log $R/
cp $R/a_rc.txt $R/a_time_lines.txt $R/a_scan_variants.txt $R/a_compare_micro.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|compare bandwidth / copy" $R/a_throughput.txt | tee "$OUT/a_throughput_lines.txt"
tar czf "$OUT/a_all.tgz" -C /tmp aout
