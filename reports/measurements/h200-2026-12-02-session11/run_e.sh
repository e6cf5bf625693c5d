#!/usr/bin/env bash
# H200 call E (session 11), the final tree (the working tree as sent, recorded in e_tree.txt): the variants at
# DSv3-prefill and small-K-MoE (with the SPLIT rows: a stage's chunk 1 converted while chunk 0's MMAs run), every
# GPU-marked test of tests/, compute-sanitizer memcheck over the quantized prefill tests, `python -m bench
# moe_gemm moe_combine`, `make verify` cold then warm, bench/harness_throughput.py x2. Each step's output goes to
# $OUT as it finishes.
# bash reports/measurements/h200-2026-12-02-session11/run_e.sh   (carry: .whl, with .whl/real-world's wheels)
set -u
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
git rev-parse HEAD > "$OUT/e_tree.txt"; git status --short >> "$OUT/e_tree.txt"; git diff | sha256sum >> "$OUT/e_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 .whl/moe_gemm_variants > "$OUT/e_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $OUT/e_variants_$shape.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/e_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/e_gpu_tests.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR" /tmp/e_gpu_tests.txt | head -40 > "$OUT/e_failures.txt"; tail -30 /tmp/e_gpu_tests.txt > "$OUT/e_gpu_tests_tail.txt"
PYTHONPATH=$PWD timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or block_scale or e8m0_0_and_255 or scales_x_rows or exact_at_its_bounds or bf16_prefill or (accuracy_and_determinism and (64 or 128))" > "$OUT/e_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $OUT/e_memcheck.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 80 python3 -m bench moe_gemm moe_combine --out-dir /tmp/e_bench > "$OUT/e_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e-verify
for run in cold warm; do
  PYTHONPATH=/tmp/rw timeout 110 make verify ARGS="--report-dir /tmp/e_$run" > /tmp/e_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
  grep -h "graphsafe: time\|as expected\|FAIL" /tmp/e_$run.log >> "$OUT/e_time_lines.txt"; tail -15 /tmp/e_$run.log > "$OUT/e_${run}_tail.txt"
done
for i in 1 2; do
  PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py > "$OUT/e_throughput$i.txt" 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
done
