#!/usr/bin/env bash
# First H200 call of the MXFP4 ring work (run from the repository root; $OUT comes back). The caller copies
# the kernels of the tree before (commit e783218) with `git archive e783218 kernels | tar -x -C .mx4_before`
# and carries that folder. `python3 -P` keeps the working directory off sys.path so PYTHONPATH decides which
# kernels/ is imported. Steps: the two GPU builds and the variants sweep in parallel; moe_gemm GPU tests; the
# variants sweep at the two Hy4 decode shapes; bench/moe_gemm.py before/after at the decode shapes.
set -uo pipefail
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$RANDOM
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1
build='import kernels.moe_gemm.ops as g; print(g.__file__); g.gpu_module()'
PYTHONPATH=. python3 -P -c "$build" >>"$log" 2>&1 &
PYTHONPATH=.mx4_before:. python3 -P -c "$build" >>"$log" 2>&1 &
nvcc -x cu -O2 -std=c++17 -arch=sm_90 --fmad=false -I kernels/common -I kernels/moe_gemm -DGS_MOE_GEMM_MATH_ONLY \
  bench/moe_gemm_variants.cu -o /tmp/mgv >"$OUT/variants_build.txt" 2>&1 &
wait
echo "== pytest -m gpu tests/test_moe_gemm_ops.py" >>"$log"
PYTHONPATH=. timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider >>"$log" 2>&1
echo "== variants" >>"$log"
for s in Hy4-TP8-decode Hy4-TP8-16tok; do GS_VARIANTS_SHAPE=$s timeout 60 /tmp/mgv >>"$OUT/variants.txt" 2>&1; done
for side in before after; do
  if [ $side = before ]; then pp=.mx4_before:.; sfx=_before; else pp=.; sfx=; fi
  echo "== $side: PYTHONPATH=$pp python3 -P -m bench.moe_gemm" >>"$log"
  shapes="Hy4-TP8-decode DSv3-decode"
  [ $side = after ] && shapes="$shapes Hy4-TP8-16tok DSv3-prefill"
  PYTHONPATH=$pp timeout 90 python3 -P -m bench.moe_gemm --out "$OUT/moe_gemm$sfx.csv" --fmt mxfp4 mxfp8 --shapes $shapes \
    >>"$log" 2>&1
done
echo "== done" >>"$log"
