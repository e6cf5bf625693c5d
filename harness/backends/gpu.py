"""The `gpu` graph backend: real CUDA graphs (HIP graphs on ROCm builds of torch) through torch.cuda.CUDAGraph.

Role: warm up on a side stream, capture into a private memory pool per graph, replay; turn capture failures
into CaptureSyncError / CaptureError with the runtime's message; poison fresh allocations with the
NaN-poisoning allocator (harness/native/poison_alloc.hip) wrapped in torch.cuda.MemPool.

NOTE on pools: every graph gets its own MemPool built on the poisoning allocator, passed as `pool=` to the
capture. Graphs that share a pool reuse each other's freed blocks, which is only safe when they replay in
capture order (torch's CUDA graphs notes, "Sharing memory across captures"); the live-graph stress replays
them interleaved. Graph segments are allocated during capture with the capturing
stream current, so the allocator's memset is recorded as a memset node and re-poisons them on every replay.

NOTE on the eager pool: torch's allocator routes an allocation to the first entry of its `captures_underway`
list whose filter matches (CUDACachingAllocator get_pool), and `use_mem_pool` registers one there whose filter
matches the whole thread (torch/cuda/memory.py use_mem_pool -> _cuda_beginAllocateCurrentThreadToPool). An
eager pool left active during capture would swallow the graph's allocations, so `capture` suspends it.

NOTE on pool lifetime (torch 2.11, measured on an H200: "captures_underway.empty() INTERNAL ASSERT FAILED at
CUDACachingAllocator.cpp:3662 ... MemPool::~MemPool"). The chain, from torch's source:
  * MemPool::~MemPool (aten/src/ATen/cuda/MemPool.cpp) calls releasePool(id) and then emptyCache(id).
  * releasePool decrements the pool's use_count; at 0 the pool goes to graph_pools_freeable. use_count is 1 for
    the MemPool object (createOrIncrefPool), +1 per open use_mem_pool context or capture (beginAllocateToPool
    -> create_or_incref_pool), -1 when the context exits (use_mem_pool calls _cuda_releasePool) or the graph
    is reset (CUDAGraph::reset -> releasePool, only if capture_end completed).
  * emptyCache(id) -> release_cached_blocks(ctx, id): for a freeable pool with that id it calls
    synchronize_and_free_events, which starts with TORCH_INTERNAL_ASSERT(captures_underway.empty()).
  * captures_underway holds one entry per open use_mem_pool context and per capture, on every thread.
So destroying the last reference to a MemPool while any pool context or capture is open aborts the process
(an exception thrown from a destructor). Releasing graph pools inside `poisoned_allocation`, where the eager
pool's use_mem_pool context is open, kills every case that gets as far as a replay. The rules here:
  * Every MemPool this module creates is held in `_LIFE` from birth to death; nothing else ever drops the
    last reference. A released pool is destroyed only by `_Lifetime.drain`, which runs only at a safe point:
    no eager context or capture of this module open (a counter), the current stream not capturing, no
    device fault seen, and nobody else holding the pool (its refcount; a traceback frame, say).
  * Explicit releases inside a poisoned scope (`GpuCapturedGraph.release`, the protocol's rebuild loop) close
    the eager context for the moment of the drain and reopen it, so memory comes back at once (the rebuild
    stress bounds device-memory growth).
  * `__del__` never destroys anything: it hands the graph and pool to `_LIFE` (GC may run mid-capture).
  * A capture whose capture_end failed keeps its graph and pool forever: CUDAGraph::capture_end throws at
    cudaStreamEndCapture before endAllocateToPool (aten/src/ATen/cuda/CUDAGraph.cpp), and the host
    allocator's begin_allocate_to_pool filter keeps a pointer to the CUDAGraph that nothing removes.
  * After a device fault nothing is destroyed again (emptyCache would throw from a destructor), and at exit
    every pool still alive is leaked on purpose (Py_IncRef): the driver frees the memory with the process.

NOTE on garbage collection: a capture runs with Python's cyclic collector paused (`_CollectorPause`). A
collection inside the capture window runs the destructors of whatever garbage the process holds at that
moment (a graph, a pool or a stream-ordered free left by earlier work), and a destructor that makes an
unsafe call (a device synchronize, cudaFree, ~MemPool's emptyCache) invalidates the capture: the case would
then get capture_sync for a sync its op never made. Reference counting still frees the op's own temporaries.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from graphsafe.backends.base import CapturedGraph, GraphBackend, flatten_tensors
from graphsafe.errors import CaptureError, CaptureSyncError, FallbackEager
from graphsafe.native import gpu_library, graph_launch_nodes, graph_node_kinds
from graphsafe.poison import deterministic_fill, fill_op_factories

# Runtime and torch messages that mean "a host sync or data-dependent shape under capture". Sources:
# cudaGetErrorString for cudaErrorStreamCaptureUnsupported / ...Invalidated / ...Implicit (CUDA 13
# driver_types.h), the HIP equivalents (aiter#5831), and torch's sync debug mode ("called a synchronizing
# CUDA operation", c10/cuda/CUDAFunctions.cpp warn_or_error_on_sync).
_SYNC_PATTERNS = re.compile(
    r"synchronizing (CUDA|HIP) operation"
    r"|(cuda|hip)ErrorStreamCapture(Unsupported|Invalidated|Implicit)"
    r"|operation not permitted when stream is capturing"
    r"|operation failed due to a previous error during capture"
    r"|would make the legacy stream depend on a capturing blocking stream"
    # torch's copy_ refuses a device<->pageable-host copy under capture (aten/src/ATen/native/cuda/Copy.cu):
    # the op needs a device value on the host (torch.bincount's length, torch._grouped_mm's fp32 offsets).
    r"|Cannot copy between CPU and CUDA tensors during CUDA graph capture"
    # Event.query()/synchronize() on an event recorded under capture (cudaErrorCapturedEvent, seen on the
    # H200 with CUDA 13): the host asks how far the device got.
    r"|operation not permitted on an event last recorded in a capturing stream|cudaErrorCapturedEvent"
    r"|data-dependent|dynamic shape",
    re.IGNORECASE,
)
# torch >= 2.8 raises AcceleratorError for asynchronous device errors (illegal address, device-side assert).
_DEVICE_FAULTS: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "AcceleratorError", None),) if isinstance(t, type)
)


class _CollectorPause:
    """The cyclic garbage collector paused for capture windows (module note on garbage collection): nested or
    concurrent captures share one pause, and the collector's state before the first comes back after the last."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = 0  # capture windows open now, all threads
        self.was_enabled = False  # the collector's state when the first of them opened

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        with self.lock:
            if self.open == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.open += 1
        try:
            yield
        finally:
            with self.lock:
                self.open -= 1
                if self.open == 0 and self.was_enabled:
                    gc.enable()


