#!/usr/bin/env bash
# Compile every .hip source (kernels/<family>/*.hip, harness/native/*.hip) for AMD and NVIDIA targets, and every
# family's host-only pybind11 layer (kernels/<family>/*.bind.cpp) with g++, as harness/native/build.py builds
# them into one module; any failure exits non-zero naming file and target. A family split into parts
# (<stem>.<part>.hip) is covered part by part: each part is a .hip here.
#
#   Debian hipcc 5.2  -> gfx90a full object (-c). HIP_PLATFORM=amd: it picks NVIDIA when it finds nvcc.
#   clang-19 -x hip   -> gfx942, gfx1100, gfx1201 device assembly (-S --cuda-device-only -nogpulib): Debian
#                        ships no device libraries for them, so a full object cannot link.
#   nvcc              -> sm_90 object (-c), compile only; sources in WGMMA_SOURCES also for sm_90a with
#                        -DGS_SM90A=1 (as harness/native/build.py builds on the H100 / H200), whose PTX must
#                        contain warpgroup MMAs (wgmma.mma_async): the MoE GEMM's prefill unit and the whole
#                        moe_gemm.hip, which include the warpgroup-MMA kernels (moe_gemm.wgmma.h,
#                        moe_gemm.wgmma_q.h; the launcher's sm_90a paths are host code of that build).
# Matrix cores on AMD: each source in MFMA_SOURCES must contain MFMA instructions (v_mfma) in its gfx942
# assembly and in a clang-19 gfx90a assembly made for the check; a source whose MFMA path fell back to
# vector code (a wrong target macro, say) fails here: moe_gemm.hip, which includes the MFMA kernel
# (moe_gemm.mfma.h). Nothing here runs the code: no AMD GPU in CI.
# Headers (kernels/<family>/*.h) are compiled within the .hip sources that include them.
#   g++               -> host object (-c) of each .bind.cpp.
# Usage: .ci/compile_hip.sh [file.hip|file.bind.cpp ...]
#        (default: every kernels/*/*.hip, kernels/*/*.bind.cpp and harness/native/*.hip)
# Installs hipcc/clang-19 with apt-get when missing (CI images); nvcc must come with the image.
set -uo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need hipcc || ! need clang-19; then
  echo "installing hipcc clang-19" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hipcc clang-19 >/dev/null || {
    echo "FAIL: could not install hipcc/clang-19 (apt-get install hipcc clang-19)" >&2; exit 2; }
fi
need nvcc || { echo "FAIL: nvcc not found (install the CUDA toolkit)" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# pybind11 and Python headers: sources may carry their pybind11 layer (built by harness/native/build.py, which
# defines GS_MODULE_NAME); compiling it here too means CI covers the whole translation unit.
py=.venv/bin/python; [ -x "$py" ] || py=python3
pyinc=$("$py" -c 'import pybind11, sysconfig; print(pybind11.get_include(), sysconfig.get_paths()["include"])') || {
  echo "FAIL: pybind11 not importable by $py (pip install pybind11)" >&2; exit 2; }
read -r pybind_inc python_inc <<<"$pyinc"
inc=(-isystem "$pybind_inc" -isystem "$python_inc")
MFMA_SOURCES=(kernels/moe_gemm/moe_gemm.hip)
WGMMA_SOURCES=(kernels/moe_gemm/moe_gemm.hip kernels/moe_gemm/moe_gemm.prefill.hip)
failures=0
run() {  # run <file> <target> <command...>
  local file=$1 target=$2; shift 2
  if "$@" >"$out/log" 2>&1; then
    echo "ok    $target  $file"
  else
    echo "FAIL  $target  $file"; sed 's/^/      /' "$out/log" | head -40
    failures=$((failures + 1))
  fi
}

require() {  # require <target> <file> <count> <what>: at least one instruction of a kind the target must use
  if [ "${3:-0}" -gt 0 ]; then
    echo "ok    $1  $2: $3 $4"
  else
    echo "FAIL  $1  $2: no $4"
    failures=$((failures + 1))
  fi
}

shopt -s nullglob
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(kernels/*/*.hip kernels/*/*.bind.cpp harness/native/*.hip)  # args: a subset (or a negative control)
[ ${#files[@]} -gt 0 ] || { echo "FAIL: no .hip sources found" >&2; exit 2; }
for f in "${files[@]}"; do
  base=$(basename "$f" .hip)
  base=${base//./_}  # moe_gemm.prefill -> moe_gemm_prefill: a part's module-name define must be an identifier
  # The include path the build gives it: kernels/common for a kernel family, its own folder for every source.
  inc_mod=(-I "$(dirname "$f")" "${inc[@]}" "-DGS_MODULE_NAME=ci_$base")
  case "$f" in kernels/*) inc_mod=(-I kernels/common "${inc_mod[@]}") ;; esac
  if [[ "$f" == *.bind.cpp ]]; then
    run "$f" host g++ -x c++ -std=c++17 -O2 -fPIC -ffp-contract=off "${inc_mod[@]}" -c "$f" -o "$out/$base.host.o"
    continue
  fi
  run "$f" gfx90a env HIP_PLATFORM=amd hipcc -std=c++17 -O2 -ffp-contract=off --offload-arch=gfx90a "${inc_mod[@]}" \
    -c "$f" -o "$out/$base.gfx90a.o"
  for arch in gfx942 gfx1100 gfx1201; do
    run "$f" "$arch" clang-19 -x hip -std=c++17 -O2 -ffp-contract=off --offload-arch="$arch" -nogpulib \
      --cuda-device-only -S "${inc_mod[@]}" "$f" -o "$out/$base.$arch.s"
  done
  for m in "${MFMA_SOURCES[@]}"; do
    [ "$f" = "$m" ] || continue
    run "$f" gfx90a-asm clang-19 -x hip -std=c++17 -O2 -ffp-contract=off --offload-arch=gfx90a -nogpulib \
      --cuda-device-only -S "${inc_mod[@]}" "$f" -o "$out/$base.gfx90a.s"
    for arch in gfx90a gfx942; do
      require "$arch" "$f" "$(grep -c 'v_mfma' "$out/$base.$arch.s" 2>/dev/null)" "MFMA instructions (v_mfma) in the assembly"
    done
  done
  run "$f" sm_90 nvcc -x cu -std=c++17 -O2 -arch=sm_90 --fmad=false "${inc_mod[@]}" -c "$f" -o "$out/$base.sm_90.o"
  for w in "${WGMMA_SOURCES[@]}"; do
    [ "$f" = "$w" ] || continue
    mkdir -p "$out/keep_$base"
    run "$f" sm_90a nvcc -x cu -std=c++17 -O2 -arch=sm_90a -DGS_SM90A=1 --fmad=false "${inc_mod[@]}" \
      --keep --keep-dir "$out/keep_$base" -c "$f" -o "$out/$base.sm_90a.o"
    require sm_90a "$f" "$(cat "$out/keep_$base"/*.ptx 2>/dev/null | grep -c 'wgmma.mma_async')" \
      "warpgroup MMA instructions (wgmma.mma_async) in the PTX"
  done
done
if [ "$failures" -gt 0 ]; then
  echo "$failures compile(s) failed"
  exit 1
fi
echo "all ${#files[@]} sources compiled (.hip for gfx90a, gfx942, gfx1100, gfx1201, sm_90, sm_90a where wgmma is required; .bind.cpp with g++); MFMA and wgmma found where required"
