#!/usr/bin/env bash
# H200 call B (session 7), tree .whl/lead.tar (git archive HEAD: the scan without per-element finiteness tests,
# the spin control's 5 s deadline): bench/scan_variants.py; then scan.hip's two launch constants in the
# extracted tree are set to the variant fastest at 64 MiB (the choice is printed in b_choice.txt) and the
# rest runs on that: the GPU tests of scan, search, platform cases and the protocol, compare_micro.py,
# harness_throughput.py three times, `make verify` cold and warm three times.
# bash reports/measurements/h200-2026-12-01-session7/run_b.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/bout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/b_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 120 python3 bench/scan_variants.py --variants 4x4,2x8,4x8,8x4,2x16,1x16,3x8,2x4 --rounds 7 > "$R/b_scan_variants.txt" 2>&1
echo "scan variants rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
best=$(awk '/^n = 16777216/{big=1} big && $1 ~ /^[0-9]+x[0-9]+$/ {print $2, $1}' "$R/b_scan_variants.txt" | sort -n | head -1 | awk '{print $2}')
blocks=${best%x*}; unroll=${best#*x}
echo "chosen: ${best} (blocks per SM ${blocks}, words per thread ${unroll})" | tee "$R/b_choice.txt"
sed -i "s/^#define GS_SCAN_BLOCKS_PER_SM 4$/#define GS_SCAN_BLOCKS_PER_SM ${blocks}/; s/^#define GS_SCAN_UNROLL 4$/#define GS_SCAN_UNROLL ${unroll}/" harness/native/scan.hip
grep -n "^#define GS_SCAN" harness/native/scan.hip | tee -a "$R/b_choice.txt"
PYTHONPATH=/tmp/new timeout 200 python3 -m pytest tests/test_scan.py tests/test_search.py tests/test_platform_cases.py \
  tests/test_protocol.py tests/test_gpu_backend.py tests/test_controls.py tests/test_trust.py -m gpu -n 4 -q -p no:cacheprovider > "$R/b_gpu_tests.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 $R/b_gpu_tests.txt)" | tee -a "$R/b_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 reports/measurements/h200-2026-12-02-session6/compare_micro.py --repeats 200 > "$R/b_compare_micro.txt" 2>&1
echo "compare micro rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
for i in 1 2 3; do
  PYTHONPATH=/tmp/new timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/b_throughput_$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
done
cat /tmp/b_throughput_*.txt > "$R/b_throughput.txt"
for run in cold warm warm2 warm3; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/b_$run" > /tmp/b_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/b_cold.log /tmp/b_warm*.log | tee "$R/b_time_lines.txt"
cp -r /tmp/b_cold /tmp/b_warm /tmp/b_warm2 /tmp/b_warm3 /tmp/b_*.log $R/
cp $R/b_rc.txt $R/b_time_lines.txt $R/b_scan_variants.txt $R/b_compare_micro.txt $R/b_choice.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|compare bandwidth / copy" $R/b_throughput.txt | tee "$OUT/b_throughput_lines.txt"
tar czf "$OUT/b_all.tgz" -C /tmp bout