_COLLECTOR = _CollectorPause()

_ALLOCATOR_LOCK = threading.Lock()
_ALLOCATOR: dict[str, Any] = {}  # "lib", "allocator", "ctypes", "error": loaded once per process


class _Lifetime:
    """Process-wide owner of every MemPool and released CUDAGraph of this module (module note on lifetime)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.open = 0  # eager use_mem_pool contexts and captures of this module open now, all threads
        self.pools: dict[int, Any] = {}  # id(pool) -> MemPool, from creation until destroyed by drain()
        self.retired: list[int] = []  # keys of released pools, destroyed at the next safe point
        self.graphs: list[Any] = []  # released CUDAGraphs, reset and dropped at the next safe point
        self.kept: list[Any] = []  # never destroyed (failed capture_end); see keep_forever
        self.frees_forbidden = ""  # why nothing may be destroyed any more in this process ("": allowed)

    def new_pool(self, allocator: Any) -> Any:
        pool = torch.cuda.MemPool(allocator.allocator())
        with self.lock:
            self.pools[id(pool)] = pool
        return pool

    def retire(self, graph: Any, pool: Any) -> None:
        """Hand a released graph and/or pool over; never destroys anything (safe from __del__, mid-capture)."""
        with self.lock:
            if graph is not None:
                self.graphs.append(graph)
            # A pool shared by several graphs (GpuBackend.shared_pool) is retired once per graph: one entry.
            if pool is not None and id(pool) in self.pools and id(pool) not in self.retired:
                self.retired.append(id(pool))

    def keep_forever(self, graph: Any, pool: Any) -> None:
        with self.lock:
            for obj in (graph, pool):
                if obj is not None:
                    self.kept.append(obj)
                    _leak(obj)
            if pool is not None:
                self.pools.pop(id(pool), None)

    def forbid_frees(self, why: str) -> None:
        with self.lock:
            if not self.frees_forbidden:
                self.frees_forbidden = why

    def enter(self) -> None:
        """Count a pool context or capture as open until `leave`: drain() does nothing while any is."""
        with self.lock:
            self.open += 1

    def leave(self) -> None:
        with self.lock:
            self.open -= 1

    @contextlib.contextmanager
    def opened(self) -> Iterator[None]:
        """`enter` for the scope, `leave` after it."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def pending(self) -> bool:
        return bool(self.retired or self.graphs)

    def drain(self, *, synchronized: bool = False) -> None:
        """Destroy released graphs and pools, if this is a safe point (module note on pool lifetime).
        `synchronized`: the caller has just synchronized the device without an error, and launched nothing
        since: the wait below would find nothing new."""
        with self.lock:
            if self.open or self.frees_forbidden or not self.pending():
                return
            try:
                if torch.cuda.is_current_stream_capturing():  # someone else's capture: captures_underway busy
                    return
                # ~MemPool's emptyCache synchronizes the pool's events with C10_CUDA_CHECK inside a destructor:
                # a sticky device error found there would terminate the process. Find it here instead.
                if not synchronized:
                    torch.cuda.synchronize()
            except BaseException as exc:
                self.forbid_frees(f"device unusable before freeing pools: {type(exc).__name__}: {exc}")
                return
            graphs, self.graphs = self.graphs, []
            while graphs:
                graph = graphs.pop()
                with contextlib.suppress(Exception):  # reset() twice is a no-op (CUDAGraph::reset)
                    graph.reset()
                del graph
            retired, self.retired = self.retired, []
            for key in retired:
                pool = self.pools.get(key)
                if pool is None:
                    continue
                # Holders now: self.pools, `pool`, getrefcount's argument. More means someone (a traceback
                # frame, a test) still holds it: their last decref could land mid-scope, so wait for it.
                if sys.getrefcount(pool) > 3:
                    self.retired.append(key)
                    continue
                del self.pools[key]
                del pool  # ~MemPool: releasePool, then emptyCache(id) with no capture underway

    def at_exit(self) -> None:
        """Leak what is still alive: interpreter teardown order is arbitrary and the driver frees it anyway."""
        with self.lock:
            for obj in [*self.pools.values(), *self.graphs]:
                _leak(obj)


