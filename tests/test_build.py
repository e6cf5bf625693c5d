"""Tests for kernels/build.py: the g++ path builds and runs, the cache hits, nvcc compiles HIP sources through
hip_compat.h for sm_90, and a missing compiler is a named CompilerNotFound.

Each test builds into a private cache (monkeypatched BUILD_DIR) so runs do not see each other's outputs.
"""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import time

import pytest

from kernels import build

TINY_CPP = r"""
#include <pybind11/pybind11.h>
#include "hip_compat.h"
// bf16 helpers from the shared header, so the host path of hip_compat.h is exercised too.
static int add(int a, int b) { return a + b; }
static unsigned bf16_bits(float f) { return gs_float_to_bf16(f); }
PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.def("add", &add);
  m.def("bf16_bits", &bf16_bits);
}
"""

# Uses every group of the nvcc mapping the project's kernels rely on: launch, shuffles, attributes,
# memops (resolved through the driver entry point), capture and graph node types, mapped host memory, bf16.
TINY_HIP = r"""
#include "hip_compat.h"
__global__ void twice(float* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float v = x[i];
    v += __shfl_xor(v, 1);
    x[i] = gs_round_through_bf16(v);
  }
}
extern "C" int smoke(float* x, int n, void* stream, uint32_t* flag) {
  hipStream_t s = (hipStream_t)stream;
  int warp = 0;
  if (hipDeviceGetAttribute(&warp, hipDeviceAttributeWarpSize, 0) != hipSuccess) return -1;
  hipLaunchKernelGGL(twice, dim3(1), dim3(64), 0, s, x, n);
  if (hipStreamWriteValue32(s, flag, 1u, 0) != hipSuccess) return -1;
  if (hipStreamWaitValue32(s, flag, 1u, hipStreamWaitValueEq, 0xFFFFFFFFu) != hipSuccess) return -1;
  hipGraph_t graph;
  hipGraphExec_t exec;
  if (hipStreamBeginCapture(s, hipStreamCaptureModeGlobal) != hipSuccess) return -1;
  if (hipStreamEndCapture(s, &graph) != hipSuccess) return -1;
  if (hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0) != hipSuccess) return -1;
  size_t count = 0;
  if (hipGraphGetNodes(graph, nullptr, &count) != hipSuccess) return -1;
  hipGraphNodeType type = hipGraphNodeTypeKernel;
  if (type == GS_GRAPH_NODE_TYPE_BATCH_MEMOP || type == hipGraphNodeTypeHost) return -2;
  void* host = nullptr;
  void* dev = nullptr;
  if (hipHostMalloc(&host, 16, hipHostMallocMapped) != hipSuccess) return -1;
  if (hipHostGetDevicePointer(&dev, host, 0) != hipSuccess) return -1;
  hip_bfloat16 b = hip_bfloat16(1.5f);
  (void)b;
  return hipGetLastError() == hipSuccess ? warp : -1;
}
"""


@pytest.fixture
def private_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path / "_build")
    return tmp_path


def test_detect_backend_and_host_arch() -> None:
    """Method: on this CPU-only torch the backend is cpu and its arch is 'host'; a bad name is refused."""
    assert build.detect_backend() in build.BACKENDS
    assert build.device_arch("cpu") == "host"
    with pytest.raises(ValueError, match="backend must be one of"):
        build.device_arch("metal")


def test_gxx_builds_runs_and_hits_cache(private_cache: pathlib.Path) -> None:
    """Method: build a tiny pybind11 module with g++, call it, build again.
    Failure scenario: a cache that misses rebuilds every time (seconds per test worker); expected: second
    call returns the same module in well under the cold build time and creates no second directory."""
    source = private_cache / "tiny.cpp"
    source.write_text(TINY_CPP)
    start = time.perf_counter()
    module = build.build_extension("gs_tiny", [source], backend="cpu")
    cold = time.perf_counter() - start
    assert module.add(2, 3) == 5
    assert module.bf16_bits(1.0) == 0x3F80  # 1.0 in bf16
    assert module.bf16_bits(1.00390625) == 0x3F80  # exactly half an ulp above 1.0: ties to even
    assert module.bf16_bits(1.01171875) == 0x3F82  # half an ulp above 0x3F81: ties to even, upward
    start = time.perf_counter()
    again = build.build_extension("gs_tiny", [source], backend="cpu")
    warm = time.perf_counter() - start
    assert again is module
    assert warm < cold / 10, (cold, warm)
    assert len(list((private_cache / "_build").iterdir())) == 1
    print(f"g++ tiny module: cold {cold:.2f} s, warm {warm * 1e3:.2f} ms")


def test_source_change_misses_cache(private_cache: pathlib.Path) -> None:
    """Method: change the source of a plain shared library and call both builds through ctypes.
    Failure scenario: a key that ignores the source returns the old function (negative control of the key)."""
    source = private_cache / "tiny2.cpp"
    source.write_text('extern "C" int combine(int a, int b) { return a + b; }')
    first = build.build_shared_library("gs_tiny2", [source], backend="cpu")
    source.write_text('extern "C" int combine(int a, int b) { return a - b; }')
    second = build.build_shared_library("gs_tiny2", [source], backend="cpu")
    assert first != second
    assert ctypes.CDLL(str(first)).combine(5, 3) == 8
    assert ctypes.CDLL(str(second)).combine(5, 3) == 2


def test_compile_error_is_reported(private_cache: pathlib.Path) -> None:
    """Method: a syntax error surfaces as BuildError with the compiler output, and leaves no cache entry."""
    source = private_cache / "broken.cpp"
    source.write_text("int broken( {")
    with pytest.raises(build.BuildError, match="broken"):
        build.build_shared_library("gs_broken", [source], backend="cpu")
    assert not [p for p in (private_cache / "_build").iterdir() if not p.name.startswith(".tmp")]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_compiles_hip_source_for_sm90(private_cache: pathlib.Path) -> None:
    """Method: compile-and-link (no import, no device needed) a .hip using the nvcc mapping for sm_90."""
    source = private_cache / "smoke.hip"
    source.write_text(TINY_HIP)
    library = build.build_shared_library("gs_smoke", [source], backend="cuda", arch="sm_90")
    assert library.is_file() and library.name == "libgs_smoke.so"


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
def test_hipcc_compiles_hip_source_for_gfx90a(private_cache: pathlib.Path) -> None:
    """Method: the same source through hipcc (HIP_PLATFORM=amd is set by build.py) for gfx90a."""
    source = private_cache / "smoke.hip"
    source.write_text(TINY_HIP)
    library = build.build_shared_library("gs_smoke", [source], backend="hip", arch="gfx90a")
    assert library.is_file()


def test_missing_compiler_names_it(private_cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Method: point each backend at a compiler that does not exist; the error names it and the remedy."""
    source = private_cache / "tiny.cpp"
    source.write_text(TINY_CPP)
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(build.CompilerNotFound, match=r"g\+\+ not found.*apt-get install g\+\+"):
        build.build_extension("gs_tiny", [source], backend="cpu")
    monkeypatch.setenv("GRAPHSAFE_HIPCC", "/nonexistent/hipcc")
    with pytest.raises(build.CompilerNotFound, match=r"hipcc not found.*apt-get install hipcc"):
        build.build_shared_library("gs_tiny", [source], backend="hip", arch="gfx90a")
    monkeypatch.setenv("GRAPHSAFE_NVCC", "/nonexistent/nvcc")
    with pytest.raises(build.CompilerNotFound, match=r"nvcc not found.*CUDA toolkit"):
        build.build_shared_library("gs_tiny", [source], backend="cuda", arch="sm_90")
