"""Tests for the MoE combine/gate ops (kernels/moe_combine/ops.py) and their cases.

Methods: opcheck on CPU; bitwise comparison with the independent torch f32 oracle; the portable sigmoid's
accuracy; refusals in Python and in C++ (null pointers prove nothing is read); a Hypothesis shape sweep
through graphsafe.check; the vllm.cpp#509 counterexamples get their verdicts; GPU bitwise parity (marked gpu).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
from hypothesis import example, given, note
from hypothesis import strategies as st

from graphsafe import Case, check
from graphsafe.kernels.common import native
from graphsafe.kernels.moe_combine import ops, reference

ROOT = pathlib.Path(__file__).resolve().parents[1]

BF16, F32 = torch.bfloat16, torch.float32


def _inputs(T, K, H, eo=BF16, sh=BF16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, H, generator=g).to(eo)
    w = torch.rand(T, K, generator=g)
    s = torch.randn(T, H, generator=g).to(sh)
    gate = 3 * torch.randn(T, generator=g)
    return x, w, s, gate


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.dtype == BF16 else torch.int32)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_opcheck(dtype):
    """Method: torch.library.opcheck (schema, fake tensor, autograd registration, AOT dispatch) on CPU."""
    x, w, s, gate = _inputs(5, 3, 33, dtype, dtype)
    torch.library.opcheck(torch.ops.graphsafe.moe_combine.default, (x, w, s, 0.7, None))
    torch.library.opcheck(torch.ops.graphsafe.moe_combine.default, (x, w, None, 1.0, F32))
    torch.library.opcheck(torch.ops.graphsafe.moe_combine_gate.default, (x, w, s, gate, 0.7, None))
    torch.library.opcheck(torch.ops.graphsafe.shared_expert_gate.default, (gate, s, None))


@pytest.mark.parametrize(
    ("eo", "sh", "out"), [(BF16, BF16, BF16), (F32, F32, F32), (BF16, F32, F32), (F32, BF16, BF16)]
)
@pytest.mark.parametrize("scale", [1.0, 0.7])
def test_combine_bitwise_vs_torch_oracle(eo, sh, out, scale):
    """Failure scenario: a reordered sum, an FMA, or a wrong rounding changes bits; expected: none differ."""
    x, w, s, _ = _inputs(19, 8, 129, eo, sh)
    got = torch.ops.graphsafe.moe_combine(x, w, s, scale, out)
    want = reference.moe_combine_f32(x, w, s, scale, out)
    assert torch.equal(_bits(got), _bits(want))


def test_bitwise_oracle_catches_one_ulp():
    """Negative control of the comparison above: flipping one low bit of one element is seen."""
    x, w, s, _ = _inputs(4, 2, 16)
    got = torch.ops.graphsafe.moe_combine(x, w, s)
    _bits(got)[1, 3] ^= 1
    assert not torch.equal(_bits(got), _bits(reference.moe_combine_f32(x, w, s)))


def test_portable_sigmoid_accuracy():
    """Method: shared_expert_gate with shared = 1 gives the kernels' sigmoid; within 4 f32 ulp of f64.
    Below sigmoid(-87) ~ FLT_MIN the f32 formula 1/(1+exp(-x)) overflows exp to inf and returns 0, as
    torch's f32 sigmoid does; there the bound is absolute (1e-37)."""
    logits = torch.cat([torch.linspace(-110, 110, 20001), torch.tensor([0.0, -0.0, 88.7, -88.7, 1e-8])])
    got = torch.ops.graphsafe.shared_expert_gate(logits, torch.ones(logits.numel(), 1), F32)[:, 0].double()
    want = torch.sigmoid(logits.double())
    ulp = torch.finfo(F32).eps * want.abs()
    bound = torch.maximum(4 * ulp, torch.full_like(ulp, 1e-37))
    assert ((got - want).abs() <= bound).all(), float(((got - want).abs() / bound).max())
    nan = torch.ops.graphsafe.shared_expert_gate(torch.tensor([float("nan")]), torch.ones(1, 1), F32)
    assert nan.isnan().all()  # NaN is a failure signal, never a wildcard: it must propagate


@pytest.mark.parametrize("arg", ["expert_out", "shared", "out_dtype", "weights"])
def test_python_refuses_by_name(arg):
    x, w, s, _ = _inputs(3, 2, 8)
    kwargs = {"expert_out": x, "weights": w, "shared": s, "out_dtype": None}
    kwargs[arg] = {
        "expert_out": x.half(),
        "shared": s.half(),
        "out_dtype": torch.float16,
        "weights": w.half(),
    }[arg]
    with pytest.raises(ValueError, match=f"{arg}.*allowed: torch.float32"):
        torch.ops.graphsafe.moe_combine(**kwargs)


