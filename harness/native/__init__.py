"""The harness's own native pieces and the build cache every native library of graphsafe goes through.

- ``build``: content-keyed compile-and-cache of pybind11 modules and shared libraries (nvcc, hipcc, g++);
  the public API kernel libraries build with.
- ``poison_alloc.hip``: the NaN-poisoning allocator of the gpu backend (a ``CUDAPluggableAllocator``).
- ``graph_nodes.hip`` / ``graph_node_kinds``: node kinds of a captured graph.
- ``gpu_runtime.h``: the HIP API subset those two sources use, mapped onto CUDA for nvcc.
"""

from __future__ import annotations

import functools
import pathlib
import types

NATIVE_DIR = pathlib.Path(__file__).resolve().parent
POISON_ALLOCATOR_SOURCE = NATIVE_DIR / "poison_alloc.hip"
GRAPH_NODES_SOURCE = NATIVE_DIR / "graph_nodes.hip"


@functools.cache
def _graph_nodes_module() -> types.ModuleType:
    from harness.native.build import build_extension

    return build_extension("graphsafe_graph_nodes", [GRAPH_NODES_SOURCE])


def graph_node_kinds(raw_graph: int) -> dict[str, int]:
    """Counts of node kinds of a cudaGraph_t / hipGraph_t handle, e.g. {"kernel": 8, "memset": 1}.

    The handle is CUDAGraph.raw_cuda_graph() of a graph made with keep_graph=True, before its reset().
    On CUDA the kinds come from the driver's cuGraphNodeGetType: the runtime's cudaGraphNodeGetType fails on
    batch-memop nodes (graph_nodes.hip explains why).
    """
    return dict(_graph_nodes_module().node_kinds(int(raw_graph)))


__all__ = ["GRAPH_NODES_SOURCE", "NATIVE_DIR", "POISON_ALLOCATOR_SOURCE", "graph_node_kinds"]
