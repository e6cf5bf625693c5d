#!/usr/bin/env bash
# H200 call C (nvidia-h200-x2, carry .whl): warm built-in suite on both GPUs, the one-worker/two-worker speed-up
# on the same cases, the real-world suite, the counterexample tables on the GPU.
# bash reports/measurements/h200-2026-12-01-session2/run_c.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
W=/tmp/wc; mkdir -p $W
SECONDS=0
# Builds first (not timed with the suite): the warm figures below start from a full cache.
timeout 120 python3 reports/measurements/h200-2026-12-01-session2/prebuild_all.py > $W/c_prebuild.log 2>&1; echo "prebuild rc=$? ${SECONDS}s" | tee $W/c_rc.txt
start=$SECONDS
timeout 280 python3 -m harness verify --backend gpu -k "not real_world" --report-dir $W/verify_warm > $W/c_verify_warm.log 2>&1; echo "verify warm (2 GPUs, all) rc=$? $((SECONDS - start))s" | tee -a $W/c_rc.txt
gpus=$(nvidia-smi -L | wc -l)
[ "$gpus" -ge 2 ] && for jobs in 1 2; do
  start=$SECONDS
  timeout 120 python3 -m harness verify --backend gpu -k "moe_gemm or moe_combine" --jobs $jobs --report-dir $W/speedup_j$jobs > $W/c_speedup_j$jobs.log 2>&1; echo "verify moe_gemm+moe_combine --jobs $jobs rc=$? $((SECONDS - start))s" | tee -a $W/c_rc.txt
done
python3 -c "import zipfile,glob; [zipfile.ZipFile(w).extractall('/tmp/rw') for w in glob.glob('.whl/real-world/*.whl')]"
start=$SECONDS
PYTHONPATH="$PWD:/tmp/rw" timeout 150 python3 -m harness verify --backend gpu --case cases.real_world --report-dir $W/real_world > $W/c_real_world.log 2>&1; echo "real world rc=$? $((SECONDS - start))s" | tee -a $W/c_rc.txt
cp $W/c_rc.txt "$OUT/"
tar czf "$OUT/c_logs.tgz" -C $W --ignore-failed-read c_prebuild.log c_verify_warm.log verify_warm c_speedup_j1.log c_speedup_j2.log speedup_j1 speedup_j2 c_real_world.log real_world
