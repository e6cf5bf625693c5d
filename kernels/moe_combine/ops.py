"""The moe_combine family's torch custom ops: ``torch.ops.graphsafe.moe_combine``, ``moe_combine_gate``,
``shared_expert_gate`` and the negative control ``moe_combine_negative_control``.

Role: defines each op ``graphsafe::<name>`` with a fake implementation (kernels/common/custom_ops.py: native
ops, without custom_op's per-call layers) so the dispatcher, ``torch.compile``, ``opcheck`` and the CPU graph
backend see it as one node. An eager call goes from torch's dispatcher to a C++ kernel (moe_combine.torch.cpp:
in the g++ module (moe_combine.cpp) for CPU tensors, in the nvcc/hipcc module (moe_combine.hip) for CUDA
tensors of NVIDIA or ROCm builds of torch), registered by this module's loaders on the first call on a kind
of device. Each op allocates its output.

Unsupported dtypes, shapes and devices are refused with ValueError naming the argument and the allowed
values, in the fake implementation and, once per argument signature, in the planner ops the C++ kernels ask
before any pointer is read (the C++ entry points refuse them again: vllm.cpp#509). Importing this module
compiles nothing; the first call on a device builds.
"""

from __future__ import annotations

import pathlib
import types

import torch

from graphsafe.kernels.common import custom_ops, native

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


def _check_gate(gate_logit, shared, out_dtype) -> tuple[torch.Tensor, torch.dtype]:
    """shared_expert_gate's checks, shared by its planner and fake implementations; returns (gate_logit as [T],
    out dtype)."""
    op = "shared_expert_gate"
    _storage(op, "shared", shared)
    if shared.dim() != 2:
        raise ValueError(f"{op}: shared must be [T, C], got shape {tuple(shared.shape)}")
    gate_1d = _gate_1d(op, gate_logit, shared.shape[0])
    _same_device(op, gate_logit=gate_1d, shared=shared)
    return gate_1d, _out_dtype(op, out_dtype, shared.dtype)


# --------------------------------------------------------------------------------- implementations
# Planner ops: the family's C++ kernels (moe_combine.torch.cpp) call them once per argument signature (shapes,
# strides, dtypes, devices, out_dtype, defect); they refuse bad arguments by name and return what C++ needs as a
# list of ints.


def _device_index(device: torch.device) -> int:
    """-1 for the CPU, the CUDA/HIP device index otherwise; ValueError for any other device."""
    if device.type == "cpu":
        return -1
    if device.type == "cuda":
        return device.index if device.index is not None else torch.cuda.current_device()
    raise ValueError(f"device {device} is not supported; allowed: cpu, cuda (NVIDIA or ROCm)")


def _module(index: int) -> types.ModuleType:
    return cpu_module() if index < 0 else gpu_module()


def moe_combine_plan(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None,
    gate_logit: torch.Tensor | None,
    out_dtype: torch.dtype | None,
    defect: int,
) -> list[int]:
    """graphsafe::_moe_combine_plan, for moe_combine (gate_logit None), moe_combine_gate and the negative
    control: [out dtype code, expert_out dtype code, shared dtype code or 0, gate_logit's row stride or 0]."""
    op = "moe_combine" if gate_logit is None else "moe_combine_gate"
    if gate_logit is not None and shared is None:
        raise ValueError(f"{op}: shared is required (the gate scales the shared expert's output)")
    if defect not in DEFECTS:
        raise ValueError(f"{op}: defect must be one of {DEFECTS}, got {defect!r}")
    _T, _K, _H, dtype, gate_1d = _check_combine(op, expert_out, weights, shared, gate_logit, out_dtype)
    _device_index(expert_out.device)
    return [
        DTYPE_CODES[dtype],
        DTYPE_CODES[expert_out.dtype],
        0 if shared is None else DTYPE_CODES[shared.dtype],
        0 if gate_1d is None else gate_1d.stride(0),
    ]


