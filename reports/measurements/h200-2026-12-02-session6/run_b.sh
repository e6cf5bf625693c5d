#!/usr/bin/env bash
# H200 call B (session 6): capture_micro.py (what a capture costs, by step and pool kind), then contention.py
# (fixed timers) alone and with 8 processes, base and fewer_syncs, and a searched case beside 7 busy processes.
# bash reports/measurements/h200-2026-12-02-session6/run_b.sh   (carry: .whl; .whl/lead.tar = git archive HEAD)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/lead.tar -C /tmp/head
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b PYTHONPATH=/tmp/head GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
sha256sum .whl/lead.tar > "$OUT/b_tree.txt"
cd /tmp/head
D=reports/measurements/h200-2026-12-02-session6
SECONDS=0
timeout 120 python3 $D/capture_micro.py --repeats 100 > "$OUT/b_capture_micro.txt" 2>&1
echo "capture micro rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
for v in base fewer_syncs; do
  for n in 1 8; do
    timeout 90 python3 $D/contention.py --procs $n --seconds 6 --warmup 15 --variant $v >> "$OUT/b_contention.txt" 2>&1
    echo "contention $v $n rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
  done
done
timeout 90 python3 $D/contention.py --procs 8 --seconds 12 --warmup 20 --case moe_combine.prod.s0.7.search.exact \
  --background-case moe_combine.prod.s0.7.T33K8H127.exact >> "$OUT/b_contention.txt" 2>&1
echo "search contention rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"
