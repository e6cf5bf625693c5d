"""Tests for harness/native/build.py: the g++ path builds and runs, the cache hits and misses on sources and
headers, the cache lives in the user cache directory, nvcc compiles the harness's native sources and a kernel
library's HIP source for sm_90, and a missing compiler is a named CompilerNotFound.

Each test builds into a private cache (GRAPHSAFE_CACHE_DIR) so runs do not see each other's outputs.
"""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import sysconfig
import time

import pybind11
import pytest

from graphsafe import native
from graphsafe.native import build

REPO = pathlib.Path(__file__).resolve().parents[1]
# The kernel libraries' HIP-on-CUDA header (wherever the kernels keep it): the full mapping kernels rely on.
KERNEL_HEADER_DIRS = sorted({p.parent for p in (REPO / "kernels").rglob("hip_compat.h")})

TINY_CPP = r"""
#include <pybind11/pybind11.h>
#include "tiny_helpers.h"
static int add(int a, int b) { return a + b; }
static unsigned bf16_bits(float f) { return tiny_float_to_bf16(f); }
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
    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path / "_build"))
    return tmp_path


def test_cache_dir_follows_the_environment(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Method: GRAPHSAFE_CACHE_DIR wins, then XDG_CACHE_HOME/graphsafe/build, then ~/.cache/graphsafe/build.
    Failure scenario: a cache inside the package directory (read-only when installed in site-packages)."""
    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("GRAPHSAFE_CACHE_DIR")
    assert build.cache_dir() == tmp_path / "xdg" / "graphsafe" / "build"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build.cache_dir() == tmp_path / "home" / ".cache" / "graphsafe" / "build"
    assert native.NATIVE_DIR not in build.cache_dir().parents


def test_detect_backend_and_host_arch() -> None:
    """Method: on this CPU-only torch the backend is cpu and its arch is 'host'; a bad name is refused."""
    assert build.detect_backend() in build.BACKENDS
    assert build.device_arch("cpu") == "host"
    with pytest.raises(ValueError, match="backend must be one of"):
        build.device_arch("metal")


# Found through include_dirs: the header's content must be part of the cache key.
TINY_HEADER = r"""
#pragma once
#include <stdint.h>
#include <string.h>
static inline uint16_t tiny_float_to_bf16(float f) {  // round half to even on the 16 dropped bits
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
"""


