#!/usr/bin/env bash
# H200 call B (session 5): make verify cold, then warm twice (the reports and search changes), and a cProfile
# of two searched cases alone (profile_search.py), on the committed tree (.whl/head.tar = git archive HEAD).
# bash reports/measurements/h200-2026-12-01-session5/run_b.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-verify GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
sha256sum .whl/head.tar > "$OUT/b_tree.txt"
cd /tmp/head
SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/b_$run" > /tmp/b_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
for name in moe_combine.prod.s0.7.search.exact shape_search.empty_expert.fixed; do
  PYTHONPATH=/tmp/rw timeout 90 python3 reports/measurements/h200-2026-12-01-session5/profile_search.py "$name" \
    --backend gpu --top 45 > /tmp/b_profile_$name.txt 2>&1
  echo "profile $name rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected" /tmp/b_cold.log /tmp/b_warm*.log | tee "$OUT/b_time_lines.txt"
head -3 /tmp/b_profile_*.txt | tee -a "$OUT/b_time_lines.txt"
tar czf "$OUT/b_all.tgz" -C /tmp $(cd /tmp && ls -d b_*)
