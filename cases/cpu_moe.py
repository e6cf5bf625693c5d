"""CPU/hybrid MoE cases: every expert format and handshake mode, replayed with new routing (FreeToken
issue #350).

Cases are registered at import, before the backend is chosen, so each case's op picks its executor from the
inputs' device (kernels/cpu_moe/settings.py, note on devices). A case names the handshake by what a
graph does with it; each backend runs its own implementation of that handshake:

| case mode    | cpu backend (emulated graph)          | gpu backend (CUDA/HIP graph)                        |
|--------------|---------------------------------------|-----------------------------------------------------|
| `recorded`   | staged copies + notify/wait custom op | memop, explicit batch-memop nodes (HIP's path)      |
| `direct`     | the executor as one custom op         | hostfn: the CPU layer as one host-function node     |
| `unrecorded` | notify/wait as a plain pybind11 call  | memops on a non-capturing stream (ROCm's failure)   |
| `memop`      | recorded                              | memop, captured natively (BATCH_MEM_OP nodes)       |
| `hostfn`     | direct                                | hostfn                                              |
| `eager`      | direct computation, capture refused   | synchronizing copies, capture refused               |

Always registered (CI's CPU backend, and the GPU): each format `recorded`, bf16 `direct`, and the negative
control bf16 `unrecorded` (stale_replay, capture forced). The hybrid layer (a shared expert in torch ops, the
GPU part, plus the CPU experts; kernels/cpu_moe/executor.py, note on the hybrid layer) with overlap
off and on: bf16 `recorded_overlap_{off,on}` (pass) and `unrecorded_overlap_{off,on}` (stale_replay: the GPU
part replays with fresh inputs, the CPU experts' part stays stale, and the sum must still be caught).
Registered only with a device: each format `memop`, bf16 `hostfn`, bf16 `eager` (probe fails, capture
raises FallbackEager -> fallback_eager), the unrecorded-memop fault forced into capture (stale_replay), bf16
memop with 3 rebuilds and 19 live graphs (Case fields), and the hybrid layer as bf16
`memop_overlap_{off,on}` (native memop nodes) and `hostfn_overlap_on`.
On the gpu backend some bf16 names resolve to the same GPU handshake and share one executor (`direct` and
`hostfn`; `recorded` and `memop_explicit`; `unrecorded` and `memop_unrecorded`); both names stay because
the always-registered ones are what CI's cpu backend runs.
Shapes: small on CPU (E=4, H=128, I=64, 3 tokens) so the suite runs in seconds on CI's two cores; FreeToken issue #350's
layer on GPUs (E=8, H=512, I=256, batch 4, top_k 2).
"""

from __future__ import annotations

import functools

import torch

from graphsafe import DEVICE_WAITS, Case, register
from graphsafe.kernels import cpu_moe

EXPERTS, HIDDEN, INTER, TOKENS, TOP_K = 4, 128, 64, 3, 2
GPU_SHAPE = (8, 512, 256, 4, 2)  # FreeToken issue #350's layer on GPUs: E, H, I, batch, top_k


@functools.cache
def bank(fmt: str, gpu: bool = False) -> cpu_moe.ExpertBank:
    e, h, i = GPU_SHAPE[:3] if gpu else (EXPERTS, HIDDEN, INTER)
    return cpu_moe.make_bank(fmt, e, h, i, seed=sum(map(ord, fmt)) % 1000)


def resolve(mode: str, fault: str, device_type: str) -> tuple[str, bool, str]:
    """(executor mode, explicit batch-memop nodes, Faults field) for a case mode on a device type."""
    if device_type == "cuda":
        if mode in cpu_moe.HANDSHAKE_ON_GPU:
            return cpu_moe.HANDSHAKE_ON_GPU[mode]
        return mode, fault == "explicit", "unrecorded_memop" if fault == "unrecorded" else ""
    if device_type != "cpu":
        raise ValueError(f"cpu_moe cases run on cpu or cuda devices, got {device_type!r}")
    if mode in cpu_moe.HANDSHAKE_ON_CPU:
        return ("unrecorded" if fault == "unrecorded" else cpu_moe.HANDSHAKE_ON_CPU[mode]), False, ""
    return mode, False, ""


@functools.cache
def shared_expert(device_type: str) -> cpu_moe.SharedExpert:
    """The hybrid layer's GPU part: a shared expert as wide as the CPU experts, on the inputs' device."""
    _, h, i = GPU_SHAPE[:3] if device_type == "cuda" else (EXPERTS, HIDDEN, INTER)
    return cpu_moe.make_shared_expert(h, i, seed=4242, device=device_type)


@functools.cache
def executor(
    fmt: str,
    mode: str,
    explicit: bool,
    fault: str,
    probe: bool,
    device_type: str,
    overlap: bool | None = None,
) -> cpu_moe.CpuMoeExecutor:
    """One executor per resolved configuration, built on first use (inside the harness's warm-up).
    overlap: None, the CPU experts alone; False/True, the hybrid layer with its GPU part after / during the
    CPU computation."""
    gpu = device_type == "cuda"
    tokens, top_k = (GPU_SHAPE[3], GPU_SHAPE[4]) if gpu else (TOKENS, TOP_K)
    faults = cpu_moe.Faults(**({fault: True} if fault else {}))
    ex = cpu_moe.CpuMoeExecutor(
        bank(fmt, gpu),
        top_k=top_k,
        graph_sizes=(tokens,),
        mode=mode,
        device=device_type,
        faults=faults,
        shared=None if overlap is None else shared_expert(device_type),
        overlap=bool(overlap),
    )
    ex.explicit_memop_nodes = explicit
    if probe:
        cpu_moe.probe_and_enable(ex)
    else:
        ex.enable_graphs(True)  # forced: what an engine without the probe does
    return ex


