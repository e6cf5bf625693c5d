"""The `gpu` graph backend: real CUDA graphs (HIP graphs on ROCm builds of torch) through torch.cuda.CUDAGraph.

Role: warm up on a side stream, capture into a private memory pool per graph, replay; turn capture failures
into CaptureSyncError / CaptureError with the runtime's message; poison fresh allocations with the
NaN-poisoning allocator (kernels/hip/poison_alloc.hip) wrapped in torch.cuda.MemPool.

NOTE on pools: every graph gets its own MemPool built on the poisoning allocator, passed as `pool=` to the
capture. Sharing one pool between graphs is only safe when they replay in capture order (PITFALLS.md); the
live-graph stress replays them interleaved. Graph segments are allocated during capture with the capturing
stream current, so the allocator's memset is recorded as a memset node and re-poisons them on every replay.

NOTE on the eager pool: torch's allocator routes an allocation to the first pool in its `captures_underway`
list whose filter matches (CUDACachingAllocator get_pool), and `use_mem_pool` matches the whole thread. An
eager pool left active during capture would therefore swallow the graph's allocations, so `capture`
suspends it and resumes it afterwards.

NOTE on pool lifetime: ~MemPool asserts that nothing but the Python object still uses the pool (torch 2.11,
c10/cuda/MemPool); an assertion in a destructor terminates the process. A pool whose use count is not 1
after its graph is reset (a failed capture can leave one) is parked in `_PARKED_POOLS` for the rest of the
process instead of being destroyed.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from harness.backends.base import CapturedGraph, GraphBackend
from harness.errors import CaptureError, CaptureSyncError, FallbackEager
from harness.poison import deterministic_fill

_HIP_DIR = pathlib.Path(__file__).resolve().parents[2] / "kernels" / "hip"

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
    r"|data-dependent|dynamic shape",
    re.IGNORECASE,
)

_PARKED_POOLS: list[Any] = []  # see the module note on pool lifetime
_ALLOCATOR_LOCK = threading.Lock()
_ALLOCATOR: dict[str, Any] = {}  # "lib", "allocator", "ctypes", "error": loaded once per process


def classify_capture_failure(exc: BaseException) -> CaptureError:
    """Map an exception raised while capturing to CaptureSyncError or CaptureError, keeping the message."""
    if isinstance(exc, CaptureError):
        return exc
    message = f"{type(exc).__name__}: {exc}"
    if _SYNC_PATTERNS.search(message):
        return CaptureSyncError(message)
    return CaptureError(message)


def flatten_outputs(result: Any) -> tuple[torch.Tensor, ...]:
    """A tensor, or a (nested) tuple/list of tensors, as a flat tuple in return order."""
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, tuple | list):
        flat: list[torch.Tensor] = []
        for item in result:
            flat.extend(flatten_outputs(item))
        return tuple(flat)
    raise CaptureError(
        f"op returned {type(result).__name__}; outputs must be a Tensor or a tuple/list of Tensors"
    )


def _load_poison_allocator() -> dict[str, Any]:
    """Build (cached by source hash) and load the poisoning allocator once per process.

    Returns {"allocator": CUDAPluggableAllocator, "ctypes": CDLL} or {"error": why} where unavailable.
    """
    with _ALLOCATOR_LOCK:
        if _ALLOCATOR:
            return _ALLOCATOR
        try:
            import ctypes

            from kernels.build import build_shared_library

            if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
                raise RuntimeError(f"torch {torch.__version__} has no torch.cuda.MemPool/use_mem_pool")
            path = build_shared_library("graphsafe_poison_alloc", [_HIP_DIR / "poison_alloc.hip"])
            allocator = torch.cuda.memory.CUDAPluggableAllocator(
                str(path), "graphsafe_poison_malloc", "graphsafe_poison_free"
            )
            lib = ctypes.CDLL(str(path))
            lib.graphsafe_set_pattern.argtypes = [ctypes.c_int]
            lib.graphsafe_poison_live_bytes.restype = ctypes.c_longlong
            lib.graphsafe_poison_malloc_count.restype = ctypes.c_longlong
            _ALLOCATOR.update(allocator=allocator, ctypes=lib, path=str(path))
        except Exception as exc:  # no compiler, old torch: fill_uninitialized_memory still poisons empty*
            _ALLOCATOR.update(error=f"{type(exc).__name__}: {exc}")
        return _ALLOCATOR


def _new_pool() -> Any:
    """A MemPool on the poisoning allocator, or a plain graph pool handle where that is unavailable."""
    loaded = _load_poison_allocator()
    if "allocator" in loaded:
        return torch.cuda.MemPool(loaded["allocator"].allocator())
    return None


def _pool_id(pool: Any) -> Any:
    return pool.id if pool is not None else torch.cuda.graph_pool_handle()


def _drop_pool(pool: Any) -> None:
    if pool is None:
        return
    use_count = pool.use_count() if hasattr(pool, "use_count") else 1
    if use_count != 1:
        _PARKED_POOLS.append(pool)


def _end_allocate_to_pool(device: int, pool_id: Any) -> None:
    """Undo capture_begin's routing of allocations to the graph pool when capture_end failed before it."""
    for name in ("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool"):
        fn = getattr(torch._C, name, None)
        if fn is not None:
            with contextlib.suppress(Exception):  # already ended: torch raises "not currently recording"
                fn(device, pool_id)
            return


