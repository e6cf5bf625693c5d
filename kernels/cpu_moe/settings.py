"""CPU/hybrid MoE, what every part of the package shares: weight formats and error thresholds, the handshake
modes and their device maps, slot and timeout constants, errors, and the native modules' builders.

Handshake modes (`HANDSHAKE_MODES`), one executor per device:
- CPU backend: `direct` (the executor as one custom op, graphsafe::cpu_moe), `recorded` (staged copies plus
  a notify/wait custom op: the emulated graph re-runs all three) and `unrecorded` (the same, but notify/wait
  is a plain pybind11 call: it runs once, at capture, as ROCm's unrecorded memops did: stale_replay). `eager`
  also runs on CPU (direct computation; capture refused as on a GPU).
- GPU: `memop` (stream write/wait-value on mapped host signal words, recorded as graph nodes; HIP adds them
  as explicit batch-memop nodes), `hostfn` (a host-function node runs the CPU layer), `eager` (synchronizing
  copies; capture raises HandshakeNotCapturable).

NOTE on devices (what is honest on each backend): the CPU modes emulate a graph with the CPU backend's
dispatcher recorder, which a real CUDA/HIP graph cannot record (a CPU op under CUDA capture is either a host
sync or runs once at capture). So a CPU-mode executor refuses GPU tensors by name, and GPU tensors always
take the real handshake: hidden states on the GPU, experts on the CPU, copy GPU->host, compute, copy back
(the hybrid layer of FreeToken issue #350). Cases are registered at import, before the backend is chosen, so
the cases (cases/cpu_moe.py, cases/counterexamples/issue350.py) pick the executor from their inputs' device:
`HANDSHAKE_ON_GPU` maps each emulated handshake to the GPU handshake with the same graph semantics.
Devices compare by type, and by index only when both name one (`same_device`: `cuda` matches `cuda:0`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from graphsafe.kernels.common import native

FAMILY_DIR = Path(__file__).resolve().parent
# The formats the C++ executor decodes (cpu_moe_formats.h), a subset of kernels/common/quant.py FORMATS; their
# codes are quant.FORMAT_CODES.
FORMATS = ("bf16", "mxfp4", "nvfp4", "q4_0", "block_fp8")
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1}  # cpu_moe.cpp DType

# Relative-error thresholds, max|out-ref| / max|ref|, the ones FreeToken issue #350's tests use: bf16 and q4_0
# 0.02, nvfp4 0.03, mxfp4 0.04 (a max-relative measure, not elementwise: near-zero outputs of a quantized layer
# carry the absolute error of the large ones). block_fp8: 0.02, because the reference dequantizes the very
# same e4m3 bytes and f32 scales (bit-identical rows, tests check it), so as for bf16 the only error left
# is the bf16 rounding of h and of the output (2^-8 relative each) plus f32 summation order.
THRESHOLDS = {"bf16": 0.02, "q4_0": 0.02, "mxfp4": 0.04, "nvfp4": 0.03, "block_fp8": 0.02}

CPU_MODES = ("direct", "recorded", "unrecorded")
GPU_MODES = ("memop", "hostfn", "eager")
HANDSHAKE_MODES = CPU_MODES + GPU_MODES
# Modes an executor on each device type runs (the module note on devices).
DEVICE_MODES = {"cpu": (*CPU_MODES, "eager"), "cuda": GPU_MODES}
# The GPU handshake with the same graph semantics as each emulated one: (mode, explicit batch-memop nodes,
# Faults field set). recorded: notify/wait are explicit graph nodes (the custom op; on a GPU explicit
# batch-memop nodes, the path HIP always takes). direct: the CPU layer is one graph node (the custom op; a
# host-function node). unrecorded: notify/wait run at capture only (a plain call; memops issued on a
# non-capturing stream, the ROCm failure shape).
HANDSHAKE_ON_GPU: dict[str, tuple[str, bool, str]] = {
    "recorded": ("memop", True, ""),
    "direct": ("hostfn", False, ""),
    "unrecorded": ("memop", False, "unrecorded_memop"),
}
# ... and the emulated handshake for each GPU one (a GPU case run on the CPU backend).
HANDSHAKE_ON_CPU = {"memop": "recorded", "hostfn": "direct", "eager": "eager"}
# Modes whose handshake leaves a gap the GPU part can fill while the CPU computes (overlap=True). `direct`
# is one op and `eager` one synchronous call: nothing can run inside them, so overlap is refused there.
OVERLAP_MODES = ("recorded", "unrecorded", "memop", "hostfn")

SIGNAL_STRIDE = 128  # bytes per slot in the signal block: req at +0, done at +64 (cpu_moe.cpp kSignalStride)
# The engine's usual max decode batch; graph sizes may exceed it (FreeToken issue #350: a fixed capacity of 16
# slots failed for larger configured graph sizes, so capacity is derived from them).
DEFAULT_DECODE_LIMIT = 512
PROBE_SLOTS = 4  # spare slots for probes: a slot a failed probe used is quarantined, never reused
PROBE_TOKENS = 2
# A GPU wait-value has no timeout; the emulated one waits this long before the op reports a hang.
EMULATED_WAIT_TIMEOUT_S = 30.0
# close() on a GPU waits this long for the device to drain before its watchdog answers the executor's waits.
# A decode step's layer with its handshake replays in about half a millisecond on the H200 (0.53-0.57 ms,
# reports/performance.md), so 10 s is only ever reached by a wait that nobody answers.
CLOSE_DRAIN_S = 10.0


class HandshakeError(RuntimeError):
    """The CPU side did not answer a handshake (the watchdog released it or the emulated wait timed out)."""


class HandshakeNotCapturable(RuntimeError):
    """The `eager` handshake (synchronizing copies) was called under graph capture."""


class UnsafeExecutorCapture(RuntimeError):
    """Direct capture of an executor whose handshake probe failed (or was never run)."""


def check_choice(field_name: str, value: Any, allowed: Sequence[Any]) -> None:
    """ValueError naming the field and the allowed values unless `value` is one of them."""
    if value not in allowed:
        raise ValueError(f"{field_name} must be one of {tuple(allowed)}, got {value!r}")


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """Same device type, and the same index where both name one: torch.device("cuda") != "cuda:0" in torch,
    yet a tensor made with device "cuda" lives on cuda:0 (the current device)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index


# ------------------------------------------------------------------------------------ native modules


native.declare(FAMILY_DIR, "cpu_moe", "cpu", ("-O3",))
native.declare(FAMILY_DIR, "handshake", "gpu")


def cpu_module() -> ModuleType:
    """The C++ executor, cpu_moe.cpp (g++, no torch headers; built once, then cached on disk)."""
    return native.load(FAMILY_DIR, "cpu_moe", "cpu", ("-O3",))


def handshake_module() -> ModuleType:
    """The GPU half, handshake.hip (nvcc compiles it as CUDA, hipcc on ROCm); needs a device."""
    return native.load(FAMILY_DIR, "handshake", "gpu")
