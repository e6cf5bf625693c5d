"""The moe_combine family's torch custom ops: ``torch.ops.graphsafe.moe_combine``, ``moe_combine_gate``,
``shared_expert_gate`` and the negative control ``moe_combine_negative_control``.

Role: registers each launcher as the operator ``graphsafe::<name>`` with a fake implementation
(kernels/common/custom_ops.py: at the dispatch keys directly, without custom_op's per-call layers) so the
dispatcher, ``torch.compile``, ``opcheck`` and the CPU graph backend see it as one node. One body serves
both devices: CPU tensors go to the g++ module (moe_combine.cpp), CUDA tensors (NVIDIA or ROCm builds of
torch) to the nvcc/hipcc module (moe_combine.hip). Each op allocates its output.

Unsupported dtypes, shapes and devices are refused with ValueError naming the argument and the allowed
values, in the fake implementation and before any pointer is handed to C++ (the C++ entry points refuse
them again: vllm.cpp#509). The checks run once per argument signature (see _PLANS). Importing this module
compiles nothing; the first call on a device builds.
"""

from __future__ import annotations

import pathlib
import types

import torch

from kernels.common import custom_ops, native

FAMILY_DIR = pathlib.Path(__file__).resolve().parent

# Dtype codes shared with kernels/common/gs_checks.h. f16 has a code only so that C++ can name it in a refusal.
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
STORAGE_DTYPES = (torch.float32, torch.bfloat16)
_ALLOWED = "allowed: torch.float32, torch.bfloat16"
DEFECTS = {0: "production", 1: "truncating bf16 store (negative control)"}


native.declare(FAMILY_DIR, "moe_combine", "cpu")
native.declare(FAMILY_DIR, "moe_combine", "gpu")


def cpu_module() -> types.ModuleType:
    """The g++ build of moe_combine.cpp (built on first use, then cached on disk)."""
    return native.load(FAMILY_DIR, "moe_combine", "cpu")


def gpu_module() -> types.ModuleType:
    """The nvcc (NVIDIA) or hipcc (ROCm) build of moe_combine.hip for the current device."""
    return native.load(FAMILY_DIR, "moe_combine", "gpu")


# ------------------------------------------------------------------------------------------ validation


def _storage(op: str, name: str, t: torch.Tensor) -> None:
    if t.dtype not in STORAGE_DTYPES:
        raise ValueError(f"{op}: {name} has dtype {t.dtype}; {_ALLOWED}")


def _f32(op: str, name: str, t: torch.Tensor) -> None:
    if t.dtype != torch.float32:
        raise ValueError(f"{op}: {name} has dtype {t.dtype}; allowed: torch.float32")


def _out_dtype(op: str, out_dtype: torch.dtype | None, default: torch.dtype) -> torch.dtype:
    chosen = default if out_dtype is None else out_dtype
    if chosen not in STORAGE_DTYPES:
        raise ValueError(f"{op}: out_dtype is {chosen}; {_ALLOWED}")
    return chosen


def _shape(op: str, name: str, t: torch.Tensor, expected: tuple, meaning: str) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected {meaning} = {tuple(expected)}")


def _same_device(op: str, **tensors: torch.Tensor | None) -> None:
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        raise ValueError(f"{op}: inputs are on different devices: {devices}")


def _gate_1d(op: str, gate_logit: torch.Tensor, T: int) -> torch.Tensor:
    _f32(op, "gate_logit", gate_logit)
    if gate_logit.dim() == 2 and gate_logit.shape[1] == 1:
        gate_logit = gate_logit[:, 0]  # [T, 1], the shape of a gate projection's output
    _shape(op, "gate_logit", gate_logit, (T,), "[T] or [T, 1]")
    return gate_logit


def _check_combine(op: str, expert_out, weights, shared, gate_logit, out_dtype):
    """Shape/dtype/device checks shared by the real and fake implementations; returns (T, K, H, out dtype)."""
    _storage(op, "expert_out", expert_out)
    _f32(op, "weights", weights)
    if expert_out.dim() != 3:
        raise ValueError(f"{op}: expert_out must be [T, K, H], got shape {tuple(expert_out.shape)}")
    T, K, H = expert_out.shape
    _shape(op, "weights", weights, (T, K), "[T, K]")
    if shared is not None:
        _storage(op, "shared", shared)
        _shape(op, "shared", shared, (T, H), "[T, H]")
    if gate_logit is not None:
        gate_logit = _gate_1d(op, gate_logit, T)
    _same_device(op, expert_out=expert_out, weights=weights, shared=shared, gate_logit=gate_logit)
    return T, K, H, _out_dtype(op, out_dtype, expert_out.dtype), gate_logit


def _inner_contiguous_already(t: torch.Tensor) -> bool:
    return t.shape[-1] <= 1 or t.stride(-1) == 1


