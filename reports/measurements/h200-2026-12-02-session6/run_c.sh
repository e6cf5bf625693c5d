#!/usr/bin/env bash
# H200 call C (session 6): the protocol with fewer waits (.whl/lead.tar) against the tree before it
# (.whl/lead_old.tar): contention.py alone and with 8 processes for both trees, then on the new tree
# compare_micro.py, the harness's GPU tests and bench/harness_throughput.py twice.
# bash reports/measurements/h200-2026-12-02-session6/run_c.sh   (carry: .whl)
set -u
for t in old new; do
  rm -rf /tmp/$t && mkdir -p /tmp/$t
  tar xf .whl/lead$([ $t = old ] && echo _old).tar -C /tmp/$t
done
sha256sum .whl/lead.tar .whl/lead_old.tar > "$OUT/c_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
D=reports/measurements/h200-2026-12-02-session6
SECONDS=0
for t in old new; do
  for n in 1 8; do
    (cd /tmp/$t && PYTHONPATH=/tmp/$t timeout 90 python3 $D/contention.py --procs $n --seconds 6 --warmup 15 \
      2>/dev/null | sed "s/^/$t /") >> "$OUT/c_contention.txt"
    echo "contention $t $n rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
  done
done
cd /tmp/new
export PYTHONPATH=/tmp/new
timeout 60 python3 $D/compare_micro.py --repeats 200 > "$OUT/c_compare_micro.txt" 2>&1
echo "compare micro rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
timeout 200 python3 -m pytest tests/test_gpu_backend.py tests/test_gpu_backend_sequence.py tests/test_protocol.py \
  tests/test_controls.py tests/test_trust.py tests/test_faults.py tests/test_scan.py tests/test_search.py tests/test_handshake.py tests/test_cpu_moe.py -m gpu -n 4 -q -p no:cacheprovider > /tmp/c_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/c_gpu_tests.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
tail -40 /tmp/c_gpu_tests.txt > "$OUT/c_gpu_tests_tail.txt"
for i in 1 2; do
  timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/c_throughput_$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
done
cat /tmp/c_throughput_*.txt > "$OUT/c_throughput.txt"
