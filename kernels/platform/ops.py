"""Torch custom ops over graph_platform.hip: the native pieces of the platform conformance cases.

Role: each op is one graph-runtime behaviour (copy nodes with pinned host memory, host-function nodes,
stream memops, memset nodes, per-graph parameter cells, faults and hangs), registered with
torch.library.custom_op for CUDA/HIP devices only, so the dispatcher and the graph backends see it as one op.
Positive ops do the right thing; `*_control` ops reproduce a known failure shape and must be caught.

State that a captured graph uses (pinned buffers, flags, parameter cells) is per graph: a fresh slot per
capture, one shared slot per size for eager calls. Sharing one slot between eager runs and a graph would make a
negative control pass or fail depending on whether eager ran before or after a replay. Slots are never freed.
"""

from __future__ import annotations

import os
import pathlib
import threading
import types

import torch

from graphsafe import CaptureError
from graphsafe.kernels.common import native
from graphsafe.toolkit import graph_node_kinds

FAMILY_DIR = pathlib.Path(__file__).resolve().parent
_LOCK = threading.Lock()
_EAGER_SLOTS: dict[tuple[int, int], int] = {}
_GRAPH_SLOTS: list[int] = []  # kept forever: a captured graph may replay them until the process ends
_RING: list[tuple[int, int]] = []  # the 16-cell ring of the live-graphs control
_RING_NEXT = [0]
RING_CAPACITY = (
    16  # the fixed capacity FreeToken issue #350's fix replaced ("derive capacity from configured sizes")
)
_KEPT: list[torch.Tensor] = []  # buffers a control deliberately keeps alive (leaks, frozen snapshots)


native.declare(FAMILY_DIR, "graph_platform", "gpu")


def lib() -> types.ModuleType:
    """Build (cached by content) and import graph_platform.hip for the visible device."""
    return native.load(FAMILY_DIR, "graph_platform", "gpu")


def _stream() -> int:
    return int(torch.cuda.current_stream().cuda_stream)


def _capturing() -> bool:
    return bool(torch.cuda.is_current_stream_capturing())


def _slot(n: int) -> int:
    """A fresh slot while capturing (owned by that graph), else the shared eager slot for this size."""
    with _LOCK:
        if _capturing():
            handle = int(lib().slot_create(n))
            _GRAPH_SLOTS.append(handle)
            return handle
        key = (torch.cuda.current_device(), n)
        if key not in _EAGER_SLOTS:
            _EAGER_SLOTS[key] = int(lib().slot_create(n))
        return _EAGER_SLOTS[key]


def _check_f32(name: str, x: torch.Tensor) -> None:
    if x.dtype != torch.float32 or not x.is_contiguous() or x.device.type != "cuda":
        raise TypeError(
            f"{name}: x must be a contiguous float32 cuda tensor, got {x.dtype}, "
            f"contiguous={x.is_contiguous()}, device={x.device}"
        )


_side_streams: dict[tuple[str, int], torch.cuda.Stream] = {}


def side_stream(role: str) -> torch.cuda.Stream:
    """A process-wide non-default stream per role and device (controls never share one with positives)."""
    key = (role, torch.cuda.current_device())
    if key not in _side_streams:
        _side_streams[key] = torch.cuda.Stream()
    return _side_streams[key]


def _raise_refusal(what: str, code: int) -> None:
    name, text = lib().error_name(code), lib().error_string(code)
    message = f"{what} returned {name}: {text}"
    if _capturing():
        # ROCm/TheRock#7877: hipLaunchHostFunc refused under capture. A refusal is a capture failure, never a
        # crash; raising CaptureError directly keeps the sync classifier from reading "capturing" as a sync.
        raise CaptureError(f"{message} (refused under stream capture; ROCm/TheRock#7877 shape)")
    raise RuntimeError(message)


# ----------------------------------------------------------------------------------------- copy nodes
@torch.library.custom_op("graphsafe_platform::copy_roundtrip", mutates_args=(), device_types="cuda")
def copy_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """x -> pinned host buffer (D2H node) -> fresh device tensor (H2D node)."""
    _check_f32("copy_roundtrip", x)
    y = torch.empty_like(x)
    lib().copy_roundtrip(_slot(x.numel()), x.data_ptr(), y.data_ptr(), x.numel(), _stream())
    return y


# ------------------------------------------------------------------------------------------ memset nodes
@torch.library.custom_op("graphsafe_platform::memset_add", mutates_args=(), device_types="cuda")
def memset_add(x: torch.Tensor) -> torch.Tensor:
    """y = memset(0) then y += 2x + 1: y is right only if the memset node runs on every replay."""
    _check_f32("memset_add", x)
    y = torch.empty_like(x)
    lib().memset_async(y.data_ptr(), 0, y.numel() * 4, _stream())
    y.add_(x * 2 + 1)
    return y


