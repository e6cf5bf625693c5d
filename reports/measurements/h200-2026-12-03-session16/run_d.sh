#!/usr/bin/env bash
# H200 call D, the final code (0166e85): the one-launch MX form against the pair in the kernel sweep, every
# GPU-marked test, `make verify` cold, `python -m bench moe_gemm moe_combine` twice, compute-sanitizer memcheck
# over the form tests.
# bash reports/measurements/h200-2026-12-03-session16/run_d.sh   (carry: .whl)
set -u
mkdir -p /tmp/rw /tmp/d && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
git status --short > "$OUT/d_tree.txt"; git diff | sha256sum >> "$OUT/d_tree.txt"; git log -1 --format=%H >> "$OUT/d_tree.txt"
SECONDS=0
for fmt in mxfp8 mxfp4; do
  for run in small-K-MoE DSv3-prefill; do
    GS_VARIANTS_FMT=$fmt GS_VARIANTS_SHAPE=$run timeout 60 stdbuf -oL .whl/moe_gemm_variants >> "$OUT/d_variants.txt" 2>&1
    echo "variants $fmt $run rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
  done
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d PYTHONPATH=$PWD timeout 200 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/d/gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/d/gpu_tests.txt)" | tee -a "$OUT/d_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error" /tmp/d/gpu_tests.txt | head -60 > "$OUT/d_failures.txt"
PYTHONPATH=/tmp/rw GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d-verify timeout 120 make verify ARGS="--report-dir /tmp/d/verify_cold" > /tmp/d/verify_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s $(grep -h 'as expected' /tmp/d/verify_cold.log | tail -1)" | tee -a "$OUT/d_rc.txt"; SECONDS=0
grep -h "as expected\|graphsafe: time\|Overriding" /tmp/d/verify_cold.log > "$OUT/d_verify_lines.txt"
cp /tmp/d/verify_cold/results.csv "$OUT/d_verify_results.csv" 2>/dev/null
for round in 1 2; do
  GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d PYTHONPATH=$PWD timeout 120 python3 -m bench moe_gemm moe_combine \
    --out-dir /tmp/d/bench-$round > "$OUT/d_bench_$round.txt" 2>&1
  echo "bench $round rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d PYTHONPATH=$PWD timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or launches_per_call or (scales_x_rows and block_fp8)" > /tmp/d/memcheck.txt 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 /tmp/d/memcheck.txt)" | tee -a "$OUT/d_rc.txt"
grep -E "ERROR SUMMARY|Invalid|passed|failed" /tmp/d/memcheck.txt | head -20 > "$OUT/d_memcheck.txt"
