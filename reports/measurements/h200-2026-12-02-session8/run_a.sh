#!/usr/bin/env bash
# H200 call A (session 8), tree .whl/lead.tar (git archive HEAD): where a full check's time goes
# (check_timeline.py), harness_throughput.py twice, the moe_gemm eager call's host parts (issue 18).
# bash reports/measurements/h200-2026-12-02-session8/run_a.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
R=/tmp/aout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/a_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a
cd /tmp/new
M=reports/measurements/h200-2026-12-02-session8
SECONDS=0
PYTHONPATH=/tmp/new timeout 150 python3 $M/check_timeline.py --checks 200 > "$R/a_timeline.txt" 2>&1
echo "timeline rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
for i in 1 2; do
  PYTHONPATH=/tmp/new timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$R/a_throughput$i.txt" 2>&1
  echo "throughput$i rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
done
H=reports/measurements/h200-2026-12-02-session6-kernels/host_parts.py
for args in "mxfp8 16" "mxfp4 1" "bf16 1"; do
  echo "=== host_parts.py $args"; PYTHONPATH=/tmp/new timeout 40 python3 $H $args 2>&1 | tail -14
done > "$R/a_host_parts.txt"
echo "host_parts ${SECONDS}s" | tee -a "$R/a_rc.txt"
cp $R/* "$OUT/"
