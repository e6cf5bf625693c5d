#!/usr/bin/env bash
# H200 call A (session 11), the working tree as sent: the variants at DSv3-prefill and small-K-MoE (the
# quantized-weight wgmma kernel for MXFP8, MXFP4 and block-FP8), the moe_gemm GPU tests, `python -m bench
# moe_gemm`, bench/harness_throughput.py. Each step's output goes to $OUT as it finishes.
# bash reports/measurements/h200-2026-12-02-session11/run_a.sh   (carry: .whl, the variants binary built here
# with the nvcc line in bench/moe_gemm_variants.cu's header)
set -u
V=$PWD/.whl/moe_gemm_variants
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
git rev-parse HEAD > "$OUT/a_tree.txt"; git status --short >> "$OUT/a_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 $V > "$OUT/a_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $OUT/a_variants_$shape.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 240 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -p no:cacheprovider > /tmp/a_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/a_gpu_tests.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error|assert" /tmp/a_gpu_tests.txt | head -60 > "$OUT/a_failures.txt"; tail -40 /tmp/a_gpu_tests.txt > "$OUT/a_gpu_tests_tail.txt"
PYTHONPATH=$PWD timeout 90 python3 -m bench moe_gemm --out-dir /tmp/a_bench > "$OUT/a_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 60 python3 bench/harness_throughput.py > "$OUT/a_throughput.txt" 2>&1
echo "throughput rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"
