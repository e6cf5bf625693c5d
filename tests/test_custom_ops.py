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

from graphsafe.kernels.common import custom_ops
from graphsafe.kernels.moe_combine import ops as combine_ops

_LIB = torch.library.Library("gs_custom_ops_test", "FRAGMENT")
_LIB.define("noop(Tensor x) -> Tensor")  # defined, with no kernel at any key


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
        custom_ops.register_native("gs_custom_ops_test::noop", module, torch.device("cuda", 0))
    assert module.calls == []


def test_registration_refuses_a_module_that_registers_nothing():
    """Without a kernel at the key the loader would call itself again: refused with the module's name."""
    module = _stub(stream=0, registers=False)
    with pytest.raises(RuntimeError, match=r"stub_module.register_dispatch\(\) left no kernel at CPU"):
        custom_ops.register_native("gs_custom_ops_test::noop", module, torch.device("cpu"))
    assert module.calls == [False]


def test_cpp_kernel_serves_threads_with_their_own_signatures():
    """Eight threads call moe_combine at once with four signatures whose plans differ (expert_out f32 or bf16,
    out_dtype default, f32 or bf16; the plan cache is shared and locked): each result equals, bit for bit and in
    dtype, the same call made alone. Control, tried by hand: a signature that ignores the arguments (every
    call shares one plan) fails it."""
    torch.manual_seed(0)
    calls = [
        ((3, 2, 5), torch.float32, None),
        ((7, 4, 33), torch.bfloat16, None),
        ((1, 8, 128), torch.bfloat16, torch.float32),
        ((16, 1, 7), torch.float32, torch.bfloat16),
    ]
    inputs = [(torch.randn(t, k, h).to(dtype), torch.rand(t, k), out) for (t, k, h), dtype, out in calls]
    combine_ops.cpu_module().clear_plans()
    want = [torch.ops.graphsafe.moe_combine(x, w, None, 0.5, out) for x, w, out in inputs]
    assert [r.dtype for r in want] == [torch.float32, torch.bfloat16, torch.float32, torch.bfloat16]
    combine_ops.cpu_module().clear_plans()
    got: dict[int, list[torch.Tensor]] = {}
    start = threading.Barrier(8)

    def worker(i: int) -> None:
        start.wait()
        x, w, out = inputs[i % 4]
        got[i] = [torch.ops.graphsafe.moe_combine(x, w, None, 0.5, out) for _ in range(50)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == list(range(8))
    for i, results in got.items():
        expected = want[i % 4]
        assert all(r.dtype == expected.dtype and torch.equal(r, expected) for r in results)
