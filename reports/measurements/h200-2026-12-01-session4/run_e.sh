#!/usr/bin/env bash
# H200 call E (session 4), the final tree (.whl/head.tar = `git archive HEAD`) beside the session's starting
# tree (.whl/old.tar = 8e8cb69): harness throughput alternating old/new (new three times), then make verify
# cold and warm three times (real-world packages from the carried wheels).
# bash reports/measurements/h200-2026-12-01-session4/run_e.sh   (carry: .whl)
set -u
for t in head old; do rm -rf /tmp/$t && mkdir -p /tmp/$t && tar xf .whl/$t.tar -C /tmp/$t; done
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1
echo "head: $(sha256sum .whl/head.tar)  old: $(sha256sum .whl/old.tar)" > "$OUT/e_tree.txt"
for run in head_1 old_1 head_2 old_2 head_3; do
  t=${run%_*}
  (cd /tmp/$t && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$t PYTHONPATH=/tmp/$t timeout 90 python3 bench/harness_throughput.py \
    --backend gpu --repeats 50 > /tmp/e_throughput_$run.txt 2>&1; echo "throughput $run rc=$?")
done | tee "$OUT/e_rc.txt"
grep -H "harness.check\|compare, 4096\|compare bandwidth / copy" /tmp/e_throughput_*.txt | tee "$OUT/e_throughput.txt"
cd /tmp/head
SECONDS=0
export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-verify GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
for run in cold warm warm2 warm3; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/e_$run" > /tmp/e_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected" /tmp/e_cold.log /tmp/e_warm*.log | tee "$OUT/e_time_lines.txt"
tar czf "$OUT/e_all.tgz" -C /tmp e_cold.log e_warm.log e_warm2.log e_warm3.log e_cold e_warm e_warm2 e_warm3 \
  e_throughput_head_1.txt e_throughput_old_1.txt e_throughput_head_2.txt e_throughput_old_2.txt e_throughput_head_3.txt
