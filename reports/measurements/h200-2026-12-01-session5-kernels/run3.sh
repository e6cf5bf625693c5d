#!/bin/bash
# Call 3 of reports/measurements/h200-2026-12-01-session5-kernels (device tool `run`, repository root).
# The final tree (bf16 128-row tiles with 2-chunk stages): the moe_gemm GPU tests, bench/moe_gemm.py at every
# shape and the four tensor-core formats (the issue-18 table), and every moe_gemm case on the GPU backend.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gscache
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/tree.txt"
timeout ${T_TEST:-150} python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider 2>&1 | tail -40 | tee "$OUT/tests.txt"
timeout ${T_BENCH:-200} python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 bf16 block_fp8 \
    --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode DSv3-prefill small-K-MoE --out "$OUT/moe_gemm.csv" 2>&1 | tee "$OUT/bench.txt"
timeout ${T_VERIFY:-90} python3 -m harness verify --backend gpu -k "moe_gemm" 2>&1 | tail -100 | tee "$OUT/verify.txt"
echo done
