"""Torch operator ``graphsafe::moe_gemm``: grouped, weight-quantized MoE GEMM over a sync-free block map.

Role: the dispatcher face of moe_gemm.hip (CUDA tensors: nvcc/hipcc module) and moe_gemm.cpp (CPU tensors:
g++ module). An eager call goes from torch's dispatcher to a C++ kernel (moe_gemm.torch.cpp, registered at
the CPU or CUDA key by this module's loader on the first call: kernels/common/custom_ops.py, native ops), which
asks this module's planner op (``moe_gemm_plan``: every ValueError check) once per argument signature and
then allocates the output and launches without Python. The GPU's CUDA-core kernel does the CPU twin's f32
math in the same order (bitwise identical outputs); for slots of more than 4 rows in bf16/mxfp8/block_fp8,
and for every MXFP4 slot, on CUDA sm_80+ a tensor-core kernel runs instead (slots of up to 16 rows: the
shared-memory ring kernel; larger: on the H100 / H200 (sm_90a builds) the warpgroup-MMA kernels, elsewhere
64 x 256 shared-memory tiles per block, 128 x 256 from block_m 128), deterministic and within TOLERANCE of
the twin but not bitwise equal (`kernel_path` says which family runs). On AMD gfx90a/gfx94x/gfx950 the same
slots go to an MFMA kernel (moe_gemm.hip, gs_moe_gemm_mfma_kernel: compile-checked only, no AMD GPU was
available). The fp8 / MXFP4 tensor-core paths read x as row-scaled f16 that the op's first kernel writes into
a workspace each call allocates (moe_gemm.torch.cpp states the workspace rule). The CUDA-core and bf16 ring
kernels zero-fill in their own grids: one launch per call. The op takes the weight as the [E, K, N] view of
its [E, N, K] storage (`kn_views`) and hands C++ the view's strides: no per-call permute().contiguous()
(aiter#5831 defect 3: 2.4 ms and a doubled weight footprint per call at E=32, N=2048, K=6144 on gfx942).

The output comes from torch.empty and the op zero-fills exactly the rows no slot covers (foreign experts
under expert parallelism, -1 padding) on the device; `zero_unwritten=False` exists only for the negative
control (cases/counterexamples/moe_gemm_empty_output.py), which must come out `uninitialized`.
Unsupported dtypes/shapes are refused with ValueError naming the argument and the allowed values, in the
fake implementation too, before any pointer reaches C++.
"""

from __future__ import annotations

import pathlib
import types

import torch
from torch import Tensor

from graphsafe.kernels.common import custom_ops, native
from graphsafe.kernels.common.quant import FORMAT_CODES, FORMATS, QuantizedWeight

FAMILY_DIR = pathlib.Path(__file__).resolve().parent

WEIGHT_DTYPES = {
    "bf16": torch.bfloat16,
    "mxfp8": torch.float8_e4m3fn,
    "fp8_fnuz": torch.float8_e4m3fnuz,
    "block_fp8": torch.float8_e4m3fn,
    "mxfp4": torch.uint8,
    "nvfp4": torch.uint8,
    "q4_0": torch.uint8,
}
SCALE_DTYPES = {
    "mxfp8": torch.uint8,  # E8M0 bits
    "fp8_fnuz": torch.float32,
    "block_fp8": torch.float32,
    "mxfp4": torch.uint8,
    "nvfp4": torch.float8_e4m3fn,
    "q4_0": torch.float16,
}
SCALE_K_BLOCK = {"mxfp8": 32, "mxfp4": 32, "nvfp4": 16, "q4_0": 32, "block_fp8": 128, "fp8_fnuz": 0}
SCALE_N_BLOCK = {"block_fp8": 128}
PACKED = ("mxfp4", "nvfp4", "q4_0")  # two K elements per byte


native.declare(FAMILY_DIR, "moe_gemm", "cpu")
native.declare(FAMILY_DIR, "moe_gemm", "gpu")


def cpu_module() -> types.ModuleType:
    """The g++ build of moe_gemm.cpp, the CUDA-core kernel's bitwise twin (it includes moe_gemm.hip)."""
    return native.load(FAMILY_DIR, "moe_gemm", "cpu")


def gpu_module() -> types.ModuleType:
    """The nvcc (NVIDIA) or hipcc (ROCm) build of moe_gemm.hip for the current device."""
    return native.load(FAMILY_DIR, "moe_gemm", "gpu")


# ------------------------------------------------------------------------------------------ validation