@torch.library.custom_op("graphsafe_platform::memset_add_control", mutates_args=(), device_types="cuda")
def memset_add_control(x: torch.Tensor) -> torch.Tensor:
    """Negative control: under capture the memset goes to a non-capturing stream, so it is not recorded."""
    _check_f32("memset_add_control", x)
    y = torch.empty_like(x)
    if _capturing():
        s = side_stream("memset_control")
        lib().memset_async(y.data_ptr(), 0, y.numel() * 4, int(s.cuda_stream))
    else:
        lib().memset_async(y.data_ptr(), 0, y.numel() * 4, _stream())
    y.add_(x * 2 + 1)
    return y


# ---------------------------------------------------------------------------------------- host functions
@torch.library.custom_op("graphsafe_platform::host_affine", mutates_args=(), device_types="cuda")
def host_affine(x: torch.Tensor) -> torch.Tensor:
    """D2H, host function 2h+1 (runs at execution: a HOST node), H2D."""
    _check_f32("host_affine", x)
    y = torch.empty_like(x)
    rc = lib().host_affine(_slot(x.numel()), x.data_ptr(), y.data_ptr(), x.numel(), _stream(), False)
    if rc:
        _raise_refusal("hipLaunchHostFunc", rc)
    return y


@torch.library.custom_op("graphsafe_platform::host_affine_refused", mutates_args=(), device_types="cuda")
def host_affine_refused(x: torch.Tensor) -> torch.Tensor:
    """Control for the refusal path: under capture the launcher reports hipErrorNotSupported, as ROCm releases
    with TheRock#7877 do; eagerly it launches normally. Must give capture_error, not crash."""
    _check_f32("host_affine_refused", x)
    y = torch.empty_like(x)
    refuse = _capturing()
    rc = lib().host_affine(_slot(x.numel()), x.data_ptr(), y.data_ptr(), x.numel(), _stream(), refuse)
    if rc:
        _raise_refusal("hipLaunchHostFunc", rc)
    return y


@torch.library.custom_op("graphsafe_platform::host_affine_at_enqueue", mutates_args=(), device_types="cuda")
def host_affine_at_enqueue(x: torch.Tensor) -> torch.Tensor:
    """Negative control: CPU work done at enqueue time (eagerly after a sync) instead of in a host node."""
    _check_f32("host_affine_at_enqueue", x)
    y = torch.empty_like(x)
    lib().host_affine_at_enqueue(
        _slot(x.numel()), x.data_ptr(), y.data_ptr(), x.numel(), _stream(), _capturing()
    )
    return y


# ------------------------------------------------------------------------------------------------ memops
@torch.library.custom_op("graphsafe_platform::memop_affine", mutates_args=(), device_types="cuda")
def memop_affine(x: torch.Tensor) -> torch.Tensor:
    """write flag=1, wait flag==1, y = 2x + flag, write flag=0; all on the current stream."""
    _check_f32("memop_affine", x)
    y = torch.empty_like(x)
    s = _stream()
    rc = lib().memop_affine(_slot(1), x.data_ptr(), y.data_ptr(), x.numel(), s, s)
    if rc:
        _raise_refusal("hipStreamWriteValue32/WaitValue32", rc)
    return y


@torch.library.custom_op("graphsafe_platform::memop_affine_control", mutates_args=(), device_types="cuda")
def memop_affine_control(x: torch.Tensor) -> torch.Tensor:
    """Negative control (the ROCm failure shape): under capture the memops go to a non-capturing stream, so
    they execute during capture and are not recorded; replay reads flag 0."""
    _check_f32("memop_affine_control", x)
    y = torch.empty_like(x)
    s = _stream()
    m = int(side_stream("memop_control").cuda_stream) if _capturing() else s
    rc = lib().memop_affine(_slot(1), x.data_ptr(), y.data_ptr(), x.numel(), s, m)
    if rc:
        _raise_refusal("hipStreamWriteValue32/WaitValue32", rc)
    return y


def memop_capture_probe(n: int = 1024) -> dict[str, object]:
    """Capture memop_affine once on a private stream and report what the runtime did.

    Returns {"node_kinds": {...}, "flag_after_capture": int, "flag_after_replay": int, "ok": bool}. A runtime
    that records memops shows batch_mem_op nodes and leaves the slot's flag at its initial 0 during capture;
    one that executes them during capture may show no batch_mem_op nodes (ROCm before rocm-systems#8911).
    If the node kinds cannot be read, "node_kinds" is {} and "node_kinds_error" says why.

    NOTE on the graph handle: keep_graph=True, or capture_end instantiates and destroys the cudaGraph_t at once
    (torch 2.11 aten/src/ATen/cuda/CUDAGraph.cpp capture_end: `if (!keep_graph_) { instantiate();
    cudaGraphDestroy(graph_); }`); with it, raw_cuda_graph() stays valid until reset() and replay()
    instantiates on first use (CUDAGraph::replay). No MemPool here: the capture's own private pool is
    released by reset(), which never empties caches, so this is safe next to any pool context.
    """
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    memop_affine(x)  # warm-up: builds the module, initializes the eager slot
    torch.cuda.synchronize()
    before = len(_GRAPH_SLOTS)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            g.capture_begin()
            try:
                y = memop_affine(x)
            finally:
                g.capture_end()  # always leave capture mode, also when the op raised
        torch.cuda.current_stream().wait_stream(stream)
        slot = _GRAPH_SLOTS[before]
        result: dict[str, object] = {}
        try:
            result["node_kinds"] = graph_node_kinds(g.raw_cuda_graph())
        except RuntimeError as exc:
            result["node_kinds"], result["node_kinds_error"] = {}, str(exc)
        result["flag_after_capture"] = int(lib().slot_flag(slot))
        g.replay()
        torch.cuda.synchronize()
        result["ok"] = bool(torch.equal(y, x * 2 + 1))
        result["flag_after_replay"] = int(lib().slot_flag(slot))
        return result
    finally:
        g.reset()


