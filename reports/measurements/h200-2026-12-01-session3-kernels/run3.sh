#!/usr/bin/env bash
# Third (final) H200 call: the tree with the MXFP4 ring path, the CUDA-core kernel's folded zero-fill and the
# per-signature C++ plan (one pybind call of 10 arguments per eager call). The caller copies the kernels of
# commit e783218 (before this session's changes) into .mx4_before and carries it; `python3 -P` keeps the
# working directory off sys.path so PYTHONPATH decides which kernels/ is imported. Steps: builds; moe_gemm
# GPU tests; bench/moe_combine.py and bench/moe_gemm.py (this tree), bench/moe_gemm.py on the before kernels
# for the host-time rows; the moe_gemm cases on the GPU (summary table into the log).
set -uo pipefail
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$RANDOM
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1
build='import kernels.moe_gemm.ops as g, kernels.moe_combine.ops as c; print(g.__file__); g.gpu_module(); c.gpu_module()'
PYTHONPATH=. python3 -P -c "$build" >>"$log" 2>&1 &
PYTHONPATH=.mx4_before:. python3 -P -c "$build" >>"$log" 2>&1 &
wait
echo "== pytest -m gpu tests/test_moe_gemm_ops.py" >>"$log"
PYTHONPATH=. timeout 120 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider >>"$log" 2>&1
echo "== bench (after, then before)" >>"$log"
PYTHONPATH=. timeout 40 python3 -P -m bench.moe_combine --out "$OUT/moe_combine.csv" --tokens 1 64 4096 --reps 100 >>"$log" 2>&1
PYTHONPATH=. timeout 120 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm.csv" --fmt mxfp4 mxfp8 bf16 \
  --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode >>"$log" 2>&1
PYTHONPATH=. timeout 60 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm_mxfp4_large.csv" --fmt mxfp4 \
  --shapes DSv3-prefill small-K-MoE >>"$log" 2>&1
PYTHONPATH=.mx4_before:. timeout 60 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm_before.csv" --fmt mxfp4 mxfp8 bf16 \
  --shapes Hy4-TP8-decode >>"$log" 2>&1
echo "== verify --backend gpu -k moe_gemm" >>"$log"
PYTHONPATH=. timeout 200 python3 -m harness verify --backend gpu -k moe_gemm --jobs 4 --report-dir /tmp/rv-$RANDOM \
  >"$OUT/verify.txt" 2>&1
echo "verify rc $?" >>"$log"
echo "== done" >>"$log"
