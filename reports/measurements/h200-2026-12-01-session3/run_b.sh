#!/usr/bin/env bash
# H200 call B: cold and warm `make verify` with 8 workers on the one GPU (the real-world suite's packages from
# the carried wheels), then the harness throughput and phase times of this tree.
# Runs committed HEAD, carried as .whl/head.tar (`git archive HEAD -o .whl/head.tar`), not the working tree:
# helpers were editing kernel sources in the tree at the time.
# bash reports/measurements/h200-2026-12-01-session3/run_b.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head && cp -r .whl /tmp/head/ && cd /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONPATH=/tmp/rw PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
D=reports/measurements/h200-2026-12-01-session3
echo "HEAD tarball: $(sha256sum .whl/head.tar)" > "$OUT/b_tree.txt"
SECONDS=0
timeout 260 make verify ARGS="--jobs 8 --report-dir /tmp/b_cold" > /tmp/b_cold.log 2>&1; echo "cold rc=$? ${SECONDS}s" | tee "$OUT/b_rc.txt"
S2=$SECONDS
timeout 170 make verify ARGS="--jobs 8 --report-dir /tmp/b_warm" > /tmp/b_warm.log 2>&1; echo "warm rc=$? $((SECONDS-S2))s" | tee -a "$OUT/b_rc.txt"
PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py --backend gpu --repeats 50 > "$OUT/b_throughput.txt" 2>&1; echo "throughput rc=$?" | tee -a "$OUT/b_rc.txt"
PYTHONPATH=$PWD timeout 40 python3 $D/phase_times.py 100 > "$OUT/b_phase_times.txt" 2>&1; echo "phases rc=$?" | tee -a "$OUT/b_rc.txt"
tar czf "$OUT/b_verify.tgz" -C /tmp b_cold.log b_warm.log b_cold b_warm 2>/dev/null
tail -4 /tmp/b_cold.log /tmp/b_warm.log