@contextlib.contextmanager
def _sync_debug_error() -> Iterator[None]:
    """torch.cuda.set_sync_debug_mode("error") for the scope: a host sync raises before it reaches the runtime,
    so the capture is not invalidated and the process stays usable."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class GpuCapturedGraph(CapturedGraph):
    def __init__(self, graph: Any, pool: Any, outputs: tuple[torch.Tensor, ...], inspectable: bool) -> None:
        # Attribute order matters: the graph must die before its pool (module note on pool lifetime).
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
        if self._kinds is None and self._inspectable and self._graph is not None:
            from kernels.platform_ops import graph_node_kinds

            self._kinds = graph_node_kinds(self._graph.raw_cuda_graph())
        return self._kinds

    def release(self) -> None:
        if self._graph is None:
            return
        self.outputs = ()
        self._graph.reset()
        self._graph = None
        pool, self._pool = self._pool, None
        _drop_pool(pool)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


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
        self._eager_ctx: Any = None

    # ------------------------------------------------------------------------------------- poisoning
    @contextlib.contextmanager
    def poisoned_allocation(self, pattern: int) -> Iterator[None]:
        if pattern not in (0xFF, 0x7F):
            raise ValueError(f"pattern must be 0xFF or 0x7F, got {pattern!r}")
        loaded = _load_poison_allocator()
        if "ctypes" in loaded:
            loaded["ctypes"].graphsafe_set_pattern(pattern)
        with deterministic_fill():
            pool = _new_pool()
            self._eager_pool = pool
            self._resume_eager_pool()
            try:
                yield
            finally:
                torch.cuda.synchronize(self.device)
                self._suspend_eager_pool()
                self._eager_pool = None
                _drop_pool(pool)

    def _resume_eager_pool(self) -> None:
        if self._eager_pool is not None and self._eager_ctx is None:
            self._eager_ctx = torch.cuda.use_mem_pool(self._eager_pool, self.device)
            self._eager_ctx.__enter__()

    def _suspend_eager_pool(self) -> None:
        if self._eager_ctx is not None:
            ctx, self._eager_ctx = self._eager_ctx, None
            ctx.__exit__(None, None, None)

    # --------------------------------------------------------------------------------------- capture
    def capture(self, fn: Callable[[], Any], *, warmup: int = 1) -> CapturedGraph:
        current = torch.cuda.current_stream(self.device)
        # Warm-up on a side stream (torch's documented recipe): lazy init, cuBLAS handles and allocator
        # state settle outside the capture. Exceptions here are the op's own and propagate unchanged.
        if warmup > 0:
            self._side_stream.wait_stream(current)
            with torch.cuda.stream(self._side_stream):
                for _ in range(warmup):
                    fn()
            current.wait_stream(self._side_stream)
        torch.cuda.synchronize(self.device)

        pool = _new_pool()
        pool_id = _pool_id(pool)
        graph, inspectable = self._new_graph()
        self._suspend_eager_pool()
        try:
            result = self._capture_into(graph, pool_id, fn)
        except BaseException:
            with contextlib.suppress(Exception):
                graph.reset()
            _PARKED_POOLS.append(pool)  # its use count is unknown after a failed capture
            raise
        finally:
            self._resume_eager_pool()
        if inspectable:
            graph.instantiate()
        try:
            outputs = flatten_outputs(result)
        except CaptureError:
            graph.reset()
            _drop_pool(pool)
            raise
        return GpuCapturedGraph(graph, pool, outputs, inspectable)

    @staticmethod
    def _new_graph() -> tuple[Any, bool]:
        """keep_graph=True keeps the cudaGraph_t for node_kinds (torch >= 2.8); older torch cannot inspect."""
        try:
            return torch.cuda.CUDAGraph(keep_graph=True), True
        except TypeError:
            return torch.cuda.CUDAGraph(), False

    def _capture_into(self, graph: Any, pool_id: Any, fn: Callable[[], Any]) -> Any:
        """Capture one call of fn; always leaves the stream out of capture mode."""
        failure: BaseException | None = None
        result: Any = None
        self._capture_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._capture_stream):
            graph.capture_begin(pool=pool_id)
            try:
                with _sync_debug_error():
                    result = fn()
            except BaseException as exc:
                failure = exc
            try:
                graph.capture_end()  # ends capture even when the capture was invalidated (then it raises)
            except BaseException as exc:
                _end_allocate_to_pool(self.device.index or 0, pool_id)
                failure = failure or exc
        torch.cuda.current_stream(self.device).wait_stream(self._capture_stream)
        if failure is None:
            return result
        if isinstance(failure, FallbackEager | KeyboardInterrupt | SystemExit):
            raise failure
        raise classify_capture_failure(failure) from failure

    # ------------------------------------------------------------------------------------------ misc
    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

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
        """Live bytes and malloc count of the poisoning allocator (diagnostics for tests and reports)."""
        loaded = _load_poison_allocator()
        if "ctypes" not in loaded:
            return {}
        lib = loaded["ctypes"]
        return {
            "live_bytes": int(lib.graphsafe_poison_live_bytes()),
            "mallocs": int(lib.graphsafe_poison_malloc_count()),
        }