def _leak(obj: Any) -> None:
    """One reference nobody gives back, so the object's destructor never runs (not even at interpreter exit)."""
    with contextlib.suppress(Exception):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


_LIFE = _Lifetime()
atexit.register(_LIFE.at_exit)


def lifetime_state() -> dict[str, Any]:
    """Diagnostics for tests: open contexts, pools alive, releases not yet destroyed."""
    with _LIFE.lock:
        return {
            "open": _LIFE.open,
            "pools_alive": len(_LIFE.pools),
            "pools_pending": len(_LIFE.retired),
            "graphs_pending": len(_LIFE.graphs),
            "kept_forever": len(_LIFE.kept),
            "frees_forbidden": _LIFE.frees_forbidden,
        }


# Stream-capture errors (cudaErrorStreamCaptureUnjoined, ...Invalidated, ...Unsupported, ...Isolation) also
# arrive as torch.AcceleratorError, but they are not sticky: the context stays usable after the capture ends.
# Seen on the H200 (torch 2.11, CUDA 13): an unjoined fork raised "capturing stream has unjoined work" from
# capture_end, and treating it as a fault would forbid every later pool free in the process.
_CAPTURE_STATE_ERROR = re.compile(
    r"StreamCapture|capturing stream|stream is capturing|capture", re.IGNORECASE
)