@pytest.mark.parametrize("entry", ["moe_combine", "moe_combine_gate", "shared_expert_gate"])
def test_cpp_refuses_f16_before_reading(entry):
    """Method: call the C++ entry point directly with the f16 code and NULL pointers for everything: a
    refusal that came after a read would crash here instead of raising ValueError."""
    module = ops.cpu_module()
    f16 = ops.DTYPE_CODES[torch.float16]
    with pytest.raises(ValueError, match=r"dtype f16.*allowed: f32, bf16"):
        if entry == "moe_combine":
            module.moe_combine(0, 1, 0, f16, 0, 0, 1, 4, 2, 8, 8, 16, 8, 2, 1, 8, 1.0, 0, 0)
        elif entry == "moe_combine_gate":
            module.moe_combine_gate(0, 1, 0, 1, 0, 0, f16, 0, 4, 2, 8, 8, 16, 8, 2, 1, 8, 1, 1.0, 0, 0)
        else:
            module.shared_expert_gate(0, 1, 0, 0, f16, 4, 8, 8, 1, 8, 0)


def test_cpp_refuses_null_pointer_with_elements():
    with pytest.raises(ValueError, match="expert_out is a null pointer"):
        ops.cpu_module().moe_combine(1, 1, 0, 1, 1, 0, 0, 4, 2, 8, 8, 16, 8, 2, 1, 8, 1.0, 0, 0)


def test_importing_ops_builds_nothing():
    """Import-time compilation would cost every test worker seconds; the cache_info proves laziness."""
    import importlib
    import subprocess
    import sys

    code = "import graphsafe.kernels.moe_combine.ops, graphsafe.kernels.common.native as n; print(n.load.cache_info().misses)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0"]
    assert importlib.import_module("graphsafe.kernels.moe_combine.ops") is ops


@given(
    T=st.integers(0, 40),
    K=st.integers(1, 9),
    H=st.integers(1, 300),
    mix=st.sampled_from(["prod", "f32", "mixed"]),
    scale=st.sampled_from([1.0, 0.7, 1.5]),
    seed=st.integers(0, 2**20),
)
@example(T=0, K=8, H=128, mix="prod", scale=1.0, seed=0)
@example(T=7, K=1, H=129, mix="prod", scale=0.7, seed=1)
@example(T=3, K=8, H=127, mix="f32", scale=0.7, seed=2)
def test_shape_sweep_through_harness(T, K, H, mix, scale, seed):
    """Method: a generated case through graphsafe.check on the cpu backend, bitwise vs the torch f32 oracle.
    Failing examples print the note below; replay with @example(...) of those values."""
    from graphsafe.cases.moe_combine import MIXES, combine_op, make_inputs_factory

    m = {x.name: x for x in MIXES}[mix]
    note(f"replay: @example(T={T}, K={K}, H={H}, mix={mix!r}, scale={scale}, seed={seed})")

    def ref(expert_out, weights, shared):
        return reference.moe_combine_f32(expert_out, weights, shared, scale, m.out)

    case = Case(
        name=f"sweep.moe_combine.{mix}.T{T}K{K}H{H}",
        make_inputs=make_inputs_factory(T, K, H, m),
        op=combine_op(scale, m.out),
        reference=ref,
        bit_exact=True,
        family="moe_combine",
    )
    result = check(case, backend="cpu", replays=1, seed=seed)
    assert result.verdict == "pass", result.detail


def test_counterexamples_get_their_verdicts():
    """The #509 pairs: fixed ones refused/pass, buggy ones caught, the f32-only case misses the bf16 defect."""
    import graphsafe.cases.counterexamples.moe_combine_vllm_cpp_509 as cx

    verdicts = {c.name: check(c, backend="cpu").verdict for c in cx.CASES}
    assert verdicts == {c.name: c.expect for c in cx.CASES}
    assert verdicts["cx509.bf16_truncating_store.f32_only_case"] == "pass"
    assert verdicts["cx509.bf16_truncating_store.production_dtypes"] == "eager_mismatch"
    assert verdicts["cx509.f16_expert_out.unguarded"] != "pass"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_builds_full_module_for_sm90():
    """Compile, link and import (importing needs no device) the whole pybind11 module for sm_90."""
    module = native.build(ops.FAMILY_DIR, "moe_combine", "cuda", arch="sm_90")
    assert hasattr(module, "moe_combine")


