#!/usr/bin/env bash
# H200 call G (session 11), the working tree as sent (e2m1 forms both chunks' multipliers first, e4m3 each
# chunk's before its conversion): the variants at DSv3-prefill and small-K-MoE, the moe_gemm GPU tests. Outputs
# in one archive (a call brings back at most 8 files: call E lost 5).
# bash reports/measurements/h200-2026-12-02-session11/run_g.sh   (carry: .whl, the variants binary built here)
set -u
R=/tmp/g && mkdir -p $R
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-g
git rev-parse HEAD > "$R/g_tree.txt"; git status --short >> "$R/g_tree.txt"; git diff | sha256sum >> "$R/g_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 .whl/moe_gemm_variants > "$R/g_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -n 1 $R/g_variants_$shape.txt)" | tee -a "$R/g_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -p no:cacheprovider > "$R/g_gemm_tests.txt" 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -n 1 $R/g_gemm_tests.txt)" | tee -a "$R/g_rc.txt"
tar czf "$OUT/g.tar.gz" -C $R .
