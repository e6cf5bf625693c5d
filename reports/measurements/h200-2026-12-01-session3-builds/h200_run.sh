#!/usr/bin/env bash
# The one H200 call of this measurement (run tool, kind nvidia-h200), from the repository root of the device's
# copy of the working tree: cold builds per family into empty caches, then the split modules imported from the
# parallel run's cache and a few GPU tests on them. Outputs go to $OUT (copied back into this folder).
export PYTHONPATH=$PWD
cache=$(mktemp -d)
{ nproc; command -v nvcc || ls /usr/local/cuda/bin/nvcc; nvcc --version | tail -1; g++ --version | head -1
  python3 -c 'import pybind11, sys; print("pybind11", pybind11.__version__, "python", sys.version.split()[0])'; } > "$OUT/host.txt" 2>&1
python3 bench/build_times.py --backends cuda,cpu --arch sm_90 --parallel --parallel-cache "$cache" > "$OUT/build_times.txt" 2>&1
GRAPHSAFE_CACHE_DIR=$cache python3 -c "
from kernels.common import native
from kernels.platform import ops
m = native.load(ops.FAMILY_DIR, 'graph_platform', 'gpu')
print('graph_platform imported:', m.__file__, m.error_name(0), 'slot', m.slot_create(4) != 0)
" > "$OUT/platform_import.txt" 2>&1
GRAPHSAFE_CACHE_DIR=$cache timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/test_moe_combine_ops.py tests/test_handshake.py tests/test_moe_gemm_ops.py > "$OUT/gpu_tests.txt" 2>&1
echo "pytest rc=$?" >> "$OUT/gpu_tests.txt"
cat "$OUT/host.txt" "$OUT/build_times.txt" "$OUT/platform_import.txt"; tail -4 "$OUT/gpu_tests.txt"
