#!/usr/bin/env bash
# H200 call C (session 10), the tree .whl/lead.tar (git archive HEAD): the launcher's wgmma forms for bf16
# prefill (MXFP8 back on the mma.sync kernel). Every GPU-marked test of tests/; the moe_gemm wgmma cases under
# compute-sanitizer memcheck; `python -m bench moe_gemm moe_combine`; `make verify` cold (every family now
# built for sm_90a).
# bash reports/measurements/h200-2026-12-02-session10/run_c.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
R=/tmp/cout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/c_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c GRAPHSAFE_SEARCH_DB=/tmp/gs-search-c
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 250 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > "$R/c_gpu_tests.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 $R/c_gpu_tests.txt)" | tee -a "$R/c_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR" "$R/c_gpu_tests.txt" | head -40 > "$R/c_failures.txt"
PYTHONPATH=/tmp/new timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "bf16_prefill or e8m0_0_and_255 or (accuracy_and_determinism and (bf16 or mxfp8) and (64 or 128))" > "$R/c_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $R/c_memcheck.txt)" | tee -a "$R/c_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/new timeout 240 python3 -m bench moe_gemm moe_combine --out-dir $R/bench > "$R/c_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/rw timeout 150 make verify ARGS="--report-dir /tmp/c_cold" > /tmp/c_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/c_cold.log > "$R/c_time_lines.txt"
cp /tmp/c_cold/times.csv "$R/c_cold_times.csv"; tail -30 /tmp/c_cold.log > "$R/c_cold_tail.txt"
tail -40 "$R/c_gpu_tests.txt" > "$R/c_gpu_tests_tail.txt"; rm "$R/c_gpu_tests.txt"
cp -r $R/* "$OUT/" 2>/dev/null
