#!/usr/bin/env bash
# H200 call D (session 9), tree .whl/lead.tar: bench/moe_gemm_variants.cu (with 8-warp MXFP4 rings; built here
# with its header's nvcc line, carried as .whl/moe_gemm_variants) at the three decode shapes; the MXFP8 and
# MXFP4 decode rows of bench/moe_gemm.py with the capture-first, alternating-trial timing.
# bash reports/measurements/h200-2026-12-02-session9/run_d.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
V=$PWD/.whl/moe_gemm_variants
R=/tmp/dout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/d_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d
cd /tmp/new
SECONDS=0
for shape in Hy4-TP8-decode DSv3-decode Hy4-TP8-16tok; do
  GS_VARIANTS_SHAPE=$shape timeout 60 $V > "$R/d_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $R/d_variants_$shape.txt)" | tee -a "$R/d_rc.txt"; SECONDS=0
done
PYTHONPATH=/tmp/new timeout 150 python3 bench/moe_gemm.py --fmt mxfp8 mxfp4 --shapes Hy4-TP8-decode DSv3-decode Hy4-TP8-16tok --out $R/d_rows.csv > "$R/d_rows.txt" 2>&1
echo "bench rows rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"
cp $R/d_rc.txt $R/d_rows.txt "$OUT/"
tar czf "$OUT/d_all.tgz" -C /tmp dout