def _validate(x, w, w_scale, w_global, block_map, fmt) -> tuple[int, int, int]:
    """Returns (R, K, N); raises ValueError naming the argument and the allowed values."""
    if fmt not in FORMAT_CODES:
        raise ValueError(f"moe_gemm: fmt must be one of {FORMATS}, got {fmt!r}")
    if x.dtype != torch.bfloat16 or x.dim() != 2:
        raise ValueError(
            f"moe_gemm: x must be a 2-D torch.bfloat16 tensor [R, K], got {x.dtype} {tuple(x.shape)}"
        )
    if x.shape[1] > 0 and x.stride(1) != 1:
        raise ValueError(f"moe_gemm: x must be contiguous along K (stride(1) == 1), got strides {x.stride()}")
    r, k = x.shape
    if k == 0 or k % 32 != 0:
        raise ValueError(f"moe_gemm: K (x.shape[1]) must be a positive multiple of 32, got {k}")
    if w.dtype != WEIGHT_DTYPES[fmt] or w.dim() != 3:
        raise ValueError(
            f"moe_gemm: w for fmt {fmt!r} must be a 3-D {WEIGHT_DTYPES[fmt]} [E, K, N] view, got {w.dtype} {tuple(w.shape)}"
        )
    e, kw, n = w.shape
    want_kw = k // 2 if fmt in PACKED else k
    if kw != want_kw:
        raise ValueError(f"moe_gemm: w.shape[1] must be {want_kw} for fmt {fmt!r} with K={k}, got {kw}")
    if fmt != "bf16":
        if w_scale is None or w_scale.dtype != SCALE_DTYPES[fmt] or w_scale.dim() != 3:
            got = None if w_scale is None else f"{w_scale.dtype} {tuple(w_scale.shape)}"
            raise ValueError(
                f"moe_gemm: w_scale for fmt {fmt!r} must be a 3-D {SCALE_DTYPES[fmt]} tensor, got {got}"
            )
        kb, nb = SCALE_K_BLOCK[fmt], SCALE_N_BLOCK.get(fmt, 1)
        want = (e, -(-k // kb) if kb else 1, -(-n // nb))
        if tuple(w_scale.shape) != want:
            raise ValueError(
                f"moe_gemm: w_scale for fmt {fmt!r} must have shape {want}, got {tuple(w_scale.shape)}"
            )
    if fmt == "nvfp4" and (
        w_global is None or w_global.dtype != torch.float32 or tuple(w_global.shape) != (e,)
    ):
        got = None if w_global is None else f"{w_global.dtype} {tuple(w_global.shape)}"
        raise ValueError(f"moe_gemm: w_global for nvfp4 must be a torch.float32 tensor [{e}], got {got}")
    if block_map.dtype != torch.int32 or block_map.dim() != 2 or block_map.shape[1] != 3:
        raise ValueError(
            f"moe_gemm: block_map must be torch.int32 [S, 3], got {block_map.dtype} {tuple(block_map.shape)}"
        )
    tensors = [t for t in (x, w, w_scale, w_global, block_map) if t is not None]
    if any(t.device != x.device for t in tensors):
        raise ValueError(f"moe_gemm: all tensors must be on x's device {x.device}")
    return r, k, n


def _check_block_m(block_m) -> None:
    if not isinstance(block_m, int) or block_m < 1:
        raise ValueError(f"moe_gemm: block_m must be a positive int, got {block_m!r}")


def _module_for(device: torch.device) -> types.ModuleType:
    if device.type == "cpu":
        return cpu_module()
    if device.type == "cuda":
        return gpu_module()
    raise ValueError(f"moe_gemm: device {device} is not supported; allowed: cpu, cuda (NVIDIA or ROCm)")


def moe_gemm_plan(
    x: Tensor,
    w: Tensor,
    w_scale: Tensor | None,
    w_global: Tensor | None,
    block_map: Tensor,
    fmt: str,
    block_m: int,
) -> list[int]:
    """The planner op graphsafe::_moe_gemm_plan, which the C++ kernel (moe_gemm.torch.cpp) calls once per
    argument signature: the checks (ValueError naming the argument and the allowed values), then what C++ needs
    to build the signature's plan: [format code, scale K block, scale N block]."""
    _validate(x, w, w_scale, w_global, block_map, fmt)
    _check_block_m(block_m)
    return [FORMAT_CODES[fmt], SCALE_K_BLOCK.get(fmt, 0), SCALE_N_BLOCK.get(fmt, 1)]


def moe_gemm_impl(
    x: Tensor,
    w: Tensor,
    w_scale: Tensor | None,
    w_global: Tensor | None,
    block_map: Tensor,
    fmt: str,
    block_m: int,
    zero_unwritten: bool = True,
) -> Tensor:
    """The loader (kernels/common/custom_ops.py, native ops): the first call on a kind of device checks the
    arguments, builds or loads the device's module, registers its C++ kernel and calls the op again."""
    moe_gemm_plan(x, w, w_scale, w_global, block_map, fmt, block_m)  # its checks, before anything is built
    custom_ops.register_native("graphsafe::moe_gemm", _module_for(x.device), x.device)
    return moe_gemm_op(x, w, w_scale, w_global, block_map, fmt, block_m, zero_unwritten)


def module_and_args(x, w, w_scale, w_global, block_map, fmt, out, block_m) -> tuple[types.ModuleType, list]:
    """The C++ module for x's device and the pointer/size/stride arguments both entry points share. The
    caller keeps every tensor whose pointer is passed alive (block_map must already be contiguous)."""
    module = _module_for(x.device)
    if not block_map.is_contiguous():
        raise ValueError("moe_gemm: internal: block_map must be made contiguous by the caller")
    s = w_scale if w_scale is not None else w
    ss = s.stride() if w_scale is not None else (0, 0, 0)
    g = w_global if w_global is not None else w
    args = [
        FORMAT_CODES[fmt],
        x.data_ptr(),
        x.stride(0),
        x.shape[0],
        x.shape[1],
        w.shape[2],
        w.shape[0],
        w.data_ptr(),
        *w.stride(),
        s.data_ptr() if w_scale is not None else 0,
        *ss,
        SCALE_K_BLOCK.get(fmt, 0),
        SCALE_N_BLOCK.get(fmt, 1),
        g.data_ptr() if w_global is not None else 0,
        w_global.stride(0) if w_global is not None else 0,
        block_map.data_ptr(),
        block_map.shape[0],
        out.data_ptr(),
        block_m,
    ]
    return module, args


def kernel_path(x: Tensor, q: QuantizedWeight, block_map: Tensor, block_m: int) -> str:
    """Which kernel moe_gemm runs for these arguments: "cuda_core" (the CPU twin's bits) or "tensor_core"
    (CUDA sm_80+ or AMD gfx90a/gfx94x/gfx950 (MFMA), bf16/mxfp8/block_fp8, block_m > 4; on CUDA sm_80+ also
    mxfp4 at every block_m; 16-byte-aligned K-contiguous operands: deterministic,
    within TOLERANCE of the twin but not bitwise equal). The CPU module always answers "cuda_core"."""
    w, s, g = kn_views(q)
    _validate(x, w, s, g, block_map, q.fmt)
    out = torch.empty(x.shape[0], w.shape[2], dtype=torch.bfloat16, device=x.device)
    block_map = block_map.contiguous()
    module, args = module_and_args(x, w, s, g, block_map, q.fmt, out, block_m)
    return module.kernel_path(*args)


def _moe_gemm_fake(x, w, w_scale, w_global, block_map, fmt, block_m, zero_unwritten=True):
    r, _k, n = _validate(x, w, w_scale, w_global, block_map, fmt)
    return x.new_empty(r, n)


moe_gemm_op = custom_ops.define("graphsafe::moe_gemm", moe_gemm_impl, _moe_gemm_fake, native=True)
custom_ops.define_planner(
    "graphsafe::_moe_gemm_plan",
    moe_gemm_plan,
    "(Tensor x, Tensor w, Tensor? w_scale, Tensor? w_global, Tensor block_map, str fmt, int block_m) -> int[]",
)


# ------------------------------------------------------------------------------------------ helpers


def kn_views(q: QuantizedWeight) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The [E, K, N] views of an [E, N, K]-stored QuantizedWeight (no copy): what the op consumes."""
    scale = q.scale.transpose(-1, -2) if q.scale is not None else None
    return q.data.transpose(-1, -2), scale, q.global_scale


def moe_gemm(
    x: Tensor, q: QuantizedWeight, block_map: Tensor, block_m: int, zero_unwritten: bool = True
) -> Tensor:
    """Convenience wrapper: y[R, N] = x @ W[e] per slot, W stored [E, N, K] as `q`."""
    w, s, g = kn_views(q)
    return torch.ops.graphsafe.moe_gemm(x, w, s, g, block_map, q.fmt, block_m, zero_unwritten)
