#!/usr/bin/env bash
# H200 call H (session 10), the final tree .whl/lead.tar (git archive of 5fef8e0): the variants at DSv3-prefill
# (the MXFP8 pair with the 4-byte window scan), every GPU-marked test of tests/, `python -m bench moe_gemm`, and
# a cold `make verify`. Each step's output goes to $OUT as it finishes (the device time left was 361 s).
# bash reports/measurements/h200-2026-12-02-session10/run_h.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
sha256sum .whl/lead.tar > "$OUT/h_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-h GRAPHSAFE_SEARCH_DB=/tmp/gs-search-h
SECONDS=0
GS_VARIANTS_SHAPE=DSv3-prefill timeout 60 $V > "$OUT/h_variants_DSv3-prefill.txt" 2>&1
echo "variants rc=$? ${SECONDS}s $(tail -1 $OUT/h_variants_DSv3-prefill.txt)" | tee -a "$OUT/h_rc.txt"; SECONDS=0
cd /tmp/new
PYTHONPATH=/tmp/new timeout 200 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/h_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/h_gpu_tests.txt)" | tee -a "$OUT/h_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR" /tmp/h_gpu_tests.txt | head -40 > "$OUT/h_failures.txt"; tail -30 /tmp/h_gpu_tests.txt > "$OUT/h_gpu_tests_tail.txt"
PYTHONPATH=/tmp/new timeout 60 python3 -m bench moe_gemm --out-dir /tmp/h_bench > "$OUT/h_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/h_rc.txt"; SECONDS=0
PYTHONPATH=/tmp/rw timeout 90 make verify ARGS="--report-dir /tmp/h_cold" > /tmp/h_cold.log 2>&1
echo "cold verify rc=$? ${SECONDS}s" | tee -a "$OUT/h_rc.txt"
grep -h "graphsafe: time\|as expected\|FAIL" /tmp/h_cold.log > "$OUT/h_time_lines.txt"; tail -20 /tmp/h_cold.log > "$OUT/h_cold_tail.txt"
