#!/bin/bash
# Call 3 of reports/measurements/h200-2026-12-01-session4-kernels (device tool `run`, repository root): the
# final tree's builds, the moe_gemm GPU tests and bench/moe_gemm.py at the decode shapes (the share of device
# time left allowed no variants sweep, prefill rows or harness cases in this call).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gscache
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/tree.txt"
timeout ${T_TEST:-110} python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider 2>&1 | tail -25 | tee "$OUT/tests.txt"
timeout ${T_BENCH:-90} python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 bf16 \
    --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode --out "$OUT/moe_gemm.csv" 2>&1 | tee "$OUT/bench.txt"
echo done
