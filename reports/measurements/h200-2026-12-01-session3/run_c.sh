#!/usr/bin/env bash
# H200 call C: cold `make verify` with 8 workers and warm with 16 on the one GPU (the real-world suite's packages from
# the carried wheels), then the harness throughput and phase times of this tree.
# Runs committed HEAD, carried as .whl/head.tar (`git archive HEAD -o .whl/head.tar`), not the working tree:
# helpers were editing kernel sources in the tree at the time.
# bash reports/measurements/h200-2026-12-01-session3/run_b.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head && cp -r .whl /tmp/head/ && cd /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONPATH=/tmp/rw PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
D=reports/measurements/h200-2026-12-01-session3
echo "HEAD tarball: $(sha256sum .whl/head.tar)" > "$OUT/c_tree.txt"
SECONDS=0
timeout 260 make verify ARGS="--jobs 8 --report-dir /tmp/c_cold" > /tmp/c_cold.log 2>&1; echo "cold rc=$? ${SECONDS}s" | tee "$OUT/c_rc.txt"
S2=$SECONDS
timeout 170 make verify ARGS="--jobs 16 --report-dir /tmp/c_warm" > /tmp/c_warm.log 2>&1; echo "warm rc=$? $((SECONDS-S2))s" | tee -a "$OUT/c_rc.txt"
PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/c_throughput.txt" 2>&1; echo "throughput rc=$?" | tee -a "$OUT/c_rc.txt"
PYTHONPATH=$PWD timeout 40 python3 $D/phase_times.py 100 > "$OUT/c_phase_times.txt" 2>&1; echo "phases rc=$?" | tee -a "$OUT/c_rc.txt"
tar czf "$OUT/c_verify.tgz" -C /tmp c_cold.log c_warm.log c_cold c_warm 2>/dev/null
grep -h "graphsafe: time" /tmp/c_cold.log /tmp/c_warm.log
