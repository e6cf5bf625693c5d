#!/usr/bin/env bash
# H200 call B (session 8), tree .whl/lead.tar (git archive HEAD): the GPU tests of the backend, protocol, scan and
# search; check_timeline.py; harness_throughput.py three times; `make verify` cold and warm twice; the MXFP8
# DSv3-decode row of bench/moe_gemm.py alone, twice, then run2's decode rows in its order (MXFP4 first), and
# graph_vs_eager.py (issue 18's graph figure).
# bash reports/measurements/h200-2026-12-02-session8/run_b.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/bout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/b_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
cd /tmp/new
M=reports/measurements/h200-2026-12-02-session8
SECONDS=0
PYTHONPATH=/tmp/new timeout 170 python3 -m pytest tests/test_gpu_backend.py tests/test_gpu_backend_sequence.py \
  tests/test_protocol.py tests/test_scan.py tests/test_search.py tests/test_trust.py tests/test_controls.py \
  -m gpu -n 6 -q -p no:cacheprovider > "$R/b_gpu_tests.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 $R/b_gpu_tests.txt)" | tee -a "$R/b_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 $M/check_timeline.py --checks 200 > "$R/b_timeline.txt" 2>&1
echo "timeline rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
for i in 1 2 3; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/b_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
done
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/b_$run" > /tmp/b_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/b_cold.log /tmp/b_warm*.log > "$R/b_time_lines.txt"
grep -h "search\|shape_search" /tmp/b_warm/results.csv | cut -d, -f1,16,17,18,19,20 | sort -u > "$R/b_search_rows.txt"
for r in cold warm warm2; do cp /tmp/b_$r/times.csv "$R/b_${r}_times.csv"; cp /tmp/b_$r.log "$R/b_${r}.log"; done
K=reports/measurements/h200-2026-12-02-session6-kernels
for i in 1 2; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/moe_gemm.py --fmt mxfp8 --shapes DSv3-decode --out $R/b_dsv3_mxfp8_$i.csv > "$R/b_dsv3_mxfp8_$i.txt" 2>&1
done
PYTHONPATH=/tmp/new timeout 60 python3 bench/moe_gemm.py --fmt mxfp4 mxfp8 --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode --out $R/b_decode_rows.csv > "$R/b_decode_rows.txt" 2>&1
PYTHONPATH=/tmp/new timeout 40 python3 $K/graph_vs_eager.py mxfp8 DSv3-decode > "$R/b_graph_vs_eager.txt" 2>&1
echo "moe_gemm rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"
cp $R/b_rc.txt $R/b_time_lines.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|bandwidth / copy\|one pattern" $R/b_throughput*.txt > "$OUT/b_throughput_lines.txt"
tar czf "$OUT/b_all.tgz" -C /tmp bout
