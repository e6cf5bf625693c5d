#!/usr/bin/env bash
# H200 call D (session 10), the tree .whl/lead.tar (git archive of d8a0097's successor 066c157): Nsight Compute
# on the warpgroup-MMA kernel's 256-column, 4-stage, 128-row form for bf16 and MXFP8 at DSv3-prefill
# (bench/moe_gemm_variants.cu built for sm_90a, carried as .whl/moe_gemm_variants, GS_VARIANTS_ONCE=1);
# `make verify` warm twice after a cold run; harness_throughput.py twice.
# bash reports/measurements/h200-2026-12-02-session10/run_d.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/dout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/d_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
SECONDS=0
GS_VARIANTS_SHAPE=DSv3-prefill GS_VARIANTS_ONCE=1 timeout 240 ncu --kernel-name-base demangled \
  --kernel-name "regex:wgmma_kernel<[01], 256, 4, 128" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis $V > "$R/d_ncu_wgmma.txt" 2>&1
echo "ncu rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
cd /tmp/new
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/d_$run" > /tmp/d_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/d_cold.log /tmp/d_warm.log /tmp/d_warm2.log > "$R/d_time_lines.txt"
for i in 1 2; do
  PYTHONPATH=/tmp/new timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/d_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
grep -h "harness.check\|compare, 4096\|bandwidth / copy\|one pattern" $R/d_throughput*.txt > "$R/d_throughput_lines.txt"
gzip $R/d_ncu_wgmma.txt
cp $R/* "$OUT/" 2>/dev/null