def shared_expert_gate_plan(
    gate_logit: torch.Tensor, shared: torch.Tensor, out_dtype: torch.dtype | None
) -> list[int]:
    """graphsafe::_shared_expert_gate_plan: [out dtype code, shared dtype code, 0, gate_logit's row stride]."""
    gate_1d, dtype = _check_gate(gate_logit, shared, out_dtype)
    _device_index(shared.device)
    return [DTYPE_CODES[dtype], DTYPE_CODES[shared.dtype], 0, gate_1d.stride(0)]


def _load(qualname: str, device: torch.device) -> None:
    """The loaders' step (kernels/common/custom_ops.py, native ops): the device's module registers its kernels."""
    custom_ops.register_native(qualname, _module(_device_index(device)), device)


def combine_impl(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None,
    gate_logit: torch.Tensor | None,
    routed_scale: float,
    out_dtype: torch.dtype | None,
    defect: int = 0,
) -> torch.Tensor:
    """The loader of moe_combine (gate_logit None), moe_combine_gate and the negative control (``defect`` != 0):
    checks, registers the device's C++ kernels, and calls the op again, which now reaches them."""
    moe_combine_plan(expert_out, weights, shared, gate_logit, out_dtype, defect)
    if gate_logit is not None:
        _load("graphsafe::moe_combine_gate", expert_out.device)
        return torch.ops.graphsafe.moe_combine_gate.default(
            expert_out, weights, shared, gate_logit, routed_scale, out_dtype
        )
    if defect:
        _load("graphsafe::moe_combine_negative_control", expert_out.device)
        return torch.ops.graphsafe.moe_combine_negative_control.default(
            expert_out, weights, shared, routed_scale, out_dtype, defect
        )
    _load("graphsafe::moe_combine", expert_out.device)
    return torch.ops.graphsafe.moe_combine.default(expert_out, weights, shared, routed_scale, out_dtype)


def shared_expert_gate_impl(
    gate_logit: torch.Tensor, shared: torch.Tensor, out_dtype: torch.dtype | None
) -> torch.Tensor:
    """The loader of shared_expert_gate (combine_impl's note)."""
    shared_expert_gate_plan(gate_logit, shared, out_dtype)
    _load("graphsafe::shared_expert_gate", shared.device)
    return torch.ops.graphsafe.shared_expert_gate.default(gate_logit, shared, out_dtype)


# ------------------------------------------------------------------------------------ registration


def shared_expert_gate(
    gate_logit: torch.Tensor, shared: torch.Tensor, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """out[t, c] = sigmoid(gate_logit[t]) * shared[t, c]; gate_logit f32 [T] or [T, 1], shared f32/bf16 [T, C]."""
    return shared_expert_gate_impl(gate_logit, shared, out_dtype)


def _shared_expert_gate_fake(gate_logit, shared, out_dtype=None):
    return shared.new_empty(shared.shape, dtype=_check_gate(gate_logit, shared, out_dtype)[1])


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


custom_ops.define("graphsafe::shared_expert_gate", shared_expert_gate, _shared_expert_gate_fake, native=True)
custom_ops.define("graphsafe::moe_combine", moe_combine, _moe_combine_fake, native=True)
custom_ops.define("graphsafe::moe_combine_gate", moe_combine_gate, _moe_combine_gate_fake, native=True)
custom_ops.define(
    "graphsafe::moe_combine_negative_control",
    moe_combine_negative_control,
    _negative_control_fake,
    native=True,
)
custom_ops.define_planner(
    "graphsafe::_moe_combine_plan",
    moe_combine_plan,
    "(Tensor expert_out, Tensor weights, Tensor? shared, Tensor? gate_logit, ScalarType? out_dtype, int defect)"
    " -> int[]",
)
custom_ops.define_planner(
    "graphsafe::_shared_expert_gate_plan",
    shared_expert_gate_plan,
    "(Tensor gate_logit, Tensor shared, ScalarType? out_dtype) -> int[]",
)
