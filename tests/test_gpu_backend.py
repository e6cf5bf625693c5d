"""Tests for harness/backends/gpu.py: capture/replay, capture failure classification, the poisoning allocator,
node inspection. Marked `gpu`: skipped without a CUDA/ROCm device. The CPU-side helpers (classification of
runtime messages, output flattening) are tested everywhere.
"""

from __future__ import annotations

import pytest
import torch

from harness.backends.gpu import classify_capture_failure, flatten_outputs
from harness.errors import CaptureError, CaptureSyncError

gpu = pytest.mark.gpu


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: operation not permitted when stream is capturing",
        "cudaErrorStreamCaptureInvalidated: operation failed due to a previous error during capture",
        "hipErrorStreamCaptureUnsupported",
        "called a synchronizing CUDA operation",
        "CUDA error: operation would make the legacy stream depend on a capturing blocking stream",
    ],
)
def test_sync_messages_classify_as_capture_sync(message: str) -> None:
    """Method: runtime/torch messages of host syncs under capture. Expected: CaptureSyncError (capture_sync)."""
    assert type(classify_capture_failure(RuntimeError(message))) is CaptureSyncError


def test_other_capture_failures_classify_as_capture_error() -> None:
    """Method: cudaErrorStreamCaptureUnjoined's message and an arbitrary error. Expected: plain CaptureError,
    with the runtime's message kept; an op's own CaptureError passes through unchanged."""
    unjoined = classify_capture_failure(RuntimeError("capture sequence contains a fork that was not joined"))
    assert type(unjoined) is CaptureError and "not joined" in str(unjoined)
    own = CaptureError("hipLaunchHostFunc refused under stream capture")
    assert classify_capture_failure(own) is own


def test_flatten_outputs_rejects_non_tensors() -> None:
    t = torch.zeros(2)
    assert flatten_outputs((t, [t, (t,)])) == (t, t, t)
    with pytest.raises(CaptureError, match="outputs must be a Tensor"):
        flatten_outputs((t, 3))


# ------------------------------------------------------------------------------------------- on a GPU


@pytest.fixture(scope="module")
def backend():  # type: ignore[no-untyped-def]
    from harness.backends.gpu import GpuBackend

    return GpuBackend()


@gpu
def test_capture_replay_follows_new_inputs(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: capture x*2+1 with x=A, copy B in place, replay. Expected: output equals 2B+1 exactly."""
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    with backend.poisoned_allocation(0xFF):
        graph = backend.capture(lambda: (x * 2 + 1, x - 1))
        x.copy_(torch.full_like(x, 3.0))
        graph.replay()
        backend.synchronize()
        assert len(graph.outputs) == 2
        assert torch.equal(graph.outputs[0], torch.full_like(x, 7.0))
        assert torch.equal(graph.outputs[1], torch.full_like(x, 2.0))
        graph.release()


@gpu
def test_item_under_capture_is_capture_sync_and_process_stays_usable(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: capture an op calling .item(). Expected: CaptureSyncError; a later capture still works."""
    x = torch.ones(16, device="cuda")
    with backend.poisoned_allocation(0xFF):
        with pytest.raises(CaptureSyncError):
            backend.capture(lambda: x * x.sum().item())
        assert not torch.cuda.is_current_stream_capturing()
        graph = backend.capture(lambda: x + 1)
        graph.replay()
        backend.synchronize()
        assert torch.equal(graph.outputs[0], x + 1)
        graph.release()


@gpu
def test_unjoined_fork_is_capture_error(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: fork a side stream under capture and never join it. Expected: CaptureError, not CaptureSyncError,
    carrying the runtime's message."""
    x = torch.ones(16, device="cuda")
    side = torch.cuda.Stream()

    def fork_without_join() -> torch.Tensor:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _ = x * 3
        return x + 1

    with backend.poisoned_allocation(0xFF), pytest.raises(CaptureError) as info:
        backend.capture(fork_without_join)
    assert type(info.value) is CaptureError, str(info.value)


@gpu
def test_op_error_under_capture_is_capture_error(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: an op that raises only while capturing. Expected: CaptureError with its message."""
    x = torch.ones(16, device="cuda")

    def picky() -> torch.Tensor:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("this op cannot be captured")
        return x + 1

    with backend.poisoned_allocation(0x7F), pytest.raises(CaptureError, match="cannot be captured"):
        backend.capture(picky)


@gpu
@pytest.mark.parametrize("pattern", [0xFF, 0x7F])
def test_poisoning_allocator_fills_fresh_blocks(backend, pattern: int) -> None:  # type: ignore[no-untyped-def]
    """Method: allocate a fresh tensor inside the scope and read its bytes back without fill_uninitialized_memory
    (torch.empty with the fill off). Expected: every byte equals the pattern; the allocator ran."""
    from harness.backends.gpu import GpuBackend

    stats = GpuBackend.poison_stats()
    assert stats, f"poisoning allocator not loaded: {backend.describe()}"
    with backend.poisoned_allocation(pattern):
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
        fresh = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # > 2 MiB: a new large segment
        torch.cuda.synchronize()
        assert int((fresh != pattern).sum()) == 0
        assert GpuBackend.poison_stats()["mallocs"] > stats["mallocs"]


@gpu
def test_graph_segments_are_poisoned_on_replay(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: capture an op whose output is never written (empty_like with the fill off), replay.
    Expected: the output holds the 0xFF pattern (NaN): the pool memset node re-poisons graph segments."""
    x = torch.ones(1024, device="cuda")
    with backend.poisoned_allocation(0xFF):
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
        graph = backend.capture(lambda: torch.empty(3 << 18, device="cuda") if x is not None else x)
        graph.outputs[0].fill_(0.0)
        graph.replay()
        backend.synchronize()
        assert bool(torch.isnan(graph.outputs[0]).all())
        graph.release()


@gpu
def test_node_kinds_reports_kernel_nodes(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: capture 8 chained elementwise ops. Expected: node_kinds() counts at least 8 kernel nodes."""
    x = torch.ones(1024, device="cuda")

    def chain() -> torch.Tensor:
        y = x.clone()
        for _ in range(7):
            y.add_(1)
        return y

    with backend.poisoned_allocation(0xFF):
        graph = backend.capture(chain)
        kinds = graph.node_kinds()
        graph.release()
    assert kinds is not None and kinds.get("kernel", 0) >= 8, kinds


@gpu
def test_memory_returns_after_release(backend) -> None:  # type: ignore[no-untyped-def]
    """Method: 20 capture/release cycles of a 16 MiB op. Expected: reserved memory grows by < 64 MiB."""
    x = torch.ones(4 << 20, device="cuda")
    with backend.poisoned_allocation(0xFF):
        backend.capture(lambda: x * 2).release()
        backend.synchronize()
        start = backend.memory_in_use()
        for _ in range(20):
            backend.capture(lambda: x * 2, warmup=0).release()
        backend.synchronize()
        assert backend.memory_in_use() - start < 64 << 20
