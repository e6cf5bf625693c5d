#!/usr/bin/env bash
# Second H200 call (`bash reports/measurements/h200-2026-12-01-final/run2.sh`, carry .whl): the 32 built-in
# cases run.sh's time limit cut off, the real-world TransformerEncoder pair after its replay tolerance, and the
# aiter #5831 weight-copy table after it compares outputs per kernel.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache
W=/tmp/w; mkdir -p "$W"
timeout 200 python3 -m harness verify --backend gpu --report-dir "$W/rest" \
  -k "platform_host_function_refused_control or platform_memop or platform_rebuild or platform_live_graphs or shape_search or trust_controls" > "$W/rest.log" 2>&1
echo "rest rc=$?" | tee "$OUT/rc.txt"
tar czf "$OUT/rest.tgz" -C "$W" rest rest.log
python3 -c "import zipfile,glob; [zipfile.ZipFile(w).extractall('/tmp/rw') for w in glob.glob('.whl/real-world/*.whl')]"
PYTHONPATH="$PWD:/tmp/rw" timeout 60 python3 -m harness verify --backend gpu --case cases.real_world -k transformer_encoder --report-dir "$W/rw" > "$OUT/rw.log" 2>&1
echo "rw rc=$?" | tee -a "$OUT/rc.txt"
timeout 60 python3 -m harness repro moe_gemm_weight_copy --backend gpu --markdown > "$OUT/moe_gemm_weight_copy.md" 2>&1
echo "weight_copy rc=$?" | tee -a "$OUT/rc.txt"
