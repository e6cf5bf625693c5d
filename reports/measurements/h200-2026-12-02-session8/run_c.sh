#!/usr/bin/env bash
# H200 call C (session 8), tree .whl/lead.tar (git archive HEAD): bench/moe_gemm_variants.cu (built here with
# its header's nvcc line, carried as .whl/moe_gemm_variants) at the three decode shapes; `make verify` cold and
# warm three times (the order after the replacement-start accounting); harness_throughput.py three times;
# bench_graph_gap.py; check_timeline.py.
# bash reports/measurements/h200-2026-12-02-session8/run_c.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/cout && mkdir -p $R
sha256sum .whl/lead.tar .whl/moe_gemm_variants > "$R/c_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
V=$PWD/.whl/moe_gemm_variants
cd /tmp/new
M=reports/measurements/h200-2026-12-02-session8
SECONDS=0
for shape in Hy4-TP8-decode DSv3-decode Hy4-TP8-16tok; do
  GS_VARIANTS_SHAPE=$shape timeout 60 $V > "$R/c_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
done
for run in cold warm warm2 warm3; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/c_$run" > /tmp/c_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/c_cold.log /tmp/c_warm*.log > "$R/c_time_lines.txt"
for r in cold warm warm2 warm3; do cp /tmp/c_$r/times.csv "$R/c_${r}_times.csv"; done
cp /tmp/gs-cache-c/case_seconds.json "$R/c_case_seconds.json" 2>/dev/null
for i in 1 2 3; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/c_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
done
PYTHONPATH=/tmp/new timeout 60 python3 $M/bench_graph_gap.py mxfp8 DSv3-decode > "$R/c_graph_gap.txt" 2>&1
echo "graph_gap rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 $M/check_timeline.py --checks 200 > "$R/c_timeline.txt" 2>&1
echo "timeline rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"
cp $R/c_rc.txt $R/c_time_lines.txt $R/c_graph_gap.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|bandwidth / copy\|one pattern" $R/c_throughput*.txt > "$OUT/c_throughput_lines.txt"
grep -h "mxfp4\|ring\|op_launch\|d2d_copy\|FAIL\|all checks" $R/c_variants_*.txt > "$OUT/c_variants_lines.txt"
tar czf "$OUT/c_all.tgz" -C /tmp cout
