#!/usr/bin/env bash
# H200 call E (session 7), the final tree .whl/lead.tar: the harness's other GPU tests (backend, sequence,
# controls, trust, faults, handshake, cpu_moe, platform cases) on the final scan.py and search.
# bash reports/measurements/h200-2026-12-01-session7/run_e.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
sha256sum .whl/lead.tar > "$OUT/e_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
cd /tmp/new
SECONDS=0
PYTHONPATH=/tmp/new timeout 200 python3 -m pytest tests/test_gpu_backend.py tests/test_gpu_backend_sequence.py \
  tests/test_controls.py tests/test_trust.py tests/test_faults.py tests/test_handshake.py tests/test_cpu_moe.py \
  tests/test_platform_cases.py -m gpu -n 6 -q -p no:cacheprovider > "$OUT/e_gpu_tests.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 $OUT/e_gpu_tests.txt)" | tee "$OUT/e_rc.txt"