def _is_device_fault(exc: BaseException | None) -> bool:
    if exc is None or not _DEVICE_FAULTS or not isinstance(exc, _DEVICE_FAULTS):
        return False
    return not _CAPTURE_STATE_ERROR.search(str(exc))


def classify_capture_failure(exc: BaseException) -> CaptureError:
    """Map an exception raised while capturing to CaptureSyncError or CaptureError, keeping the message."""
    if isinstance(exc, CaptureError):
        return exc
    message = f"{type(exc).__name__}: {exc}"
    if _SYNC_PATTERNS.search(message):
        return CaptureSyncError(message)
    return CaptureError(message)


def flatten_outputs(result: Any) -> tuple[torch.Tensor, ...]:
    """The op's outputs as a flat tuple (graphsafe.backends.base.flatten_tensors); anything else is a
    capture error."""
    try:
        return flatten_tensors(result)
    except TypeError as exc:
        raise CaptureError(str(exc)) from exc


def _load_poison_allocator() -> dict[str, Any]:
    """The poisoning allocator, once per process: {"allocator": CUDAPluggableAllocator, "ctypes": CDLL} or
    {"error": why} where unavailable (harness/native gpu_library())."""
    with _ALLOCATOR_LOCK:
        if _ALLOCATOR:
            return _ALLOCATOR
        try:
            if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
                raise RuntimeError(f"torch {torch.__version__} has no torch.cuda.MemPool/use_mem_pool")
            loaded = gpu_library()
            if "error" in loaded:
                raise RuntimeError(loaded["error"])
            allocator = torch.cuda.memory.CUDAPluggableAllocator(
                str(loaded["path"]), "graphsafe_poison_malloc", "graphsafe_poison_free"
            )
            _ALLOCATOR.update(allocator=allocator, ctypes=loaded["lib"], path=str(loaded["path"]))
        except Exception as exc:  # no compiler, old torch: fill_uninitialized_memory still poisons empty*
            _ALLOCATOR.update(error=f"{type(exc).__name__}: {exc}")
        return _ALLOCATOR


def _new_pool() -> Any:
    """A MemPool on the poisoning allocator (owned by _LIFE), or None where that is unavailable."""
    loaded = _load_poison_allocator()
    if "allocator" in loaded:
        return _LIFE.new_pool(loaded["allocator"])
    return None


def _end_allocate_to_pool(device: int, pool_id: Any) -> None:
    """Remove the capture's captures_underway entry that CUDAGraph::capture_end (or capture_begin) left behind
    when it threw before endAllocateToPool; without this every later pool destruction asserts."""
    fn = getattr(torch._C, "_cuda_endAllocateToPool", None)  # what use_mem_pool's exit calls (memory.py)
    if fn is None:
        _LIFE.forbid_frees("torch has no _cuda_endAllocateToPool: a failed capture may stay underway")
        return
    with contextlib.suppress(Exception):  # already ended: "endAllocatePool: not currently recording"
        fn(device, pool_id)


