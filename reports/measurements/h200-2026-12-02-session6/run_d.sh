#!/usr/bin/env bash
# H200 call D (session 6): the tree with fewer waits and the one-call comparison batch (.whl/lead.tar) against
# the tree before this session's harness changes (.whl/lead_old.tar): harness_throughput.py alternately (old,
# new, old, new), contention.py with 1 and 8 processes on the new tree, compare_micro.py, the harness's GPU
# tests, then `make verify` cold, warm, warm on the new tree; then the kernel helper's prepared call
# (reports/measurements/h200-2026-12-02-session6-kernels/run1.sh) on the new tree. Everything goes into
# $OUT/d_all.tgz (at most 8 files come back), with d_rc.txt and d_time_lines.txt beside it.
# bash reports/measurements/h200-2026-12-02-session6/run_d.sh   (carry: .whl)
set -u
for t in old new; do
  rm -rf /tmp/$t && mkdir -p /tmp/$t
  tar xf .whl/lead$([ $t = old ] && echo _old).tar -C /tmp/$t
done
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/dout
mkdir -p $R
sha256sum .whl/lead.tar .whl/lead_old.tar > "$R/d_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
D=reports/measurements/h200-2026-12-02-session6
SECONDS=0
for t in old new old new; do
  (cd /tmp/$t && PYTHONPATH=/tmp/$t timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 \
    2>/dev/null | sed "s/^/$t /") >> "$R/d_throughput.txt"
  echo "throughput $t rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
cd /tmp/new
export PYTHONPATH=/tmp/new
for n in 1 8; do
  timeout 90 python3 $D/contention.py --procs $n --seconds 6 --warmup 15 2>/dev/null >> "$R/d_contention.txt"
  echo "contention new $n rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
timeout 60 python3 $D/compare_micro.py --repeats 200 > "$R/d_compare_micro.txt" 2>&1
echo "compare micro rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
timeout 200 python3 -m pytest tests/test_gpu_backend.py tests/test_gpu_backend_sequence.py tests/test_protocol.py \
  tests/test_controls.py tests/test_trust.py tests/test_faults.py tests/test_scan.py tests/test_search.py \
  tests/test_handshake.py tests/test_cpu_moe.py -m gpu -n 4 -q -p no:cacheprovider > /tmp/d_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/d_gpu_tests.txt)" | tee -a "$R/d_rc.txt"; SECONDS=0
grep -B5 -A30 "FAILED\|Error" /tmp/d_gpu_tests.txt | head -80 > "$R/d_gpu_tests_failures.txt"
unset PYTHONPATH
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/d_$run" > /tmp/d_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected" /tmp/d_cold.log /tmp/d_warm*.log | tee "$R/d_time_lines.txt"
cp -r /tmp/d_cold /tmp/d_warm /tmp/d_warm2 /tmp/d_*.log $R/
SECONDS=0
cd /tmp/new && OUT=/tmp/kout P=run1 PYTHONPATH=/tmp/new bash reports/measurements/h200-2026-12-02-session6-kernels/run1.sh
echo "kernel run1 rc=$? ${SECONDS}s" | tee -a "$R/d_rc.txt"
cp $R/d_rc.txt $R/d_time_lines.txt "$OUT/"
tar czf "$OUT/d_all.tgz" -C /tmp dout kout
