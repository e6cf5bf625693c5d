#!/bin/bash
# The H200 call prepared for reports/measurements/h200-2026-12-02-session6-kernels, NOT RUN this session (the
# device budget left to this work was gone before the first call: README). Run it through the device tool `run`
# from an extracted `git archive` of the commit to measure (session 5: tests + bench + verify took 77 s). In order of
# need, each step under its own timeout: the moe_gemm GPU tests, bench/moe_gemm.py at every shape and the four
# tensor-core formats (host_us included), every moe_gemm case on the GPU backend, the kernel variants at the
# decode shapes (MXFP4 ring XS 0/1/2 and its tilings; MXFP8 1- and 16-row rings with and without swapped
# operands), the MXFP8 decode graph-vs-eager diagnosis and the host cost per part of one eager call.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gscache
OUT=${OUT:-/tmp/out}
P=${P:-run1}
M=reports/measurements/h200-2026-12-02-session6-kernels
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; date -u; } > "$OUT/${P}_tree.txt"
# The variants binary builds while the tests run (its own nvcc process).
( nvcc -x cu -O2 -std=c++17 -arch=sm_90 --fmad=false -I kernels/common -I kernels/moe_gemm -DGS_MOE_GEMM_MATH_ONLY \
    bench/moe_gemm_variants.cu -o /tmp/moe_gemm_variants > /tmp/variants_build.txt 2>&1 ) &
VB=$!
timeout ${T_TEST:-50} python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider 2>&1 | tail -40 > "$OUT/${P}_tests.txt"
echo "tests done $(date -u)" >> "$OUT/${P}_tree.txt"
timeout ${T_BENCH:-60} python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 bf16 block_fp8 \
    --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode DSv3-prefill small-K-MoE --out "$OUT/${P}_moe_gemm.csv" > "$OUT/${P}_bench.txt" 2>&1
echo "bench done $(date -u)" >> "$OUT/${P}_tree.txt"
timeout ${T_VERIFY:-45} python3 -m harness verify --backend gpu -k "moe_gemm" 2>&1 | tail -75 > "$OUT/${P}_verify.txt"
echo "verify done $(date -u)" >> "$OUT/${P}_tree.txt"
wait $VB
{
  cat /tmp/variants_build.txt
  for shape in Hy4-TP8-decode DSv3-decode Hy4-TP8-16tok; do
    echo "=== GS_VARIANTS_SHAPE=$shape"
    GS_VARIANTS_SHAPE=$shape timeout 15 /tmp/moe_gemm_variants 2>&1
  done
} > "$OUT/${P}_variants.txt" 2>&1
echo "variants done $(date -u)" >> "$OUT/${P}_tree.txt"
{
  echo "=== graph_vs_eager.py mxfp8 DSv3-decode"
  timeout 25 python3 $M/graph_vs_eager.py mxfp8 DSv3-decode 2>&1 | tail -12
  for args in "mxfp8 16" "mxfp4 1" "bf16 1"; do
    echo "=== host_parts.py $args"
    timeout 15 python3 $M/host_parts.py $args 2>&1 | tail -14
  done
} > "$OUT/${P}_diag.txt" 2>&1
echo "done $(date -u)" >> "$OUT/${P}_tree.txt"
