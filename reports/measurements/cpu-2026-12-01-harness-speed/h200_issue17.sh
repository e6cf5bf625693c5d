#!/usr/bin/env bash
# Issue 17 figures on the H200, for reports/measurements/h200-<date>-harness-speed/. Run from the repository root
# on the device machine; everything lands in $OUT. One stage per call keeps each under the 10-minute limit:
#   bash reports/measurements/cpu-2026-12-01-harness-speed/h200_issue17.sh bench     # ~2 min
#   bash reports/measurements/cpu-2026-12-01-harness-speed/h200_issue17.sh builds    # ~4 min
#   bash reports/measurements/cpu-2026-12-01-harness-speed/h200_issue17.sh verify    # cold + warm make verify, ~6 min
#   bash reports/measurements/cpu-2026-12-01-harness-speed/h200_issue17.sh search    # shape-search tests on the GPU
set -u
OUT=${OUT:?set OUT to the folder the device machine returns}
stage=${1:-bench}
PY=${PYTHON:-python}
export PYTHONPATH=.
{ git log -1 --format='commit %H %s'; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv;
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; nproc; } > "$OUT/env_$stage.txt" 2>&1

case "$stage" in
bench)
  # Targets: check <= 5 ms (>= 200 checks/s), compare of 4096 floats <= 0.1 ms, 64 MiB compare >= 0.5 of copy bandwidth.
  $PY bench/harness_throughput.py --backend gpu --repeats 50 --out "$OUT/harness_throughput_gpu.csv" > "$OUT/harness_throughput_gpu.txt" 2>&1
  # Where a check's time goes (the ~16 ms outside the patterns): cProfile of the same bench.
  $PY -m cProfile -o "$OUT/check.prof" bench/harness_throughput.py --backend gpu --repeats 20 > /dev/null 2>&1
  $PY -c "import pstats; s = pstats.Stats('$OUT/check.prof'); s.sort_stats('cumulative').print_stats(45); s.sort_stats('tottime').print_stats(30)" > "$OUT/check_profile.txt" 2>&1
  ;;
builds)
  # Cold build per family into empty caches, sequential, then all at once in a thread pool.
  $PY bench/build_times.py --backends cpu,cuda --arch sm_90 --variants --parallel > "$OUT/build_times.txt" 2>&1
  ;;
verify)
  # Cold: empty build cache and empty shape-search database; warm: the same run again.
  export GRAPHSAFE_CACHE_DIR=$(mktemp -d /tmp/gs-cache-XXXX) GRAPHSAFE_SEARCH_DB=$(mktemp -d /tmp/gs-search-XXXX)
  SECONDS=0; make verify ARGS="--report-dir $OUT/verify_cold" > "$OUT/verify_cold.log" 2>&1; rc=$?
  echo "cold make verify: rc=$rc ${SECONDS} s" | tee "$OUT/verify_times.txt"
  SECONDS=0; make verify ARGS="--report-dir $OUT/verify_warm" > "$OUT/verify_warm.log" 2>&1; rc=$?
  echo "warm make verify: rc=$rc ${SECONDS} s" | tee -a "$OUT/verify_times.txt"
  cp "$GRAPHSAFE_CACHE_DIR/build_seconds.json" "$OUT/" 2>/dev/null
  ;;
search)
  # The shape-search controls and twins on the gpu backend (gpu-marked tests), then through the CLI.
  $PY -m pytest tests/test_search.py -q -p no:cacheprovider -n 0 -k gpu -rs > "$OUT/test_search_gpu.txt" 2>&1
  GRAPHSAFE_SEARCH_DB=$(mktemp -d) $PY -m harness verify --backend gpu --case cases/shape_search_controls.py \
    --report-dir "$OUT/controls_gpu" > "$OUT/controls_gpu.log" 2>&1
  # One worker per GPU: with one H200 this only checks that --jobs runs; the two-GPU speed-up needs nvidia-h200-x2.
  $PY -m harness verify --backend gpu --jobs 1 -k moe_combine --report-dir "$OUT/jobs1" > "$OUT/jobs1.log" 2>&1
  ;;
*) echo "unknown stage $stage (bench | builds | verify | search)"; exit 2 ;;
esac
ls -la "$OUT"
