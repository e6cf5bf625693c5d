#!/usr/bin/env bash
# H200 call A (session 12), the working tree as sent (recorded in a_tree.txt): every op family's cold build
# with the H200's own target (sm_90a; one family at a time, then all at once), the moe_gemm GPU tests (the
# plain-sm_90 child test and the 16-row CUDA-core unit included), where one harness.check's time goes
# (check_timeline.py), bench/harness_throughput.py x2. Each step's output goes to $OUT as it finishes.
# bash reports/measurements/h200-2026-12-02-session12/run_a.sh   (carry: .whl)
set -u
HERE=reports/measurements/h200-2026-12-02-session12
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a
git rev-parse HEAD > "$OUT/a_tree.txt"; git status --short >> "$OUT/a_tree.txt"; git diff | sha256sum >> "$OUT/a_tree.txt"
nvidia-smi -L >> "$OUT/a_tree.txt"; nproc >> "$OUT/a_tree.txt"
SECONDS=0
PYTHONPATH=$PWD timeout 200 python3 bench/build_times.py --backends cuda,cpu --arch sm_90a > "$OUT/a_build_times.txt" 2>&1
echo "build times rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 100 python3 bench/build_times.py --backends cuda,cpu --arch sm_90a --parallel --parallel-cache /tmp/gs-par-a > "$OUT/a_build_parallel.txt" 2>&1
echo "build parallel rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -rA -p no:cacheprovider > /tmp/a_gemm_tests.txt 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/a_gemm_tests.txt)" | tee -a "$OUT/a_rc.txt"; SECONDS=0
{ grep -E "FAILED|ERROR|plain_sm90|passed|failed" /tmp/a_gemm_tests.txt | head -40; } > "$OUT/a_gemm_tests.txt"
PYTHONPATH=$PWD timeout 120 python3 reports/measurements/h200-2026-12-02-session8/check_timeline.py --checks 200 > "$OUT/a_timeline.txt" 2>&1
echo "timeline rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
for i in 1 2; do
  PYTHONPATH=$PWD timeout 40 python3 bench/harness_throughput.py > "$OUT/a_throughput$i.txt" 2>&1
  echo "throughput $i rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
done