# ------------------------------------------------------------------------ per-graph parameter cells
def _new_cell() -> tuple[int, int]:
    host, dev = lib().cell_create()
    return int(host), int(dev)


@torch.library.custom_op("graphsafe_platform::affine_cell", mutates_args=(), device_types="cuda")
def affine_cell(x: torch.Tensor) -> torch.Tensor:
    """y = 2*src + 1 where the kernel reads src's address from a parameter cell; one fresh cell per call
    (so per captured graph): the executor-owned per-graph parameter storage of FreeToken issue #350's fix."""
    _check_f32("affine_cell", x)
    y = torch.empty_like(x)
    host, dev = _new_cell()
    lib().cell_set(host, x.data_ptr())
    lib().affine_indirect(dev, y.data_ptr(), x.numel(), _stream())
    return y


@torch.library.custom_op("graphsafe_platform::affine_cell_ring16", mutates_args=(), device_types="cuda")
def affine_cell_ring16(x: torch.Tensor) -> torch.Tensor:
    """Negative control: captured graphs take cells from a fixed ring of 16, so the 17th live graph overwrites
    the first graph's source address (the fixed-capacity bug). Eager calls use a fresh cell."""
    _check_f32("affine_cell_ring16", x)
    y = torch.empty_like(x)
    if _capturing():
        with _LOCK:
            while len(_RING) < RING_CAPACITY:
                _RING.append(_new_cell())
            host, dev = _RING[_RING_NEXT[0] % RING_CAPACITY]
            _RING_NEXT[0] += 1
    else:
        host, dev = _new_cell()
    lib().cell_set(host, x.data_ptr())
    lib().affine_indirect(dev, y.data_ptr(), x.numel(), _stream())
    return y


# --------------------------------------------------------------------------------------- rebuild leak
@torch.library.custom_op("graphsafe_platform::affine_leaky", mutates_args=(), device_types="cuda")
def affine_leaky(x: torch.Tensor) -> torch.Tensor:
    """Negative control for rebuilds: every capture keeps an 8 MiB graph-pool scratch buffer alive forever,
    so its graph's pool can never be freed (100 rebuilds: ~800 MiB, past the protocol's 64 MiB bound)."""
    _check_f32("affine_leaky", x)
    if _capturing():
        scratch = torch.empty(2 << 20, device=x.device, dtype=torch.float32)  # 8 MiB
        scratch.zero_()
        _KEPT.append(scratch)
    return x * 2 + 1


# ---------------------------------------------------------------------------------- isolation controls
@torch.library.custom_op("graphsafe_platform::illegal_address", mutates_args=(), device_types="cuda")
def illegal_address(x: torch.Tensor) -> torch.Tensor:
    """Launches a kernel that stores to address 0x10: a sticky illegal-address fault at the next sync."""
    lib().illegal_address(_stream())
    return x * 2 + 1


@torch.library.custom_op("graphsafe_platform::spin_forever", mutates_args=(), device_types="cuda")
def spin_forever(x: torch.Tensor) -> torch.Tensor:
    """Launches a kernel that spins on a flag nobody sets. Its watchdog releases it after
    GRAPHSAFE_SPIN_LIMIT_S seconds (default 600, far past any per-case deadline)."""
    limit = float(os.environ.get("GRAPHSAFE_SPIN_LIMIT_S", "600"))
    flag = torch.zeros(2, dtype=torch.int32, device=x.device)
    lib().spin_until_flag(flag.data_ptr(), limit, flag.data_ptr() + 4, _stream())
    return x * 2 + 1


@torch.library.custom_op("graphsafe_platform::hard_abort", mutates_args=(), device_types="cuda")
def hard_abort(x: torch.Tensor) -> torch.Tensor:
    """Calls std::abort() in native code: the process dies with SIGABRT."""
    lib().hard_abort()
    return x


for _op in (
    copy_roundtrip,
    memset_add,
    memset_add_control,
    host_affine,
    host_affine_refused,
    host_affine_at_enqueue,
    memop_affine,
    memop_affine_control,
    affine_cell,
    affine_cell_ring16,
    affine_leaky,
    illegal_address,
    spin_forever,
    hard_abort,
):
    _op.register_fake(lambda x: torch.empty_like(x))
