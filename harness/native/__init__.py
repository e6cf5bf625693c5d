"""The harness's own native pieces and the build cache every native library of graphsafe goes through.

- ``build``: content-keyed compile-and-cache of pybind11 modules and shared libraries (nvcc, hipcc, g++);
  the public API kernel libraries build with.
- ``poison_alloc.hip``: the NaN-poisoning allocator of the gpu backend (a ``CUDAPluggableAllocator``).
- ``scan.hip``: the comparison's clean pass on the GPU (harness/scan.py), one launch per comparison and one
  stream synchronization per batch of comparisons.
  Both are one shared library, ``gpu_library()``: one compile on a cold cache instead of two.
- ``scan_host.cpp``: the same clean pass on the CPU, ``host_library()`` (g++).
- ``graph_nodes.hip`` / ``graph_node_kinds``: node kinds of a captured graph.
- ``launch_nodes.hip`` / ``graph_launch_nodes``: what each node of a captured graph launches (kernel, grid,
  block, shared memory, argument bytes and the pointers among them), for the launch diff
  (harness/launch_diff.py); built on first use, which only an explained or failing case reaches.
- ``graph_node_type.h``: a node's kind by name, shared by the two.
- ``gpu_runtime.h``: the HIP API subset these sources use, mapped onto CUDA for nvcc.
"""

from __future__ import annotations

import ctypes
import functools
import pathlib
import threading
import types
from typing import Any

NATIVE_DIR = pathlib.Path(__file__).resolve().parent
POISON_ALLOCATOR_SOURCE = NATIVE_DIR / "poison_alloc.hip"
SCAN_SOURCE = NATIVE_DIR / "scan.hip"
SCAN_HOST_SOURCE = NATIVE_DIR / "scan_host.cpp"
GRAPH_NODES_SOURCE = NATIVE_DIR / "graph_nodes.hip"
LAUNCH_NODES_SOURCE = NATIVE_DIR / "launch_nodes.hip"
GPU_LIBRARY_SOURCES = (POISON_ALLOCATOR_SOURCE, SCAN_SOURCE)

_LIBRARIES: dict[str, dict[str, Any]] = {}  # name -> {"path", "lib"} or {"error"}: decided once per process
_LIBRARY_LOCK = threading.Lock()
_P, _LL, _INT, _F32P, _I32P, _U32P = (
    ctypes.c_void_p,
    ctypes.c_longlong,
    ctypes.c_int,
    ctypes.POINTER(ctypes.c_float),
    ctypes.POINTER(ctypes.c_int),
    ctypes.POINTER(ctypes.c_uint),
)


def _load(
    name: str,
    sources: list[pathlib.Path],
    signatures: dict[str, tuple[list[Any], Any]],
    **build: Any,
) -> dict[str, Any]:
    """Build (cached by content) and load a plain shared library once per process, with its functions'
    (argtypes, restype). Returns {"path": Path, "lib": CDLL} or {"error": why}; the outcome is kept, so a
    machine without the compiler pays for one failed attempt, not one per comparison."""
    with _LIBRARY_LOCK:
        if name in _LIBRARIES:
            return _LIBRARIES[name]
        try:
            from graphsafe.native.build import build_shared_library

            path = build_shared_library(name, sources, **build)
            lib = ctypes.CDLL(str(path))
            for function, (argtypes, restype) in signatures.items():
                getattr(lib, function).argtypes = argtypes
                getattr(lib, function).restype = restype
            _LIBRARIES[name] = {"path": path, "lib": lib}
        except Exception as exc:  # no compiler, no runtime library: callers fall back and say why
            _LIBRARIES[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return _LIBRARIES[name]


def gpu_library() -> dict[str, Any]:
    """The harness's GPU library (poisoning allocator and comparison pass): {"path", "lib"} or {"error"}."""
    loaded = _LIBRARIES.get("graphsafe_gpu_native")  # every comparison asks: no lock, no signature table
    if loaded is not None:
        return loaded
    return _load(
        "graphsafe_gpu_native",
        list(GPU_LIBRARY_SOURCES),
        {
            "graphsafe_set_pattern": ([_INT], None),
            "graphsafe_poison_live_bytes": ([], _LL),
            "graphsafe_poison_malloc_count": ([], _LL),
            "graphsafe_poison_reuse_count": ([], _LL),
            "graphsafe_scan_slots": ([], _INT),
            # jobs are passed as a packed bytes object (harness/scan.py), records as a ctypes array
            "graphsafe_scan_run": ([_INT, ctypes.c_char_p, _P, _U32P], _INT),
        },
    )


def host_library() -> dict[str, Any]:
    """The comparison pass on the CPU (scan_host.cpp, g++): {"path", "lib"} or {"error"}."""
    loaded = _LIBRARIES.get("graphsafe_host_native")
    if loaded is not None:
        return loaded
    return _load(
        "graphsafe_host_native",
        [SCAN_HOST_SOURCE],
        {
            "graphsafe_scan_floats_host": ([_P, _P, _LL, _INT, _F32P], _INT),
            "graphsafe_scan_bytes_differ_host": ([_P, _P, _LL, _I32P], _INT),
        },
        backend="cpu",
        # -O3: GCC vectorizes the scan loop only at -O3 (2-core Xeon, 64 MiB float32, 2 threads: -O2 0.29 of
        # the copy's bandwidth, -O3 0.67; reports/performance.md).
        extra_flags=("-O3",),
    )


@functools.cache
def _graph_nodes_module() -> types.ModuleType:
    from graphsafe.native.build import build_extension

    return build_extension("graphsafe_graph_nodes", [GRAPH_NODES_SOURCE])


def graph_node_kinds(raw_graph: int) -> dict[str, int]:
    """Counts of node kinds of a cudaGraph_t / hipGraph_t handle, e.g. {"kernel": 8, "memset": 1}.

    The handle is CUDAGraph.raw_cuda_graph() of a graph made with keep_graph=True, before its reset().
    On CUDA the kinds come from the driver's cuGraphNodeGetType: the runtime's cudaGraphNodeGetType fails on
    batch-memop nodes (graph_nodes.hip explains why).
    """
    return dict(_graph_nodes_module().node_kinds(int(raw_graph)))


@functools.cache
def _launch_nodes_module() -> types.ModuleType:
    from graphsafe.native.build import build_extension

    return build_extension("graphsafe_launch_nodes", [LAUNCH_NODES_SOURCE])


def graph_launch_nodes(raw_graph: int) -> list[dict[str, Any]]:
    """Each node of a cudaGraph_t / hipGraph_t handle as a dict, in the order the graph API lists them:
    {"kind"} for every node, and for kernel nodes the kernel's name and handle, grid, block, dynamic shared
    memory, parameter layout (None where the runtime gives none), argument bytes, the pointers among them
    with the allocation each lies in, and "error" (what could not be read; launch_nodes.hip says more).
    The handle is the same as for graph_node_kinds."""
    return list(_launch_nodes_module().launch_nodes(int(raw_graph)))


__all__ = [
    "GPU_LIBRARY_SOURCES",
    "GRAPH_NODES_SOURCE",
    "LAUNCH_NODES_SOURCE",
    "NATIVE_DIR",
    "POISON_ALLOCATOR_SOURCE",
    "SCAN_HOST_SOURCE",
    "SCAN_SOURCE",
    "gpu_library",
    "graph_launch_nodes",
    "graph_node_kinds",
    "host_library",
]
