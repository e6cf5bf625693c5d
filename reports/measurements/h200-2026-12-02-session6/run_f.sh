#!/usr/bin/env bash
# H200 call F (session 6): `make verify` cold, then warm twice, on the final tree (.whl/lead.tar = git archive
# HEAD: workers set up the backend before their first request). Each run's time lines go to $OUT as they end.
# bash reports/measurements/h200-2026-12-02-session6/run_f.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
sha256sum .whl/lead.tar > "$OUT/f_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-f GRAPHSAFE_SEARCH_DB=/tmp/gs-search-f
cd /tmp/new
SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 120 make verify ARGS="--report-dir /tmp/f_$run" > /tmp/f_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$OUT/f_rc.txt"; SECONDS=0
  grep -h "graphsafe: time\|as expected" /tmp/f_$run.log >> "$OUT/f_time_lines.txt"
  cp /tmp/f_$run/times.csv "$OUT/f_${run}_times.csv" 2>/dev/null
done
