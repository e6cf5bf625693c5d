#!/usr/bin/env bash
# H200 call A (session 9), tree .whl/lead.tar (git archive HEAD): the moe_gemm GPU tests with MXFP8's 8-warp
# ring; bench/moe_gemm_variants.cu (built here with its header's nvcc line, carried as .whl/moe_gemm_variants)
# at Hy4-TP8-16tok, small-K-MoE and rare-path-16tok; the MXFP8 / block_fp8 16-token and small-K rows of
# bench/moe_gemm.py; host_parts.py for MXFP4 and MXFP8; `make verify` cold and warm twice; harness_throughput.py
# twice.
# bash reports/measurements/h200-2026-12-02-session9/run_a.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
V=$PWD/.whl/moe_gemm_variants
R=/tmp/aout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/a_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
cd /tmp/new
K=reports/measurements/h200-2026-12-02-session6-kernels
SECONDS=0
PYTHONPATH=/tmp/new timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 4 -q -p no:cacheprovider > "$R/a_gemm_tests.txt" 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 $R/a_gemm_tests.txt)" | tee -a "$R/a_rc.txt"; SECONDS=0
for shape in Hy4-TP8-16tok small-K-MoE rare-path-16tok; do
  GS_VARIANTS_SHAPE=$shape timeout 60 $V > "$R/a_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $R/a_variants_$shape.txt)" | tee -a "$R/a_rc.txt"; SECONDS=0
done
PYTHONPATH=/tmp/new timeout 90 python3 bench/moe_gemm.py --fmt mxfp8 block_fp8 bf16 --shapes Hy4-TP8-16tok small-K-MoE --out $R/a_rows.csv > "$R/a_rows.txt" 2>&1
echo "bench rows rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
for arg in "mxfp4 1" "mxfp4 16" "mxfp8 16" "mxfp8 1"; do
  PYTHONPATH=/tmp/new timeout 30 python3 $K/host_parts.py $arg >> "$R/a_host_parts.txt" 2>&1
done
echo "host_parts rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/a_$run" > /tmp/a_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/a_cold.log /tmp/a_warm.log /tmp/a_warm2.log > "$R/a_time_lines.txt"
for r in cold warm warm2; do cp /tmp/a_$r/times.csv "$R/a_${r}_times.csv"; cp /tmp/a_$r.log "$R/a_$r.log"; done
for i in 1 2; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/a_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
done
cp $R/a_rc.txt $R/a_time_lines.txt $R/a_rows.txt $R/a_host_parts.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|bandwidth / copy\|one pattern" $R/a_throughput*.txt > "$OUT/a_throughput_lines.txt"
tar czf "$OUT/a_all.tgz" -C /tmp aout
