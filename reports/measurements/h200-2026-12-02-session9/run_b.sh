#!/usr/bin/env bash
# H200 call B (session 9), tree .whl/lead.tar: graph_clock.py (MXFP8 DSv3-decode and Hy4-TP8-16tok) beside an
# nvidia-smi log of the SM clock, power, temperature and clock-event reasons every 50 ms; then Nsight Compute on
# the prefill kernel's launches in bench/moe_gemm_variants.cu at DSv3-prefill (one launch per variant).
# bash reports/measurements/h200-2026-12-02-session9/run_b.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
V=$PWD/.whl/moe_gemm_variants
R=/tmp/bout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/b_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b
cd /tmp/new
M=reports/measurements/h200-2026-12-02-session9
SECONDS=0
PYTHONPATH=/tmp/new python3 -c "from kernels.moe_gemm import ops; ops.gpu_module()"  # build before sampling
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 50 > "$R/b_smi.csv" 2>&1 &
SMI=$!
sleep 1
for shape in DSv3-decode Hy4-TP8-16tok; do
  echo "clock epoch at start: $(date +%s.%N)" >> "$R/b_graph_clock.txt"
  PYTHONPATH=/tmp/new timeout 90 python3 $M/graph_clock.py mxfp8 $shape >> "$R/b_graph_clock.txt" 2>&1
  echo "graph_clock $shape rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
done
kill $SMI
GS_VARIANTS_SHAPE=DSv3-prefill GS_VARIANTS_ONCE=1 timeout 300 ncu --kernel-name regex:gs_moe_gemm_prefill_kernel \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis $V > "$R/b_ncu_prefill.txt" 2>&1
echo "ncu rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"
cp $R/b_rc.txt $R/b_graph_clock.txt "$OUT/"
tar czf "$OUT/b_all.tgz" -C /tmp bout