def _tiny_sources(root: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    include = root / "include"
    include.mkdir(exist_ok=True)
    (include / "tiny_helpers.h").write_text(TINY_HEADER)
    source = root / "src" / "tiny.cpp"
    source.parent.mkdir(exist_ok=True)
    source.write_text(TINY_CPP)
    return source, include


def test_gxx_builds_runs_and_hits_cache(private_cache: pathlib.Path) -> None:
    """Method: build a tiny pybind11 module with g++, call it, build again.
    Failure scenario: a cache that misses rebuilds every time (seconds per test worker); expected: second
    call returns the same module in well under the cold build time and creates no second directory."""
    source, include = _tiny_sources(private_cache)
    start = time.perf_counter()
    module = build.build_extension("gs_tiny", [source], [include], backend="cpu")
    cold = time.perf_counter() - start
    assert module.add(2, 3) == 5
    assert module.bf16_bits(1.0) == 0x3F80  # 1.0 in bf16
    assert module.bf16_bits(1.00390625) == 0x3F80  # exactly half an ulp above 1.0: ties to even
    assert module.bf16_bits(1.01171875) == 0x3F82  # half an ulp above 0x3F81: ties to even, upward
    start = time.perf_counter()
    again = build.build_extension("gs_tiny", [source], [include], backend="cpu")
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


def test_header_change_in_include_dir_misses_cache(private_cache: pathlib.Path) -> None:
    """Method: build against a header in include_dirs, change only the header, build again.
    Failure scenario: a key that hashes the sources but not the headers they include keeps serving the old
    library after a header fix (negative control: the unchanged header hits the cache)."""
    include = private_cache / "inc"
    include.mkdir()
    (include / "value.h").write_text("#define TINY_VALUE 7\n")
    source = private_cache / "value.cpp"
    source.write_text('#include "value.h"\nextern "C" int value(void) { return TINY_VALUE; }\n')
    first = build.build_shared_library("gs_value", [source], [include], backend="cpu")
    assert build.build_shared_library("gs_value", [source], [include], backend="cpu") == first
    (include / "value.h").write_text("#define TINY_VALUE 9\n")
    second = build.build_shared_library("gs_value", [source], [include], backend="cpu")
    assert second != first
    assert ctypes.CDLL(str(first)).value() == 7
    assert ctypes.CDLL(str(second)).value() == 9


def test_bad_include_dirs_are_refused(private_cache: pathlib.Path) -> None:
    """Method: a missing include directory and a single path passed where a list belongs are named errors."""
    source = private_cache / "one.cpp"
    source.write_text('extern "C" int one(void) { return 1; }')
    with pytest.raises(FileNotFoundError, match="include_dirs not found"):
        build.build_shared_library("gs_one", [source], [private_cache / "absent"], backend="cpu")
    with pytest.raises(TypeError, match="include_dirs must be a list"):
        build.build_shared_library("gs_one", [source], str(private_cache), backend="cpu")  # type: ignore[arg-type]


def test_compile_error_is_reported(private_cache: pathlib.Path) -> None:
    """Method: a syntax error surfaces as BuildError with the compiler output, and leaves no cache entry."""
    source = private_cache / "broken.cpp"
    source.write_text("int broken( {")
    with pytest.raises(build.BuildError, match="broken"):
        build.build_shared_library("gs_broken", [source], backend="cpu")
    assert not [p for p in (private_cache / "_build").iterdir() if not p.name.startswith(".tmp")]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_compiles_harness_native_sources_for_sm90(private_cache: pathlib.Path) -> None:
    """Method: compile-and-link (no import, no device needed) the poisoning allocator and the graph-node module
    for sm_90 through the harness's own gpu_runtime.h, with no include directory of the kernels."""
    allocator = build.build_shared_library(
        "graphsafe_gpu_native", list(native.GPU_LIBRARY_SOURCES), backend="cuda", arch="sm_90"
    )
    assert allocator.is_file()
    pybind_includes = [pybind11.get_include(), sysconfig.get_paths()["include"]]
    nodes = build.build_shared_library(
        "graphsafe_graph_nodes", [native.GRAPH_NODES_SOURCE], pybind_includes, backend="cuda", arch="sm_90"
    )
    assert nodes.is_file()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.skipif(not KERNEL_HEADER_DIRS, reason="no kernels/**/hip_compat.h in this tree")
def test_nvcc_compiles_hip_source_for_sm90(private_cache: pathlib.Path) -> None:
    """Method: compile-and-link (no import, no device needed) a .hip using the kernels' nvcc mapping for sm_90."""
    source = private_cache / "smoke.hip"
    source.write_text(TINY_HIP)
    library = build.build_shared_library(
        "gs_smoke", [source], KERNEL_HEADER_DIRS, backend="cuda", arch="sm_90"
    )
    assert library.is_file() and library.name == "libgs_smoke.so"


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
@pytest.mark.skipif(not KERNEL_HEADER_DIRS, reason="no kernels/**/hip_compat.h in this tree")
def test_hipcc_compiles_hip_source_for_gfx90a(private_cache: pathlib.Path) -> None:
    """Method: the same source through hipcc (HIP_PLATFORM=amd is set by build.py) for gfx90a."""
    source = private_cache / "smoke.hip"
    source.write_text(TINY_HIP)
    library = build.build_shared_library(
        "gs_smoke", [source], KERNEL_HEADER_DIRS, backend="hip", arch="gfx90a"
    )
    assert library.is_file()


def test_missing_compiler_names_it(private_cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Method: point each backend at a compiler that does not exist; the error names it and the remedy."""
    source, _ = _tiny_sources(private_cache)
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(build.CompilerNotFound, match=r"g\+\+ not found.*apt-get install g\+\+"):
        build.build_extension("gs_tiny", [source], backend="cpu")
    monkeypatch.setenv("GRAPHSAFE_HIPCC", "/nonexistent/hipcc")
    with pytest.raises(build.CompilerNotFound, match=r"hipcc not found.*apt-get install hipcc"):
        build.build_shared_library("gs_tiny", [source], backend="hip", arch="gfx90a")
    monkeypatch.setenv("GRAPHSAFE_NVCC", "/nonexistent/nvcc")
    with pytest.raises(build.CompilerNotFound, match=r"nvcc not found.*CUDA toolkit"):
        build.build_shared_library("gs_tiny", [source], backend="cuda", arch="sm_90")
