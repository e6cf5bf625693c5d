#!/usr/bin/env bash
# One H200 call (device tool `run`, kind nvidia-h200-x2), from the repository root; $OUT comes back.
# moe_gemm GPU tests, the moe_gemm cases on the GPU backend (--jobs: one worker per GPU), and bench/moe_gemm.py's rows for the
# tensor-core formats (prefill and the 16-token ring for comparison) plus mxfp4's, each step under a timeout.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; git log -1 --format=%H 2>/dev/null; } >>"$log" 2>&1
echo "== build" >>"$log"
timeout 120 python3 -c 'import kernels.moe_gemm.ops as g; g.gpu_module(); g.cpu_module()' >>"$log" 2>&1
echo "== pytest -m gpu tests -k moe_gemm (rc below)" >>"$log"
timeout ${T_TEST:-100} python3 -m pytest -q -m gpu tests -k moe_gemm -p no:cacheprovider -n 0 ${PYTEST_X:-} >>"$log" 2>&1; echo "pytest rc=$?" >>"$log"
echo "== bench.moe_gemm" >>"$log"
timeout ${T_BENCH:-70} python3 -m bench.moe_gemm --out "$OUT/moe_gemm.csv" --fmt ${FMTS:-mxfp8 bf16 block_fp8} \
  --shapes ${SHAPES:-Hy4-TP8-16tok DSv3-prefill small-K-MoE} >>"$log" 2>&1; echo "bench rc=$?" >>"$log"
echo "== harness verify --backend gpu --case cases.moe_gemm" >>"$log"
timeout ${T_VERIFY:-80} python3 -m harness verify --backend gpu --case cases.moe_gemm --jobs ${JOBS:-1} --report-dir /tmp/verify \
  >"$OUT/verify_log.txt" 2>&1; echo "verify rc=$?" >>"$log"
tar -czf "$OUT/verify_report.tgz" -C /tmp verify 2>/dev/null
echo "== done" >>"$log"
