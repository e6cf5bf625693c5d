#!/usr/bin/env bash
# H200 call C (session 11), the working tree as sent (kWqAuto: one launch in which each CTA picks its MX form; the
# launcher still runs the fast / rest pair): the variants at DSv3-prefill and small-K-MoE, the plain-sm_90 child
# test (the mma.sync tile kernels), bench/harness_throughput.py x2. Each step's output goes to $OUT as it finishes.
# bash reports/measurements/h200-2026-12-02-session11/run_c.sh   (carry: .whl, the variants binary built here)
set -u
V=$PWD/.whl/moe_gemm_variants
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
git rev-parse HEAD > "$OUT/c_tree.txt"; git status --short >> "$OUT/c_tree.txt"; git diff | sha256sum >> "$OUT/c_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 $V > "$OUT/c_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $OUT/c_variants_$shape.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 300 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -q -p no:cacheprovider -k plain_sm90 > "$OUT/c_sm90_child.txt" 2>&1
echo "sm_90 child test rc=$? ${SECONDS}s $(tail -1 $OUT/c_sm90_child.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
for i in 1 2; do
  PYTHONPATH=$PWD timeout 60 python3 bench/harness_throughput.py > "$OUT/c_throughput$i.txt" 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
done
