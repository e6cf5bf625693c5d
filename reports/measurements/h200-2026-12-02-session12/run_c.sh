#!/usr/bin/env bash
# H200 call C (session 12), the working tree as sent (recorded in c_tree.txt): the quantized warpgroup-MMA
# prefill kernel's ping-pong schedule (kWqPingPong) against its lockstep form in bench/moe_gemm_variants.cu at
# DSv3-prefill and small-K-MoE, the moe_gemm GPU tests on the ping-pong kernel, compute-sanitizer memcheck over
# the quantized prefill tests, `python -m bench moe_gemm`. The variants binary is built here with the nvcc line
# in its header and carried in .whl.
# bash reports/measurements/h200-2026-12-02-session12/run_c.sh   (carry: .whl)
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c
git rev-parse HEAD > "$OUT/c_tree.txt"; git status --short >> "$OUT/c_tree.txt"; git diff | sha256sum >> "$OUT/c_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 .whl/moe_gemm_variants > "$OUT/c_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $OUT/c_variants_$shape.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -p no:cacheprovider > /tmp/c_gemm_tests.txt 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/c_gemm_tests.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
{ grep -E "FAILED|ERROR" /tmp/c_gemm_tests.txt | head -30; tail -3 /tmp/c_gemm_tests.txt; } > "$OUT/c_gemm_tests.txt"
PYTHONPATH=$PWD timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or block_scale or e8m0_0_and_255 or scales_x_rows or exact_at_its_bounds or (accuracy_and_determinism and (64 or 128))" > "$OUT/c_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $OUT/c_memcheck.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 80 python3 -m bench moe_gemm --out-dir /tmp/c_bench > "$OUT/c_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
