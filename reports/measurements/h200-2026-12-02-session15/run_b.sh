#!/usr/bin/env bash
# H200 call B: MXFP8 prefill's converting kernel (gs_moe_gemm_wgmma_cv_kernel: a warpgroup converts the weights
# into shared memory, two multiply from shared memory) and its pair with the q-kernel's rest form, against the
# q-kernel pair it replaces at block_m 128: the kernel sweep (bench/moe_gemm_variants.cu built off the device,
# carried as .whl/moe_gemm_variants), the moe_gemm GPU tests, `bench/moe_gemm.py --fmt mxfp8` on this tree and
# on 7b3d074 (.whl/before.tar) in turn, twice, compute-sanitizer memcheck / synccheck over the MXFP8 prefill
# tests.   bash reports/measurements/h200-2026-12-02-session15/run_b.sh   (carry: .whl/before.tar,
# .whl/moe_gemm_variants)
set -u
mkdir -p /tmp/b /tmp/before && tar -xf .whl/before.tar -C /tmp/before
export PYTHONUNBUFFERED=1
git status --short > "$OUT/b_tree.txt"; git diff | sha256sum >> "$OUT/b_tree.txt"
SECONDS=0
for run in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_FMT=mxfp8 GS_VARIANTS_SHAPE=$run timeout 45 stdbuf -oL .whl/moe_gemm_variants >> "$OUT/b_variants.txt" 2>&1
  echo "variants $run rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py \
  -m gpu -n 4  -q -p no:cacheprovider > /tmp/b/gpu_tests.txt 2>&1
echo "moe_gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/b/gpu_tests.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR|Error|assert" /tmp/b/gpu_tests.txt | head -80 > "$OUT/b_failures.txt"
for round in 1; do
  for tree in after before; do
    dir=$PWD; [ $tree = before ] && dir=/tmp/before
    (cd "$dir" && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$tree PYTHONPATH=$dir timeout 60 python3 bench/moe_gemm.py \
      --fmt mxfp8 --shapes DSv3-prefill small-K-MoE --out /tmp/b/bench_${tree}_$round.csv) > /tmp/b/bench_${tree}_$round.txt 2>&1
    echo "bench $tree $round rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
  done
done
for f in /tmp/b/bench_*.txt; do echo "== $(basename $f)"; cat "$f"; done > "$OUT/b_bench.txt"
for tool in memcheck synccheck; do
  GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-after PYTHONPATH=$PWD timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
    -k "(accuracy_and_determinism and mxfp8 and (128 or 256)) or (fast_and_exact and mxfp8 and 128)" > /tmp/b/$tool.txt 2>&1
  echo "$tool rc=$? ${SECONDS}s $(tail -1 /tmp/b/$tool.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
  grep -E "ERROR SUMMARY|Invalid|Race|race|Barrier|passed|failed|hazard" /tmp/b/$tool.txt | head -30 > "$OUT/b_$tool.txt"
done
