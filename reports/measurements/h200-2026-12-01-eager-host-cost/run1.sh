#!/usr/bin/env bash
# The one H200 call behind this folder (run from the repository root; $OUT comes back). It builds both
# families' CUDA modules for this tree and for the kernels of the commit before the host-cost change (copied
# by the caller into .hostcost_before/kernels with `git archive <commit> kernels | tar -x -C .hostcost_before`),
# runs the two families' GPU tests, then the benchmarks with the host-time columns: a few rows of this
# tree's bench scripts over the earlier kernels, then this tree's full `python -m bench moe_combine moe_gemm`.
set -uo pipefail
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs_cache
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1
build='from kernels.moe_gemm import ops as g; from kernels.moe_combine import ops as c; g.gpu_module(); c.gpu_module()'
PYTHONPATH=. python3 -c "$build" >>"$log" 2>&1 &
PYTHONPATH=.hostcost_before:. python3 -c "$build" >"$OUT/build_before.txt" 2>&1 &
wait
echo "== pytest -m gpu" >>"$log"
PYTHONPATH=. timeout 110 python3 -m pytest tests/test_moe_gemm_ops.py tests/test_moe_combine_ops.py -m gpu -n 0 -q \
  -p no:cacheprovider >>"$log" 2>&1
echo "== before (.hostcost_before/kernels)" >>"$log"
PYTHONPATH=.hostcost_before:. timeout 30 python3 -m bench.moe_combine --out "$OUT/moe_combine_before.csv" \
  --tokens 1 64 4096 >>"$log" 2>&1
PYTHONPATH=.hostcost_before:. timeout 45 python3 -m bench.moe_gemm --out "$OUT/moe_gemm_before.csv" \
  --fmt mxfp8 bf16 --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-prefill >>"$log" 2>&1
echo "== after: python -m bench moe_combine moe_gemm" >>"$log"
PYTHONPATH=. timeout 150 python3 -m bench moe_combine moe_gemm --out-dir "$OUT" >>"$log" 2>&1
cat "$OUT/build_before.txt" >>"$log"; rm -f "$OUT/build_before.txt"
echo "== done" >>"$log"
