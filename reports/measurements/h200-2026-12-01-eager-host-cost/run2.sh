#!/usr/bin/env bash
# Second H200 call (run from the repository root; $OUT comes back). Before/after host time per eager call:
# the bench scripts of this tree over the kernels of commit 3891999 (copied by the caller with
# `git archive 3891999 kernels | tar -x -C .hostcost_before`) and over this tree's kernels, in one run.
# `python3 -P` keeps the working directory off sys.path, so PYTHONPATH's .hostcost_before comes first (run1.sh
# lacked it and imported this tree twice). Also the two families' GPU tests and the e2m1 decode's mxfp4 rows.
set -uo pipefail
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs_cache
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1
build='import kernels.moe_gemm.ops as g, kernels.moe_combine.ops as c; print(g.__file__); g.gpu_module(); c.gpu_module()'
PYTHONPATH=. python3 -P -c "$build" >>"$log" 2>&1 &
PYTHONPATH=.hostcost_before:. python3 -P -c "$build" >>"$log" 2>&1 &
wait
echo "== pytest -m gpu" >>"$log"
PYTHONPATH=. timeout 100 python3 -m pytest tests/test_moe_gemm_ops.py tests/test_moe_combine_ops.py -m gpu -n 0 -q \
  -p no:cacheprovider >>"$log" 2>&1
for side in before after; do
  if [ $side = before ]; then pp=.hostcost_before:.; sfx=_before; else pp=.; sfx=; fi
  echo "== $side: PYTHONPATH=$pp python3 -P -m bench.moe_combine / bench.moe_gemm" >>"$log"
  PYTHONPATH=$pp timeout 40 python3 -P -m bench.moe_combine --out "$OUT/moe_combine$sfx.csv" --tokens 1 64 4096 \
    --reps 100 >>"$log" 2>&1
  shapes="Hy4-TP8-decode Hy4-TP8-16tok"; fmts="mxfp8 bf16"
  [ $side = after ] && { shapes="$shapes DSv3-decode"; fmts="$fmts mxfp4"; }
  PYTHONPATH=$pp timeout 60 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm$sfx.csv" --fmt $fmts --shapes $shapes \
    >>"$log" 2>&1
done
echo "== done" >>"$log"
