"""The CPU graph backend: what it records, replays, and refuses, like real capture."""

from __future__ import annotations

import pytest
import torch

from harness.backends.cpu import CpuBackend
from harness.errors import CaptureError, CaptureSyncError


def test_replay_recomputes_with_new_inputs_in_place() -> None:
    backend = CpuBackend()
    x = torch.ones(4)
    graph = backend.capture(lambda: torch.relu(x * 2 - 1))
    x.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0]))
    graph.replay()
    assert torch.equal(graph.outputs[0], torch.tensor([0.0, 1.0, 3.0, 5.0]))


def test_views_follow_their_base() -> None:
    backend = CpuBackend()
    x = torch.arange(6.0).reshape(2, 3)
    graph = backend.capture(lambda: (x + 1).t()[0])
    x.add_(10)
    graph.replay()
    assert torch.equal(graph.outputs[0], torch.tensor([11.0, 14.0]))


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.sum().item(),
        lambda x: x.nonzero(),
        lambda x: x[x > 0],
        lambda x: x.tolist(),
        lambda x: bool(x.sum() > 0),
        lambda x: torch.repeat_interleave(x.long().abs()),
        lambda x: torch.unique(x),
    ],
    ids=["item", "nonzero", "bool_mask", "tolist", "bool", "repeat_interleave", "unique"],
)
def test_host_syncs_raise_capture_sync(op) -> None:  # type: ignore[no-untyped-def]
    """Failure scenario: host reads and data-dependent shapes; real capture rejects each of these."""
    x = torch.tensor([1.0, -2.0, 3.0])
    with pytest.raises(CaptureSyncError):
        CpuBackend().capture(lambda: op(x), warmup=0)


def test_repeat_interleave_with_output_size_is_allowed() -> None:
    x = torch.tensor([1, 2])
    graph = CpuBackend().capture(lambda: torch.repeat_interleave(x, output_size=3), warmup=0)
    assert graph.outputs[0].shape == (3,)


def test_other_capture_failures_are_capture_errors() -> None:
    def bad() -> torch.Tensor:
        raise RuntimeError("device lost")

    with pytest.raises(CaptureError) as info:
        CpuBackend().capture(bad, warmup=0)
    assert not isinstance(info.value, CaptureSyncError) and "device lost" in str(info.value)


def test_unrecorded_python_side_effects_run_once() -> None:
    """Documented limit and the seed-000 failure shape: plain Python runs at capture, never on replay."""
    calls = []
    x = torch.ones(2)

    def op() -> torch.Tensor:
        calls.append(1)
        return x + 1

    graph = CpuBackend().capture(op, warmup=0)
    graph.replay()
    graph.replay()
    assert len(calls) == 1


def test_empty_is_repoisoned_on_every_replay() -> None:
    backend = CpuBackend()
    with backend.poisoned_allocation(0xFF):
        graph = backend.capture(lambda: torch.empty(4), warmup=0)
        graph.outputs[0].fill_(1.0)
        graph.replay()
    assert torch.isnan(graph.outputs[0]).all()


def test_poisoned_allocation_restores_global_state() -> None:
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    with CpuBackend().poisoned_allocation(0x7F):
        assert torch.are_deterministic_algorithms_enabled()
        t = torch.empty(2, dtype=torch.int32)
        assert (t == 0x7F7F7F7F).all()
    assert (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    ) == before
