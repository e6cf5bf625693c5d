#!/usr/bin/env bash
# The end-of-session H200 run, one device call (`bash reports/measurements/h200-2026-12-01-final/run.sh`,
# carry .whl): the built-in suite from a cold build cache, the real-world suite with its pinned libraries, every
# counterexample's tables, the harness throughput bench and the GPU-marked tests. Each step has its own time
# limit so one slow step cannot take the others' output with it; each step's output lands in $OUT at once.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache
W=/tmp/w; mkdir -p "$W"
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc seconds=$(( $(date +%s) - t0 ))" | tee -a "$OUT/rc.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/rc.txt" 2>&1
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])' >> "$OUT/rc.txt"

step verify_cold 270 python3 -m harness verify --backend gpu -k "not real_world" --report-dir "$W/verify"
tar czf "$OUT/verify.tgz" -C "$W" verify verify_cold.log 2>/dev/null

python3 -c "import zipfile,glob; [zipfile.ZipFile(w).extractall('/tmp/rw') for w in glob.glob('.whl/real-world/*.whl')]"
step real_world 100 env PYTHONPATH="$PWD:/tmp/rw" python3 -m harness verify --backend gpu --case cases.real_world --report-dir "$W/rw"
tar czf "$OUT/real_world.tgz" -C "$W" rw real_world.log 2>/dev/null

mkdir -p "$W/cx"
for m in $(python3 -c "from harness.reproduce import counterexample_names; print(' '.join(counterexample_names()))"); do
  timeout 40 python3 -m harness repro "$m" --backend gpu --markdown > "$W/cx/$m.md" 2> "$W/cx/$m.err"
  echo "$m rc=$?" >> "$W/cx/rc.txt"
done
cat "$W/cx/rc.txt" >> "$OUT/rc.txt"
tar czf "$OUT/counterexamples.tgz" -C "$W" cx

step throughput 40 python3 bench/harness_throughput.py --backend gpu --out "$W/harness_throughput.csv"
cp "$W/throughput.log" "$OUT/throughput.log"
step gpu_tests 110 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 tests
cp "$W/gpu_tests.log" "$OUT/gpu_tests.log"
