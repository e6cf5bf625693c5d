#!/usr/bin/env bash
# H200 call C (session 5), the final tree (.whl/head.tar = git archive HEAD): make verify cold, then warm three
# times (exclusive host-waiting group placed by its summed time), moe_gemm's GPU tests on the split module,
# cold builds per family, and the harness throughput twice.
# bash reports/measurements/h200-2026-12-01-session5/run_c.sh   (carry: .whl)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-verify GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
sha256sum .whl/head.tar > "$OUT/c_tree.txt"
cd /tmp/head
SECONDS=0
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/c_$run" > /tmp/c_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
done
PYTHONPATH=/tmp/head timeout 120 python3 -m pytest tests/test_moe_gemm_ops.py tests/test_native_build_parts.py -m gpu -n 0 -q \
  -p no:cacheprovider > /tmp/c_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/c_gpu_tests.txt)" | tee -a "$OUT/c_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/head timeout 150 python3 bench/build_times.py --backends cuda,cpu --arch sm_90 > /tmp/c_build_times.txt 2>&1
echo "build times rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
for i in 1 2; do
  PYTHONPATH=/tmp/head timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/c_throughput_$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"; SECONDS=0
done
PYTHONPATH=/tmp/rw timeout 100 make verify ARGS="--report-dir /tmp/c_warm3" > /tmp/c_warm3.log 2>&1
echo "warm3 verify rc=$? ${SECONDS}s" | tee -a "$OUT/c_rc.txt"
grep -h "graphsafe: time\|as expected" /tmp/c_cold.log /tmp/c_warm*.log | tee "$OUT/c_time_lines.txt"
grep -h "harness.check\|compare, 4096\|compare bandwidth / copy" /tmp/c_throughput_*.txt | tee "$OUT/c_throughput.txt"
cat /tmp/c_build_times.txt | tee "$OUT/c_build_times.txt" | tail -12
tar czf "$OUT/c_all.tgz" -C /tmp $(cd /tmp && ls -d c_*)
