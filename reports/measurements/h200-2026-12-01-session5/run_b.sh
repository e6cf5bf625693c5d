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
# Concurrency: the eight recorded-handshake cases at once (8 workers) and one at a time (1 worker); then
# the spinning isolation control alone, followed at once by the side-stream gate cases (torch.cuda._sleep
# kernels) in a fresh process, and those again 20 s later.
for jobs in 8 1; do
  PYTHONPATH=/tmp/rw timeout 120 python3 -m harness verify --jobs $jobs -k "recorded and not unrecorded and not overlap and not block_fp8" \
    --report-dir /tmp/b_recorded_j$jobs > /tmp/b_recorded_j$jobs.log 2>&1
  echo "recorded jobs=$jobs rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
for run in spin kda_after_spin kda_later; do
  [ $run = kda_later ] && sleep 20
  sel=$([ $run = spin ] && echo isolation_spin_forever || echo kda_gate)
  PYTHONPATH=/tmp/rw timeout 120 python3 -m harness verify --jobs 1 -k "$sel" --report-dir /tmp/b_$run > /tmp/b_$run.log 2>&1
  echo "$run rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"; SECONDS=0
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$OUT/b_rc.txt" 2>&1
done
grep -h "graphsafe: time\|as expected" /tmp/b_cold.log /tmp/b_warm*.log /tmp/b_recorded*.log /tmp/b_spin.log /tmp/b_kda*.log | tee "$OUT/b_time_lines.txt"
head -3 /tmp/b_profile_*.txt | tee -a "$OUT/b_time_lines.txt"
tar czf "$OUT/b_all.tgz" -C /tmp $(cd /tmp && ls -d b_*)
