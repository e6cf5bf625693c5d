#!/usr/bin/env bash
# H200 call F (the working tree as it travels, = HEAD): the cases no H200 run of this tree had reached (platform
# families, shape search, trust controls and twins, the built-in controls), then the harness throughput.
# bash reports/measurements/h200-2026-12-01-session2/run_f.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-f GRAPHSAFE_SEARCH_DB=/tmp/gs-search-f
W=/tmp/wf; mkdir -p $W; SECONDS=0
timeout 200 python3 -m harness verify --backend gpu -k "platform or shape_search or control or fixed_" --report-dir $W/verify > $W/f_verify.log 2>&1; echo "verify rc=$? ${SECONDS}s" | tee $W/f_rc.txt
timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > $W/f_throughput.txt 2>&1; echo "throughput rc=$? ${SECONDS}s" | tee -a $W/f_rc.txt
cp $W/f_rc.txt $W/f_throughput.txt "$OUT/"
tar czf "$OUT/f_verify.tgz" -C $W f_verify.log verify
