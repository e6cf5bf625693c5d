#!/usr/bin/env bash
# H200 call D (session 7), the final tree .whl/lead.tar (git archive HEAD: the search's block edges in rounds,
# 170 sweep points and 30 examples): the GPU tests of the search, `make verify` cold and warm twice,
# harness_throughput.py once.
# bash reports/measurements/h200-2026-12-01-session7/run_d.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/dout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/d_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 100 python3 -m pytest tests/test_search.py -m gpu -n 4 -q -p no:cacheprovider > "$R/d_gpu_tests.txt" 2>&1
echo "search gpu tests rc=$? ${SECONDS}s $(tail -1 $R/d_gpu_tests.txt)" | tee -a "$R/d_rc.txt"; SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 140 make verify ARGS="--report-dir /tmp/d_$run" > /tmp/d_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/d_cold.log /tmp/d_warm*.log | tee "$R/d_time_lines.txt"
PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/d_throughput.txt" 2>&1
echo "throughput rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"
grep -h "search\|shape_search" /tmp/d_warm/results.csv | cut -d, -f1,16,17,18,19,20 | sort -u > "$R/d_search_rows.txt"
for r in cold warm warm2; do cp /tmp/d_$r/times.csv "$R/d_${r}_times.csv"; done
cp $R/d_rc.txt $R/d_time_lines.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|compare bandwidth / copy" $R/d_throughput.txt | tee "$OUT/d_throughput_lines.txt"
tar czf "$OUT/d_all.tgz" -C /tmp dout
