#!/usr/bin/env bash
# H200 call D (session 8), tree .whl/lead.tar (git archive HEAD: spare workers, bench/moe_gemm.py's untimed
# warm-up run): graph_warmup.py; `python -m bench moe_gemm`; `make verify` cold and warm twice; harness_throughput.py
# twice.
# bash reports/measurements/h200-2026-12-02-session8/run_d.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/dout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/d_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
cd /tmp/new
M=reports/measurements/h200-2026-12-02-session8
SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 $M/graph_warmup.py mxfp8 DSv3-decode > "$R/d_graph_warmup.txt" 2>&1
echo "graph_warmup rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 240 python3 -m bench moe_gemm --out-dir $R/bench > "$R/d_bench.txt" 2>&1
echo "bench moe_gemm rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/d_$run" > /tmp/d_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/d_cold.log /tmp/d_warm*.log > "$R/d_time_lines.txt"
for r in cold warm warm2; do cp /tmp/d_$r/times.csv "$R/d_${r}_times.csv"; done
for i in 1 2; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/d_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
cp $R/d_rc.txt $R/d_time_lines.txt $R/d_graph_warmup.txt "$OUT/"
cp $R/bench/moe_gemm.csv "$OUT/d_moe_gemm.csv" 2>/dev/null
grep -h "harness.check\|compare, 4096\|bandwidth / copy\|one pattern" $R/d_throughput*.txt > "$OUT/d_throughput_lines.txt"
tar czf "$OUT/d_all.tgz" -C /tmp dout
