#!/usr/bin/env bash
# Third (final) H200 call, kept short: the tree with the MXFP4 ring path, the CUDA-core kernel's folded
# zero-fill and the per-signature C++ plan (one pybind call of 10 arguments per eager call). Builds; the
# moe_gemm GPU tests and the moe_gemm cases on the GPU side by side (correctness only); then, alone on the
# GPU, bench/moe_combine.py and bench/moe_gemm.py at the decode shapes (host_us beside torch._grouped_mm's).
# The before side of host_us is run1's (commit e783218's kernels, same bench script).
set -uo pipefail
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$RANDOM
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1
PYTHONPATH=. python3 -P -c 'import kernels.moe_gemm.ops as g, kernels.moe_combine.ops as c; g.gpu_module(); c.gpu_module()' >>"$log" 2>&1
PYTHONPATH=. timeout 150 python3 -m harness verify --backend gpu -k moe_gemm --jobs 3 --report-dir /tmp/rv-$RANDOM \
  >"$OUT/verify.txt" 2>&1 &
PYTHONPATH=. timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider >"$OUT/pytest.txt" 2>&1
wait
echo "== bench" >>"$log"
PYTHONPATH=. timeout 30 python3 -P -m bench.moe_combine --out "$OUT/moe_combine.csv" --tokens 1 64 4096 --reps 100 >>"$log" 2>&1
PYTHONPATH=. timeout 90 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm.csv" --fmt mxfp4 mxfp8 \
  --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode >>"$log" 2>&1
PYTHONPATH=. timeout 20 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm_bf16.csv" --fmt bf16 --shapes Hy4-TP8-decode >>"$log" 2>&1
echo "== done" >>"$log"
