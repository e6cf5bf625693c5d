"""CPU/hybrid MoE (FreeToken issue #350 and its fix): one decode-size MoE layer whose experts run on CPU worker
threads (cpu_moe.cpp), its GPU<->CPU handshake (handshake.hip), the fail-closed probe, its watchdog, and
tensor-parallel consensus.

On a GPU every decode step must, on every graph replay: copy hidden states, expert ids and router weights
GPU->host, notify the CPU workers, wait for their result, copy it host->GPU. If replay skips the notify/wait,
the output is finite and stale (FreeToken issue #350: graph error 0.28-0.57 against eager 0.002).

This is the package's public face; importing it registers the torch custom ops (graphsafe::cpu_moe*). The
modules, imports running one way from the first to the last:
- settings.py: formats, thresholds, handshake modes and their device maps, constants, errors, native modules.
- weights.py: expert banks, the shared expert (the GPU part), routing inputs, the float64 oracles.
- watchdog.py: Watchdog, which answers waits the CPU side never answers.
- executor.py: ExecutorCore (slots, signals, service, graph policy), Faults, the live executors, wait_guard.
- cpu_handshake.py / gpu_handshake.py: the layer's forward on the CPU backend (custom ops) and on a GPU.
- layer.py: CpuMoeExecutor, the core plus its forward.
- probe.py: the fail-closed probe and consensus.
"""

from graphsafe.kernels.cpu_moe.executor import ExecutorCore, Faults, Slot, wait_guard
from graphsafe.kernels.cpu_moe.layer import CpuMoeExecutor
from graphsafe.kernels.cpu_moe.probe import ProbeResult, consensus, probe_and_enable, probe_handshake
from graphsafe.kernels.cpu_moe.settings import (
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
    cpu_module,
    handshake_module,
    same_device,
)
from graphsafe.kernels.cpu_moe.watchdog import Watchdog
from graphsafe.kernels.cpu_moe.weights import (
    ExpertBank,
    SharedExpert,
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
    "FORMATS",
    "GPU_MODES",
    "HANDSHAKE_MODES",
    "HANDSHAKE_ON_CPU",
    "HANDSHAKE_ON_GPU",
    "OVERLAP_MODES",
    "PROBE_SLOTS",
    "PROBE_TOKENS",
    "SIGNAL_STRIDE",
    "THRESHOLDS",
    "CpuMoeExecutor",
    "ExecutorCore",
    "ExpertBank",
    "Faults",
    "HandshakeError",
    "HandshakeNotCapturable",
    "ProbeResult",
    "SharedExpert",
    "Slot",
    "UnsafeExecutorCapture",
    "Watchdog",
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