def _make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    gpu = torch.device(device).type == "cuda"
    experts, hidden, _, tokens, top_k = GPU_SHAPE if gpu else (EXPERTS, HIDDEN, INTER, TOKENS, TOP_K)
    return cpu_moe.make_routing(seed, tokens, experts, top_k, hidden, device, torch.bfloat16)


def _case(
    fmt: str,
    mode: str,
    *,
    expect: str = "pass",
    probe: bool = True,
    fault: str = "",
    note: str = "",
    name: str = "",
    rebuilds: int = 0,
    live_graphs: int = 0,
    overlap: bool | None = None,
) -> None:
    def op(hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor) -> torch.Tensor:
        device_type = hidden.device.type
        ex = executor(fmt, *resolve(mode, fault, device_type), probe, device_type, overlap)
        return ex(hidden, expert_ids, router_weights)

    def reference(
        hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor
    ) -> torch.Tensor:
        device_type = hidden.device.type
        shared = None if overlap is None else shared_expert(device_type)
        return cpu_moe.reference_layer(
            hidden, expert_ids, router_weights, bank(fmt, device_type == "cuda"), shared
        )

    suffix = f"_{fault}" if fault else ""
    if overlap is not None:
        suffix += "_overlap_on" if overlap else "_overlap_off"
    threshold = f"{fmt} threshold {cpu_moe.THRESHOLDS[fmt]} (cpu_moe.THRESHOLDS, FreeToken issue #350's)"
    register(
        Case(
            name=name or f"cpu_moe_{fmt}_{mode}{suffix}",
            make_inputs=_make_inputs,
            op=op,
            reference=reference,
            tolerance=cpu_moe.THRESHOLDS[fmt],
            expect=expect,
            note=f"{note}; {threshold}" if note else threshold,
            rebuilds=rebuilds,
            live_graphs=live_graphs,
            # On the gpu backend every mode but eager runs the CPU experts while the GPU waits on the host:
            # several such cases at once on one GPU each took many times the 0.1-0.7 s one alone takes on the
            # H200 (reports/performance.md), so they run one at a time.
            exclusive=DEVICE_WAITS,
        )
    )


for _fmt in cpu_moe.FORMATS:
    _case(_fmt, "recorded", note="gpu backend: memop with explicit batch-memop nodes")
_case("bf16", "direct", note="gpu backend: hostfn (the CPU layer as one host-function node)")
_case(
    "bf16",
    "unrecorded",
    expect="stale_replay",
    probe=False,
    note="negative control, capture forced: notify/wait runs at capture only (cpu: a plain pybind11 call; "
    "gpu: memops on a non-capturing stream), so replay copies a stale host result",
)
_HYBRID = "hybrid layer: CPU experts + a shared expert in torch ops (the GPU part)"
_OFF = "overlap off: the GPU part after the copy back"
_ON = (
    "overlap on: the GPU part while the CPU computes, between the notify and the wait on one stream (cpu: "
    "the split custom ops; gpu: handshake.hip's enqueue_notify and enqueue_wait)"
)
for _overlap, _order in ((False, _OFF), (True, _ON)):
    _case(
        "bf16", "recorded", overlap=_overlap, note=f"{_HYBRID}; {_order}; gpu backend: explicit memop nodes"
    )
    _case(
        "bf16",
        "unrecorded",
        overlap=_overlap,
        expect="stale_replay",
        probe=False,
        note=f"negative control, capture forced; {_HYBRID}; {_order}: the GPU part replays with fresh "
        "inputs, the CPU experts' part is stale, and the sum must still fail",
    )

if torch.cuda.is_available():
    for _fmt in cpu_moe.FORMATS:
        _case(_fmt, "memop", note="stream memops captured natively as BATCH_MEM_OP nodes")
    _case("bf16", "memop", fault="explicit", note="explicit batch-memop nodes, HIP's path, on any GPU")
    _case("bf16", "hostfn")
    _case(
        "bf16",
        "eager",
        expect="fallback_eager",
        note="synchronizing copies cannot be captured: the probe fails, capture raises FallbackEager",
    )
    _case(
        "bf16",
        "memop",
        fault="unrecorded",
        expect="stale_replay",
        probe=False,
        note="fault: memops run during capture on a non-capturing stream (ROCm's shape), capture forced",
    )
    _case(
        "bf16",
        "memop",
        name="cpu_moe_bf16_memop_rebuild_live",
        rebuilds=3,
        live_graphs=19,
        note="3 recaptures and 19 live graphs replayed interleaved on one executor slot "
        "(FreeToken issue #350's rebuild test)",
    )
    for _overlap, _order in ((False, _OFF), (True, _ON)):
        _case("bf16", "memop", overlap=_overlap, note=f"{_HYBRID}; {_order}; memops captured natively")
    _case("bf16", "hostfn", overlap=True, note=f"{_HYBRID}; {_ON}; the CPU layer as a host-function node")
