#!/usr/bin/env bash
# H200 call E (session 6), the final tree (.whl/lead.tar = git archive HEAD): the harness's GPU tests (the
# generator repair's test among them) and that test's scenario with the repair switched off, `make verify` cold
# and warm three times, harness_throughput.py three times, compare_micro.py, a cProfile of 200 checks, then the
# kernel helper's run2.sh.
# bash reports/measurements/h200-2026-12-02-session6/run_e.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/eout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/e_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
D=reports/measurements/h200-2026-12-02-session6
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 150 python3 -m pytest tests/test_gpu_backend.py tests/test_gpu_backend_sequence.py \
  tests/test_protocol.py tests/test_controls.py tests/test_trust.py tests/test_faults.py tests/test_scan.py \
  tests/test_search.py tests/test_handshake.py tests/test_cpu_moe.py -m gpu -n 4 -q -p no:cacheprovider > /tmp/e_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/e_gpu_tests.txt)" | tee -a "$R/e_rc.txt"; SECONDS=0
grep -B5 -A40 "FAILED\|Error" /tmp/e_gpu_tests.txt | head -120 > "$R/e_gpu_tests_failures.txt"
PYTHONPATH=/tmp/new timeout 60 python3 $D/generator_repair_off.py > "$R/e_generator_repair_off.txt" 2>&1
echo "repair off rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
for run in cold warm warm2 warm3; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/e_$run" > /tmp/e_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
done
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/e_cold.log /tmp/e_warm*.log | tee "$R/e_time_lines.txt"
for i in 1 2 3; do
  PYTHONPATH=/tmp/new timeout 60 python3 bench/harness_throughput.py --backend gpu --repeats 50 > /tmp/e_throughput_$i.txt 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
done
cat /tmp/e_throughput_*.txt > "$R/e_throughput.txt"
PYTHONPATH=/tmp/new timeout 60 python3 $D/compare_micro.py --repeats 200 > "$R/e_compare_micro.txt" 2>&1
echo "compare micro rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 60 python3 reports/measurements/h200-2026-12-01-session4/profile_check.py --backend gpu \
  --checks 200 --top 50 > "$R/e_profile.txt" 2>&1
echo "profile rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"; SECONDS=0
cp -r /tmp/e_cold /tmp/e_warm /tmp/e_warm2 /tmp/e_warm3 /tmp/e_*.log $R/
if [ -f reports/measurements/h200-2026-12-02-session6-kernels/run2.sh ]; then
  OUT=/tmp/kout2 P=run2 PYTHONPATH=/tmp/new timeout 200 bash reports/measurements/h200-2026-12-02-session6-kernels/run2.sh
  echo "kernel run2 rc=$? ${SECONDS}s" | tee -a "$R/e_rc.txt"
fi
mkdir -p /tmp/kout2
cp $R/e_rc.txt $R/e_time_lines.txt "$OUT/"
grep -h "harness.check\|compare, 4096\|compare bandwidth / copy" $R/e_throughput.txt | tee "$OUT/e_throughput_lines.txt"
tar czf "$OUT/e_all.tgz" -C /tmp eout kout2
