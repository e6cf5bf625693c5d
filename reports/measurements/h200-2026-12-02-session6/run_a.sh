#!/usr/bin/env bash
# H200 call A (session 6): where a check's time goes alone and with 8 processes at once (contention.py, base
# and fewer_syncs), a searched case beside 7 busy processes, cProfile of 200 checks alone, throughput once.
# bash reports/measurements/h200-2026-12-02-session6/run_a.sh   (carry: .whl; .whl/lead.tar = git archive HEAD)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/lead.tar -C /tmp/head
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a PYTHONPATH=/tmp/head GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
sha256sum .whl/lead.tar > "$OUT/a_tree.txt"
cd /tmp/head
C=reports/measurements/h200-2026-12-02-session6/contention.py
SECONDS=0
timeout 90 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/a_throughput.txt 2>&1
echo "throughput rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
for v in base fewer_syncs; do
  for n in 1 8; do
    timeout 90 python3 $C --procs $n --seconds 6 --warmup 15 --variant $v >> "$OUT/a_contention.txt" 2>&1
    echo "contention $v $n rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
  done
done
for v in base fewer_syncs; do
  timeout 90 python3 $C --procs 8 --seconds 12 --warmup 20 --variant $v --case moe_combine.prod.s0.7.search.exact \
    --background-case moe_combine.prod.s0.7.T33K8H127.exact >> "$OUT/a_contention.txt" 2>&1
  echo "search contention $v rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
done
timeout 90 python3 reports/measurements/h200-2026-12-01-session4/profile_check.py --backend gpu --checks 200 --top 60 \
  > "$OUT/a_profile.txt" 2>&1
echo "profile rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"
cp /tmp/a_throughput.txt "$OUT/a_throughput.txt"