@contextlib.contextmanager
def _sync_debug_error() -> Iterator[None]:
    """torch.cuda.set_sync_debug_mode("error") for the scope: a host sync raises before it reaches the runtime,
    so the capture is not invalidated and the process stays usable. Restored even when the op raises."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class GpuCapturedGraph(CapturedGraph):
    def __init__(
        self,
        owner: GpuBackend,
        graph: Any,
        pool: Any,
        outputs: tuple[torch.Tensor, ...],
        inspectable: bool,
    ) -> None:
        self._owner = owner
        self._graph: Any = graph
        self._pool: Any = pool
        self.outputs = outputs
        self._inspectable = inspectable
        self._kinds: dict[str, int] | None = None

    def replay(self) -> None:
        if self._graph is None:
            raise RuntimeError("replay() after release()")
        self._graph.replay()

    def node_kinds(self) -> dict[str, int] | None:
        """Read from the kept cudaGraph_t: CUDAGraph(keep_graph=True) keeps graph_ after capture_end and
        raw_cuda_graph() returns it until reset() (CUDAGraph.cpp capture_end / raw_cuda_graph / reset)."""
        if self._kinds is None and self._inspectable and self._graph is not None:
            self._kinds = graph_node_kinds(self._graph.raw_cuda_graph())
        return self._kinds

    def launch_nodes(self) -> list[dict[str, Any]] | None:
        """Each node's launch (graphsafe.native.graph_launch_nodes), read from the kept cudaGraph_t as
        node_kinds is; None where this torch cannot keep the graph."""
        if not self._inspectable or self._graph is None:
            return None
        return graph_launch_nodes(self._graph.raw_cuda_graph())

    def release(self, *, reclaim_now: bool = True) -> None:
        graph, pool = self._graph, self._pool
        if graph is None and pool is None:
            return
        self._graph = self._pool = None
        self.outputs = ()
        _LIFE.retire(graph, pool)
        del graph, pool  # _LIFE holds the only references now
        if reclaim_now:
            self._owner._reclaim()

    def __del__(self) -> None:
        # Never destroy here: GC can run mid-capture or inside a pool context (module note on pool lifetime).
        with contextlib.suppress(Exception):
            graph, pool = self._graph, self._pool
            self._graph = self._pool = None
            _LIFE.retire(graph, pool)


class GpuBackend(GraphBackend):
    name = "gpu"

    def __init__(self, device: torch.device | str | int | None = None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("backend 'gpu' needs torch.cuda.is_available(); use backend 'cpu' or 'auto'")
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        )
        if self.device.type != "cuda":
            raise ValueError(f"GpuBackend device must be a cuda device, got {self.device}")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(self.device)
        self._side_stream = torch.cuda.Stream(self.device)
        self._capture_stream = torch.cuda.Stream(self.device)
        self._eager_pool: Any = None
        self._eager_ctx: Any = None  # the eager pool's id while its allocation context is open (_open_eager)
        self._shared: tuple[Any, Any] | None = None  # (pool, pool id) inside shared_pool(), else None
        self._spare_events: list[Any] = []  # timing events whose times were read (`mark`, `elapsed_ms`)
        self._streams: dict[int, Any] = {}  # stream id -> torch.cuda.Stream, for `mark`

    # ------------------------------------------------------------------------------------- poisoning
    @contextlib.contextmanager
    def poisoned_allocation(self, pattern: int) -> Iterator[None]:
        if pattern not in (0xFF, 0x7F):
            raise ValueError(f"pattern must be 0xFF or 0x7F, got {pattern!r}")
        if self._eager_pool is not None:
            raise RuntimeError("poisoned_allocation scopes of one GpuBackend do not nest")
        loaded = _load_poison_allocator()
        if "ctypes" in loaded:
            loaded["ctypes"].graphsafe_set_pattern(pattern)
        _LIFE.drain()  # what earlier scopes released, before this scope opens a pool context
        # fill_uninitialized_memory writes NaN into every empty* result after the allocator's byte fill, so
        # without the op-call fill an empty output would hold NaN under both patterns, and an op that masks
        # NaN (fmax, nan_to_num, a where on isnan) would hide an unwritten buffer under 0x7F as well
        # (cases/trust_controls.py, control_unwritten_hidden_by_fmax). Empties made inside C++ ops keep NaN.
        with deterministic_fill(), fill_op_factories(pattern):
            # A fresh pool per scope: its segments are new, so they carry this scope's byte pattern.
            self._eager_pool = _new_pool()
            self._open_eager()
            try:
                yield
            except BaseException as exc:
                self._close_scope(exc)
                raise
            fault = self._close_scope(None)
            if fault is not None:
                raise fault

    def _close_scope(self, body_error: BaseException | None) -> BaseException | None:
        """Leave the scope without raising: synchronize, close the eager context, retire the eager pool, drain.
        Returns the synchronize error (a device fault) for the caller to raise when the body itself did not."""
        fault: BaseException | None = None
        if _is_device_fault(body_error):
            _LIFE.forbid_frees(f"device fault: {body_error}")
        try:
            self.synchronize()
        except BaseException as exc:  # the context is gone: emptyCache would throw from ~MemPool
            _LIFE.forbid_frees(f"synchronize failed at scope exit: {type(exc).__name__}: {exc}")
            fault = exc
        try:
            self._close_eager()  # bookkeeping only (endAllocateToPool + releasePool): safe after a fault
        except BaseException as exc:
            _LIFE.forbid_frees(f"closing the eager pool context failed: {type(exc).__name__}: {exc}")
            fault = fault or exc
        pool, self._eager_pool = self._eager_pool, None
        _LIFE.retire(None, pool)
        del pool
        try:
            # The synchronize above covered this device; pools of another device would need their own wait.
            _LIFE.drain(synchronized=fault is None and torch._C._cuda_getDevice() == self.device.index)
        except BaseException as exc:
            _LIFE.forbid_frees(f"draining pools failed: {type(exc).__name__}: {exc}")
            fault = fault or exc
        return fault

    # The eager pool's context is what torch.cuda.use_mem_pool does on entry and exit (torch/cuda/memory.py:
    # beginAllocateCurrentThreadToPool; endAllocateToPool and releasePool), made as the three C calls it wraps:
    # a check opens and closes it 11 times (around captures and kept allocations), and the generator-based
    # context manager with its device lookup cost several times the C calls (their time per check:
    # reports/performance.md, `check_profile`).
    def _open_eager(self) -> None:
        if self._eager_pool is None or self._eager_ctx is not None:
            return
        pool_id = self._eager_pool.id
        _LIFE.enter()  # drain() waits while the context is open
        try:
            torch._C._cuda_beginAllocateCurrentThreadToPool(self.device.index, pool_id)
        except BaseException:
            _LIFE.leave()
            raise
        self._eager_ctx = pool_id

    def _close_eager(self) -> None:
        if self._eager_ctx is None:
            return
        pool_id, self._eager_ctx = self._eager_ctx, None
        try:
            torch._C._cuda_endAllocateToPool(self.device.index, pool_id)
            torch._C._cuda_releasePool(self.device.index, pool_id)
        finally:
            _LIFE.leave()

    @contextlib.contextmanager
    def _eager_suspended(self) -> Iterator[None]:
        was_open = self._eager_ctx is not None
        self._close_eager()
        try:
            yield
        finally:
            if was_open:
                self._open_eager()

    def kept_allocation(self) -> contextlib.AbstractContextManager[None]:
        """torch's ordinary pool for the scope: the eager pool is destroyed when its poisoned scope ends
        (`_close_scope`), so what the next pattern still reads must not live in it."""
        return self._eager_suspended()

    def _reclaim(self) -> None:
        """Destroy released graphs and pools now, closing this backend's eager context for that moment."""
        if not _LIFE.pending():
            return
        with self._eager_suspended():
            _LIFE.drain()

    # --------------------------------------------------------------------------------------- capture
    def capture(self, fn: Callable[[], Any], *, warmup: int = 1) -> CapturedGraph:
        current = torch.cuda.current_stream(self.device)
        # Warm-up on a side stream (torch's documented recipe: torch/cuda/graphs.py make_graphed_callables and
        # the CUDA graphs notes): lazy init, cuBLAS handles and allocator state settle outside the capture.
        # Exceptions here are the op's own and propagate unchanged.
        if warmup > 0:
            self._side_stream.wait_stream(current)
            with torch.cuda.stream(self._side_stream):
                for _ in range(warmup):
                    fn()
            current.wait_stream(self._side_stream)
        self.synchronize()
        self._reclaim()  # graphs released or collected since the last capture, before this one grows memory

        if self._shared is not None:
            pool, pool_id = self._shared
        else:
            pool = _new_pool()
            pool_id = pool.id if pool is not None else torch.cuda.graph_pool_handle()
        graph, inspectable = self._new_graph()
        with self._eager_suspended(), _LIFE.opened(), _COLLECTOR.during():
            result, failure, ended = self._capture_into(graph, pool_id, fn)
        if failure is None and inspectable:
            try:
                graph.instantiate()  # keep_graph=True: replay() would instantiate lazily (CUDAGraph::replay)
            except BaseException as exc:
                failure = exc
        if failure is None:
            try:
                outputs = flatten_outputs(result)
            except CaptureError as exc:
                failure = exc
        if failure is None:
            return GpuCapturedGraph(self, graph, pool, outputs, inspectable)

        result = None
        if _is_device_fault(failure):
            _LIFE.forbid_frees(f"device fault during capture: {failure}")
        if ended:
            # capture_end completed: endAllocateToPool ran; reset() releases the capture's pool use
            # (CUDAGraph::reset -> releasePool), so graph and pool go like a released graph's.
            with contextlib.suppress(Exception):
                graph.reset()
            _LIFE.retire(graph, pool)
        else:
            _LIFE.keep_forever(graph, pool)
        del graph, pool  # no frame of a traceback may hold the last reference to a pool
        self._reclaim()
        if isinstance(failure, FallbackEager | KeyboardInterrupt | SystemExit) or _is_device_fault(failure):
            raise failure
        classified = classify_capture_failure(failure)
        if classified is failure:  # `raise e from e` would make e its own cause: a chain with no end
            raise failure
        raise classified from failure

    @contextlib.contextmanager
    def shared_pool(self) -> Iterator[None]:
        """Captures in this scope share one pool (GraphBackend.shared_pool). Each graph still retires the pool
        when released; _LIFE destroys it once no graph and no scope holds it (its refcount)."""
        if self._shared is not None:
            raise RuntimeError("shared_pool scopes of one GpuBackend do not nest")
        pool = _new_pool()
        self._shared = (pool, pool.id if pool is not None else torch.cuda.graph_pool_handle())
        try:
            yield
        finally:
            self._shared = None
            _LIFE.retire(None, pool)
            del pool

    @staticmethod
    def _new_graph() -> tuple[Any, bool]:
        """keep_graph=True keeps the cudaGraph_t for node_kinds (torch >= 2.8); older torch cannot inspect."""
        try:
            return torch.cuda.CUDAGraph(keep_graph=True), True
        except TypeError:
            return torch.cuda.CUDAGraph(), False

    def _capture_into(
        self, graph: Any, pool_id: Any, fn: Callable[[], Any]
    ) -> tuple[Any, BaseException | None, bool]:
        """Capture one call of fn. Returns (result, failure, ended): ended is False when capture_begin or
        capture_end threw. Never raises, and always leaves the stream out of capture mode where torch can."""
        failure: BaseException | None = None
        result: Any = None
        ended = False
        device = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self._capture_stream.wait_stream(torch.cuda.current_stream(self.device))
        still_capturing = False
        with torch.cuda.stream(self._capture_stream):
            try:
                # beginAllocateToPool runs before cudaStreamBeginCapture (CUDAGraph::capture_begin): a failed
                # begin can leave the pool registered as capturing.
                graph.capture_begin(pool=pool_id)
            except BaseException as exc:
                _end_allocate_to_pool(device, pool_id)
                self._generators_out_of_capture()
                return None, exc, False
            try:
                with _sync_debug_error():
                    result = fn()
            except BaseException as exc:
                failure = exc
            try:
                graph.capture_end()  # ends capture even when the capture was invalidated (then it raises)
                ended = True
            except BaseException as exc:
                # cudaStreamEndCapture threw before endAllocateToPool (CUDAGraph::capture_end).
                _end_allocate_to_pool(device, pool_id)
                self._generators_out_of_capture()
                failure = failure or exc
                still_capturing = torch.cuda.is_current_stream_capturing()
        if still_capturing:
            _LIFE.forbid_frees("a failed capture left its stream capturing")
            failure = CaptureError(f"capture could not be ended: {type(failure).__name__}: {failure}")
        else:
            torch.cuda.current_stream(self.device).wait_stream(self._capture_stream)
        return result, failure, ended

    def _generators_out_of_capture(self) -> None:
        """After a capture that did not end: give the device's default generator (and the op's own CUDA
        generators) a state outside capture, with the same seed and offset.

        torch 2.11's CUDAGraph::capture_begin registers the default generator and sets its state to capturing
        (CUDAGeneratorState::capture_prologue); only capture_end clears that, after cudaStreamEndCapture
        returns. When that call throws (an unjoined fork, an invalidated capture) the flag stays set, and every
        later eager random op in the process fails with "Offset increment outside graph capture encountered
        unexpectedly": on the H200 a graph-safe random case checked after platform_fork_unjoined_control on
        the same worker was reported eager_mismatch (test_random_ops_work_after_a_capture_that_did_not_end).
        A case's verdict must not depend on the case before it. clone_state copies seed and offset into a new
        state object, which starts outside capture; the failed graph keeps the old one."""
        generators = [self._device_generator(), *self._op_generators]
        for generator in generators:
            if generator.device.type != "cuda":
                continue
            with contextlib.suppress(Exception):  # torch without graph-safe generator states: nothing to do
                generator.graphsafe_set_state(generator.clone_state())

    # ------------------------------------------------------------------------------------------ misc
    def synchronize(self) -> None:
        # A check synchronizes 11 times (reports/performance.md);
        # torch.cuda.synchronize(device) enters a device context in Python around the same C call each time
        # (torch/cuda/__init__.py), so the C call is made directly while this device is current, as it is
        # after __init__'s set_device.
        if torch._C._cuda_getDevice() == self.device.index:
            torch._C._cuda_synchronize()
        else:
            torch.cuda.synchronize(self.device)

    def mark(self) -> Any:
        """A timing event recorded on the current stream: no wait, so a replay and the eager call after it are
        timed on the device without a synchronization of their own each. Events are reused once read."""
        event = self._spare_events.pop() if self._spare_events else torch.cuda.Event(enable_timing=True)
        # The current stream from its C accessor, and its Stream object made once per stream: resolving the
        # device in torch.cuda.current_stream() and building a Stream in Python took most of a mark's time
        # (24 marks per check; reports/performance.md, `check_profile`).
        stream_id, device_index, device_type = torch._C._cuda_getCurrentStream(self.device.index)
        stream = self._streams.get(stream_id)
        if stream is None:
            if len(self._streams) >= 64:  # an op's external streams have ids of their own: keep the map small
                self._streams.clear()
            stream = self._streams[stream_id] = torch.cuda.Stream(
                stream_id=stream_id, device_index=device_index, device_type=device_type
            )
        torch._C._CudaEventBase.record(event, stream)
        return event

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()  # returns at once when a later wait (the comparisons' batch) already covered it
        ms = float(start.elapsed_time(end))
        self._spare_events += (start, end)
        return ms

    def memory_in_use(self) -> int:
        """torch's reserved bytes on this device. They include the poisoning pools' segments (torch counts a
        segment when its allocator returns it, whichever allocator that is), so the allocator's own live-byte
        counter is not added again; it is reported in describe()."""
        return int(torch.cuda.memory_reserved(self.device))

    def describe(self) -> str:
        props = torch.cuda.get_device_properties(self.device)
        runtime = f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"
        arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
        loaded = _load_poison_allocator()
        if "allocator" in loaded:
            poison = "poisoning MemPool (CUDAPluggableAllocator) + fill_uninitialized_memory"
        else:
            poison = (
                f"fill_uninitialized_memory only (poisoning allocator unavailable: {loaded.get('error')})"
            )
        return f"gpu ({self.device}: {props.name}, {arch}, {runtime}, torch {torch.__version__}; {poison})"

    @staticmethod
    def poison_stats() -> dict[str, int]:
        """Live bytes, malloc count and how many mallocs reused a cached segment, of the poisoning allocator
        (diagnostics for tests and reports)."""
        loaded = _load_poison_allocator()
        if "ctypes" not in loaded:
            return {}
        lib = loaded["ctypes"]
        return {
            "live_bytes": int(lib.graphsafe_poison_live_bytes()),
            "mallocs": int(lib.graphsafe_poison_malloc_count()),
            "reuses": int(lib.graphsafe_poison_reuse_count()),
        }