_KEYS_SCRIPT = """
import torch
from graphsafe.kernels.common import native
from graphsafe.kernels.moe_combine import ops
def keys():
    return [torch._C._dispatch_has_kernel_for_dispatch_key("graphsafe::moe_combine", k) for k in ("CPU", "CUDA")]
native.build(ops.FAMILY_DIR, "moe_combine", "cuda", arch="sm_90").register_dispatch()
print(*keys())
ops.cpu_module().register_dispatch()
print(*keys())
x, w = torch.ones(2, 3, 4), torch.full((2, 3), 0.5)
print(torch.ops.graphsafe.moe_combine(x, w, None, 1.0, None).tolist())
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cpu_and_device_modules_register_at_their_own_keys():
    """Both modules hold the same dispatcher unit (moe_combine.torch.cpp); each must register its kernels at its
    own key. Loaded in one process, the device module first (no GPU needed to register), the CPU module's
    kernels still land at CPU and run there (control: with gs_torch.h's registration held in an inline
    function's static, g++ shares it between the modules and the CPU kernels went to CUDA)."""
    run = subprocess.run(
        [sys.executable, "-c", _KEYS_SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == ["False True", "True True", str([[1.5] * 4] * 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("mix", [(BF16, BF16, BF16), (F32, F32, F32), (BF16, F32, F32)])
@pytest.mark.parametrize("shape", [(1, 8, 7168), (33, 8, 127), (4096, 8, 7168), (9000, 2, 129)])
def test_gpu_bitwise_equals_cpu_implementation(mix, shape):
    """vllm.cpp PR #509's gate: kernel == g++ implementation bit for bit, vector and scalar paths, all three ops."""
    eo, sh, out = mix
    x, w, s, gate = _inputs(*shape, eo, sh)
    dev = [t.cuda() for t in (x, w, s, gate)]
    pairs = [
        (torch.ops.graphsafe.moe_combine(*dev[:3], 0.7, out), torch.ops.graphsafe.moe_combine(x, w, s, 0.7, out)),
        (torch.ops.graphsafe.moe_combine_gate(*dev, 0.7, out), torch.ops.graphsafe.moe_combine_gate(x, w, s, gate, 0.7, out)),
        (torch.ops.graphsafe.shared_expert_gate(dev[3], dev[2], out), torch.ops.graphsafe.shared_expert_gate(gate, s, out)),
    ]  # fmt: skip
    for got, want in pairs:
        assert torch.equal(_bits(got.cpu()), _bits(want))


def test_checks_run_once_per_signature_and_a_new_signature_is_checked(monkeypatch):
    """The eager call's host cost: the C++ kernels (moe_combine.torch.cpp) ask the planner op, and so
    _check_combine, once per argument signature; another signature (shape, stride, dtype, out_dtype) is checked
    again, so a bad argument after a good call is refused."""
    calls = []
    real = ops._check_combine
    monkeypatch.setattr(ops, "_check_combine", lambda *a: calls.append(1) or real(*a))
    x, w, s, _ = _inputs(5, 3, 33)
    torch.ops.graphsafe.moe_combine(x, w, s, 0.7, None)  # the C++ kernels are registered from here on
    assert torch._C._dispatch_has_kernel_for_dispatch_key("graphsafe::moe_combine", "CPU")
    ops.cpu_module().clear_plans()
    calls.clear()
    first = torch.ops.graphsafe.moe_combine(x, w, s, 0.7, None)
    assert torch.equal(torch.ops.graphsafe.moe_combine(x.clone(), w, s, 0.7, None), first)
    assert len(calls) == 1
    torch.ops.graphsafe.moe_combine(x, w, s, 0.7, F32)
    assert len(calls) == 2
    with pytest.raises(ValueError, match=r"expert_out.*allowed: torch\.float32"):
        torch.ops.graphsafe.moe_combine(x.half(), w, s, 0.7, None)
    assert len(calls) == 3  # a refused signature is never kept


def test_cached_call_with_a_strided_last_dimension_matches_the_contiguous_one():
    x, w, s, gate = _inputs(5, 3, 33)
    xt = x.transpose(1, 2).contiguous().transpose(1, 2)  # same values, stride(-1) == 3
    st = s.t().contiguous().t()
    assert xt.stride(-1) != 1 and st.stride(-1) != 1
    want = torch.ops.graphsafe.moe_combine(x, w, s, 0.7, None)
    want_gate = torch.ops.graphsafe.moe_combine_gate(x, w, s, gate, 0.7, None)
    want_shared = torch.ops.graphsafe.shared_expert_gate(gate, s, None)
    for _ in range(2):  # the second call goes through the cached plan
        assert torch.equal(torch.ops.graphsafe.moe_combine(xt, w, st, 0.7, None), want)
        assert torch.equal(torch.ops.graphsafe.moe_combine_gate(xt, w, st, gate, 0.7, None), want_gate)
        assert torch.equal(torch.ops.graphsafe.shared_expert_gate(gate, st, None), want_shared)
