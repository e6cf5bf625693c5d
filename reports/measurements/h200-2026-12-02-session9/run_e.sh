#!/usr/bin/env bash
# H200 call E (session 9), the final tree .whl/lead.tar: the moe_gemm GPU tests (MXFP4's and MXFP8's 8-warp
# rings); `python -m bench moe_gemm moe_combine` (moe_gemm with the capture-first, alternating-trial timing);
# `make verify` cold and warm twice; harness_throughput.py three times.
# bash reports/measurements/h200-2026-12-02-session9/run_e.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/eout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/e_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 4 -q -p no:cacheprovider > "$R/e_gemm_tests.txt" 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 $R/e_gemm_tests.txt)" | tee -a "$R/e_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 240 python3 -m bench moe_gemm moe_combine --out-dir $R/bench > "$R/e_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/e_$run" > /tmp/e_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/e_cold.log /tmp/e_warm.log /tmp/e_warm2.log > "$R/e_time_lines.txt"
for r in cold warm warm2; do cp /tmp/e_$r/times.csv "$R/e_${r}_times.csv"; cp /tmp/e_$r.log "$R/e_$r.log"; done
for i in 1 2 3; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/e_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
done
cp $R/e_rc.txt $R/e_time_lines.txt $R/e_bench.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|bandwidth / copy\|one pattern" $R/e_throughput*.txt > "$OUT/e_throughput_lines.txt"
tar czf "$OUT/e_all.tgz" -C /tmp eout