def _inner_contiguous(t: torch.Tensor) -> torch.Tensor:
    """Kernels take row strides but need unit stride in the last dimension."""
    return t if _inner_contiguous_already(t) else t.contiguous()


def _stride(t: torch.Tensor | None, dim: int) -> int:
    return 0 if t is None else t.stride(dim)


# --------------------------------------------------------------------------------- implementations
# A plan is what the checks above conclude for one argument signature (shapes, strides, dtypes, devices,
# out_dtype, defect): the module, the dtype codes and the strides handed to C++. Each signature is checked
# once; later calls with it build a key, look it up and launch (the per-call host cost bench/moe_combine.py
# reports as host_us). Bounded: a server whose token count changes every step meets a few thousand keys.
_PLANS: dict[tuple, tuple] = {}
_PLAN_LIMIT = 4096


def _meta(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def _device_index(device: torch.device) -> int:
    """-1 for the CPU, the CUDA/HIP device index otherwise; ValueError for any other device."""
    if device.type == "cpu":
        return -1
    if device.type == "cuda":
        return device.index if device.index is not None else torch.cuda.current_device()
    raise ValueError(f"device {device} is not supported; allowed: cpu, cuda (NVIDIA or ROCm)")


def _module(index: int) -> types.ModuleType:
    return cpu_module() if index < 0 else gpu_module()


def _stream(index: int) -> int:
    """The current stream's handle; torch's raw-stream accessor, which creates no Stream object."""
    return 0 if index < 0 else torch._C._cuda_getCurrentRawStream(index)


def _remember(key: tuple, plan: tuple) -> tuple:
    if len(_PLANS) >= _PLAN_LIMIT:
        _PLANS.clear()
    _PLANS[key] = plan
    return plan


def _combine_plan(key, expert_out, weights, shared, gate_logit, out_dtype, defect) -> tuple:
    op = "moe_combine" if gate_logit is None else "moe_combine_gate"
    if gate_logit is not None and shared is None:
        raise ValueError(f"{op}: shared is required (the gate scales the shared expert's output)")
    if defect not in DEFECTS:
        raise ValueError(f"{op}: defect must be one of {DEFECTS}, got {defect!r}")
    T, K, H, dtype, gate_1d = _check_combine(op, expert_out, weights, shared, gate_logit, out_dtype)
    index = _device_index(expert_out.device)
    # None: a last dimension with a stride other than 1, copied per call (strides taken from the copies).
    strides = None
    if _inner_contiguous_already(expert_out) and (shared is None or _inner_contiguous_already(shared)):
        strides = (
            expert_out.stride(0),
            expert_out.stride(1),
            weights.stride(0),
            weights.stride(1),
            _stride(shared, 0),
        )
    plan = (
        _module(index), index, T, K, H, dtype, DTYPE_CODES[dtype], DTYPE_CODES[expert_out.dtype],
        0 if shared is None else DTYPE_CODES[shared.dtype], strides,
        0 if gate_1d is None else gate_1d.stride(0),
    )  # fmt: skip
    return _remember(key, plan)


def combine_impl(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None,
    gate_logit: torch.Tensor | None,
    routed_scale: float,
    out_dtype: torch.dtype | None,
    defect: int = 0,
) -> torch.Tensor:
    """moe_combine (gate_logit None) or moe_combine_gate; ``defect`` != 0 only for negative controls."""
    key = (defect, out_dtype, _meta(expert_out), _meta(weights), _meta(shared), _meta(gate_logit))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _combine_plan(key, expert_out, weights, shared, gate_logit, out_dtype, defect)
    module, index, T, K, H, dtype, out_code, eo_code, sh_code, strides, gate_sr = plan
    if strides is None:
        expert_out = _inner_contiguous(expert_out)
        shared = None if shared is None else _inner_contiguous(shared)
        strides = (
            expert_out.stride(0),
            expert_out.stride(1),
            weights.stride(0),
            weights.stride(1),
            _stride(shared, 0),
        )
    out = torch.empty((T, H), dtype=dtype, device=expert_out.device)
    common = (
        out.data_ptr(), out_code, expert_out.data_ptr(), eo_code, weights.data_ptr(),
        0 if shared is None else shared.data_ptr(), sh_code,
    )  # fmt: skip
    if gate_logit is None:
        module.moe_combine(
            *common, T, K, H, out.stride(0), *strides, float(routed_scale), _stream(index), defect
        )
    else:
        module.moe_combine_gate(
            *common, gate_logit.data_ptr(), T, K, H, out.stride(0), *strides, gate_sr, float(routed_scale),
            _stream(index), defect,
        )  # fmt: skip
    return out


def _gate_plan(key, gate_logit, shared, out_dtype) -> tuple:
    op = "shared_expert_gate"
    _storage(op, "shared", shared)
    if shared.dim() != 2:
        raise ValueError(f"{op}: shared must be [T, C], got shape {tuple(shared.shape)}")
    T, C = shared.shape
    gate_1d = _gate_1d(op, gate_logit, T)
    _same_device(op, gate_logit=gate_1d, shared=shared)
    dtype = _out_dtype(op, out_dtype, shared.dtype)
    index = _device_index(shared.device)
    plan = (_module(index), index, T, C, dtype, DTYPE_CODES[dtype], DTYPE_CODES[shared.dtype],
            not _inner_contiguous_already(shared), gate_1d.stride(0))  # fmt: skip
    return _remember(key, plan)


def shared_expert_gate_impl(
    gate_logit: torch.Tensor, shared: torch.Tensor, out_dtype: torch.dtype | None
) -> torch.Tensor:
    key = ("gate", out_dtype, _meta(gate_logit), _meta(shared))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _gate_plan(key, gate_logit, shared, out_dtype)
    module, index, T, C, dtype, out_code, sh_code, copy_shared, gate_sr = plan
    if copy_shared:
        shared = shared.contiguous()
    out = torch.empty((T, C), dtype=dtype, device=shared.device)
    module.shared_expert_gate(
        out.data_ptr(), out_code, gate_logit.data_ptr(), shared.data_ptr(), sh_code,
        T, C, out.stride(0), gate_sr, shared.stride(0), _stream(index),
    )  # fmt: skip
    return out


# ------------------------------------------------------------------------------------ registration


def shared_expert_gate(
    gate_logit: torch.Tensor, shared: torch.Tensor, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """out[t, c] = sigmoid(gate_logit[t]) * shared[t, c]; gate_logit f32 [T] or [T, 1], shared f32/bf16 [T, C]."""
    return shared_expert_gate_impl(gate_logit, shared, out_dtype)


def _shared_expert_gate_fake(gate_logit, shared, out_dtype=None):
    op = "shared_expert_gate"
    _storage(op, "shared", shared)
    if shared.dim() != 2:
        raise ValueError(f"{op}: shared must be [T, C], got shape {tuple(shared.shape)}")
    _gate_1d(op, gate_logit, shared.shape[0])
    return shared.new_empty(shared.shape, dtype=_out_dtype(op, out_dtype, shared.dtype))


def moe_combine(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None = None,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """out[t, h] = routed_scale * sum_k weights[t, k] * expert_out[t, k, h] (+ shared[t, h]).

    expert_out f32/bf16 [T, K, H], weights f32 [T, K], shared f32/bf16 [T, H] or None; out defaults to
    expert_out's dtype. routed_scale scales the routed sum before the shared term is added.
    """
    return combine_impl(expert_out, weights, shared, None, routed_scale, out_dtype)


def _moe_combine_fake(expert_out, weights, shared=None, routed_scale=1.0, out_dtype=None):
    T, _, H, dtype, _ = _check_combine("moe_combine", expert_out, weights, shared, None, out_dtype)
    return expert_out.new_empty((T, H), dtype=dtype)


def moe_combine_gate(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor,
    gate_logit: torch.Tensor,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """moe_combine with the shared-expert gate folded in: the shared term is
    bf16(sigmoid(gate_logit[t]) * shared[t, h]) converted back to f32 (the donor's double round), then added."""
    return combine_impl(expert_out, weights, shared, gate_logit, routed_scale, out_dtype)


def _moe_combine_gate_fake(expert_out, weights, shared, gate_logit, routed_scale=1.0, out_dtype=None):
    T, _, H, dtype, _ = _check_combine("moe_combine_gate", expert_out, weights, shared, gate_logit, out_dtype)
    return expert_out.new_empty((T, H), dtype=dtype)


def moe_combine_negative_control(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None = None,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
    defect: int = 1,
) -> torch.Tensor:
    """NEGATIVE CONTROL ONLY (cases/counterexamples): moe_combine with a kernel defect switched on at run
    time. defect=1: the bf16 store truncates instead of rounding to nearest even (a wrong bf16 store
    boundary, vllm.cpp#509 review); the f32 arm is untouched, so only bf16-output cases can see it."""
    return combine_impl(expert_out, weights, shared, None, routed_scale, out_dtype, defect)


def _negative_control_fake(expert_out, weights, shared=None, routed_scale=1.0, out_dtype=None, defect=1):
    T, _, H, dtype, _ = _check_combine("moe_combine", expert_out, weights, shared, None, out_dtype)
    return expert_out.new_empty((T, H), dtype=dtype)


custom_ops.define("graphsafe::shared_expert_gate", shared_expert_gate, _shared_expert_gate_fake)
custom_ops.define("graphsafe::moe_combine", moe_combine, _moe_combine_fake)
custom_ops.define("graphsafe::moe_combine_gate", moe_combine_gate, _moe_combine_gate_fake)
custom_ops.define(
    "graphsafe::moe_combine_negative_control", moe_combine_negative_control, _negative_control_fake
)
