#!/usr/bin/env bash
# H200 call D (session 4), the closing measurement of issue 17 on committed trees carried in .whl:
# head.tar (`git archive HEAD`) and old.tar (`git archive 8e8cb69`, the session's starting tree).
#  1. harness throughput, old and new alternating twice on this one machine (the check is host-bound and
#     machines of this kind differ by 30% from call to call, so only a same-machine ratio is a comparison);
#  2. make verify cold, then warm twice (new; real-world packages from the carried wheels);
#  3. the phase times of a check, then the GPU tests of the harness and the kernels (new);
#  4. cold builds per family, each alone (new).
# The order puts what issue 17 needs first, in case the session's device time ends the call early.
# bash reports/measurements/h200-2026-12-01-session4/run_d.sh   (carry: .whl)
set -u
for t in head old; do rm -rf /tmp/$t && mkdir -p /tmp/$t && tar xf .whl/$t.tar -C /tmp/$t; done
cp -r .whl /tmp/head/
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1
D=reports/measurements/h200-2026-12-01-session4
echo "head: $(sha256sum .whl/head.tar)  old: $(sha256sum .whl/old.tar)" > "$OUT/d_tree.txt"
for round in 1 2; do
  for t in old head; do
    (cd /tmp/$t && GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$t PYTHONPATH=/tmp/$t timeout 90 python3 bench/harness_throughput.py \
      --backend gpu --repeats 50 > /tmp/d_throughput_${t}_$round.txt 2>&1; echo "throughput $t $round rc=$?")
  done
done | tee "$OUT/d_rc.txt"
grep -H "harness.check\|compare, 4096\|compare bandwidth / copy" /tmp/d_throughput_*.txt | tee "$OUT/d_throughput.txt"

cd /tmp/head
SECONDS=0
export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-verify GRAPHSAFE_SEARCH_DB=/tmp/gs-search-d
for run in cold warm warm2; do
  PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/d_$run" > /tmp/d_$run.log 2>&1
  echo "$run verify rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
done

export GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-head
PYTHONPATH=$PWD timeout 60 python3 $D/phase_times.py 100 > "$OUT/d_phase_times.txt" 2>&1
echo "phases rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_gpu_backend.py \
  tests/test_gpu_backend_sequence.py tests/test_scan.py tests/test_protocol.py tests/test_trust.py tests/test_compare.py \
  tests/test_moe_gemm_ops.py tests/test_moe_combine_ops.py > /tmp/d_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
tail -3 /tmp/d_gpu_tests.txt > "$OUT/d_gpu_tests_tail.txt"

PYTHONPATH=$PWD timeout 120 python3 bench/build_times.py --backends cuda,cpu --arch sm_90 > "$OUT/d_build_times.txt" 2>&1
echo "build times rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"
tar czf "$OUT/d_all.tgz" -C /tmp d_cold.log d_warm.log d_warm2.log d_cold d_warm d_warm2 d_gpu_tests.txt \
  d_throughput_old_1.txt d_throughput_head_1.txt d_throughput_old_2.txt d_throughput_head_2.txt
grep -h "graphsafe: time\|as expected" /tmp/d_cold.log /tmp/d_warm.log /tmp/d_warm2.log
cat "$OUT/d_gpu_tests_tail.txt"; head -12 "$OUT/d_phase_times.txt"
