"""kernels/common/custom_ops.py and gs_torch.h: how an op reaches its C++ kernel, and what is refused on the way.

The registration refuses a module whose kernel would launch on another stream than torch's current one, and
one that leaves no kernel at the key (either would otherwise run the wrong code or recurse through the
loader); the C++ plan cache serves threads at once with each call's own result.
"""

from __future__ import annotations

import threading
import types

import pytest
import torch

from kernels.common import custom_ops
from kernels.moe_combine import ops as combine_ops


def _stub(stream: int, registers: bool) -> types.SimpleNamespace:
    calls = []
    return types.SimpleNamespace(
        __name__="stub_module",
        dispatch_stream=lambda index: stream,
        register_dispatch=lambda: calls.append(registers),
        calls=calls,
    )


def test_registration_refuses_a_kernel_that_would_launch_on_another_stream(monkeypatch):
    """A device guard naming another stream than torch's current one is refused before anything registers."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x1000, raising=False)
    module = _stub(stream=0x2000, registers=True)
    with pytest.raises(RuntimeError, match=r"launch on stream 0x2000, torch's current stream is 0x1000"):
        custom_ops.register_native("graphsafe::gs_test_stub_a", module, torch.device("cuda", 0))
    assert module.calls == []


def test_registration_refuses_a_module_that_registers_nothing():
    """Without a kernel at the key the loader would call itself again: refused with the module's name."""
    lib = torch.library.Library("gs_custom_ops_test", "FRAGMENT")
    lib.define("noop(Tensor x) -> Tensor")  # defined, with no kernel at any key
    module = _stub(stream=0, registers=False)
    with pytest.raises(RuntimeError, match=r"stub_module.register_dispatch\(\) left no kernel at CPU"):
        custom_ops.register_native("gs_custom_ops_test::noop", module, torch.device("cpu"))
    assert module.calls == [False]


def test_cpp_kernel_serves_threads_with_their_own_signatures():
    """Eight threads call moe_combine at once with four signatures (the plan cache is shared and locked): each
    result equals the same call made alone."""
    torch.manual_seed(0)
    shapes = [(3, 2, 5), (7, 4, 33), (1, 8, 128), (16, 1, 7)]
    inputs = [(torch.randn(t, k, h), torch.rand(t, k)) for t, k, h in shapes]
    combine_ops.cpu_module().clear_plans()
    want = [torch.ops.graphsafe.moe_combine(x, w, None, 0.5, None) for x, w in inputs]
    combine_ops.cpu_module().clear_plans()
    got: dict[int, list[torch.Tensor]] = {}
    start = threading.Barrier(8)

    def worker(i: int) -> None:
        start.wait()
        x, w = inputs[i % 4]
        got[i] = [torch.ops.graphsafe.moe_combine(x, w, None, 0.5, None) for _ in range(50)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == list(range(8))
    for i, results in got.items():
        assert all(torch.equal(r, want[i % 4]) for r in results)
