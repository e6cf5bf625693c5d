"""CPU/hybrid MoE: the C++ expert executor's Python side, its GPU<->CPU handshake, the fail-closed probe,
its watchdog, and tensor-parallel consensus (seed 000, FreeToken #350 and its fix).

Role: one decode-size MoE layer whose experts run on CPU worker threads (kernels/cpu/cpu_moe.cpp). On a GPU,
every decode step must, on every graph replay: copy hidden states, expert ids and router weights GPU->host,
notify the CPU workers, wait for their result, copy it host->GPU (kernels/hip/handshake.hip). If replay
skips the notify/wait, the output is finite and stale (seed 000: graph error 0.28-0.57 against eager 0.002).

This module is the layer's public face: it re-exports every name of the modules below (the code lives there,
grouped by role), and importing it registers the torch custom ops (graphsafe::cpu_moe*) once. Each module
opens with its part of this module's former note:
- kernels/cpu_moe_common.py: formats, thresholds, handshake modes and their device maps, slot and timeout
  constants, errors, the native modules' builders, the registry of live executors (notes on the handshake
  modes and on devices).
- kernels/cpu_moe_weights.py: expert banks, the shared expert (the GPU part), routing inputs, the float64
  oracles.
- kernels/cpu_moe_executor.py: CpuMoeExecutor and Faults (note on the hybrid layer).
- kernels/cpu_moe_ops.py: the handshake on the CPU backend: emulated notify/wait and the torch custom ops.
- kernels/cpu_moe_gpu.py: the handshake on a GPU (kernels/hip/handshake.hip's entry points).
- kernels/cpu_moe_watchdog.py: Watchdog and wait_guard (note on waits).
- kernels/cpu_moe_probe.py: the fail-closed probe, and tensor-parallel consensus.
Imports between them run one way (common; weights, watchdog, ops, gpu; executor; probe), so none is circular.
"""

from __future__ import annotations

from kernels.cpu_moe_common import (
    _DTYPE_CODES,
    _EXECUTORS,
    _FORMAT_CODES,
    _HANDLES,
    _SRC,
    CLOSE_DRAIN_S,
    CPU_MODES,
    DEFAULT_DECODE_LIMIT,
    DEVICE_MODES,
    EMULATED_WAIT_TIMEOUT_S,
    FORMATS,
    GPU_MODES,
    HANDSHAKE_MODES,
    HANDSHAKE_ON_CPU,
    HANDSHAKE_ON_GPU,
    OVERLAP_MODES,
    PROBE_SLOTS,
    PROBE_TOKENS,
    SIGNAL_STRIDE,
    THRESHOLDS,
    HandshakeError,
    HandshakeNotCapturable,
    UnsafeExecutorCapture,
    _choice,
    _executor,
    cpu_module,
    handshake_module,
    same_device,
)
from kernels.cpu_moe_executor import CpuMoeExecutor, Faults, _check_gpu_part, _Slot
from kernels.cpu_moe_gpu import (
    FLAG_EXPLICIT_NODES,
    FLAG_INJECT_UNRECORDED,
    HS_HOSTFN,
    HS_MEMOP,
    _enqueue,
    _enqueue_notify,
    _enqueue_wait,
    _gpu_eager,
    _gpu_forward,
    _gpu_overlapped,
    _handshake_flags,
    _hs_mode,
)
from kernels.cpu_moe_ops import (
    _cpu_capturing,
    _cpu_moe_op,
    _drain_queued,
    _join_queued_wait,
    _notify,
    _notify_wait,
    _plain_notify_wait,
    _queue_notify_wait,
    _QueuedWait,
    _slot_by_index,
    _stage_in,
    _stage_out,
    _wait,
    capturing,
)
from kernels.cpu_moe_probe import (
    _ABANDONED_GRAPHS,
    ProbeResult,
    _CpuProbe,
    _GpuProbe,
    _next_probe_slot,
    consensus,
    probe_and_enable,
    probe_handshake,
)
from kernels.cpu_moe_watchdog import Watchdog, _release_all_live, wait_guard
from kernels.cpu_moe_weights import (
    ExpertBank,
    SharedExpert,
    _reference_moe_f64,
    make_bank,
    make_routing,
    make_shared_expert,
    reference_layer,
    reference_moe,
)

__all__ = [
    "CLOSE_DRAIN_S",
    "CPU_MODES",
    "DEFAULT_DECODE_LIMIT",
    "DEVICE_MODES",
    "EMULATED_WAIT_TIMEOUT_S",
    "FLAG_EXPLICIT_NODES",
    "FLAG_INJECT_UNRECORDED",
    "FORMATS",
    "GPU_MODES",
    "HANDSHAKE_MODES",
    "HANDSHAKE_ON_CPU",
    "HANDSHAKE_ON_GPU",
    "HS_HOSTFN",
    "HS_MEMOP",
    "OVERLAP_MODES",
    "PROBE_SLOTS",
    "PROBE_TOKENS",
    "SIGNAL_STRIDE",
    "THRESHOLDS",
    "CpuMoeExecutor",
    "ExpertBank",
    "Faults",
    "HandshakeError",
    "HandshakeNotCapturable",
    "ProbeResult",
    "SharedExpert",
    "UnsafeExecutorCapture",
    "Watchdog",
    "capturing",
    "consensus",
    "cpu_module",
    "handshake_module",
    "make_bank",
    "make_routing",
    "make_shared_expert",
    "probe_and_enable",
    "probe_handshake",
    "reference_layer",
    "reference_moe",
    "same_device",
    "wait_guard",
]
# The private names too, as reachable here as before the split (tests read _FORMAT_CODES).
__all__ += [
    "_ABANDONED_GRAPHS",
    "_DTYPE_CODES",
    "_EXECUTORS",
    "_FORMAT_CODES",
    "_HANDLES",
    "_SRC",
    "_CpuProbe",
    "_GpuProbe",
    "_QueuedWait",
    "_Slot",
    "_check_gpu_part",
    "_choice",
    "_cpu_capturing",
    "_cpu_moe_op",
    "_drain_queued",
    "_enqueue",
    "_enqueue_notify",
    "_enqueue_wait",
    "_executor",
    "_gpu_eager",
    "_gpu_forward",
    "_gpu_overlapped",
    "_handshake_flags",
    "_hs_mode",
    "_join_queued_wait",
    "_next_probe_slot",
    "_notify",
    "_notify_wait",
    "_plain_notify_wait",
    "_queue_notify_wait",
    "_reference_moe_f64",
    "_release_all_live",
    "_slot_by_index",
    "_stage_in",
    "_stage_out",
    "_wait",
]
