"""CPU/hybrid MoE cases: every expert format and handshake mode, replayed with new routing (seed 000).

CPU backend (always): each format through the recorded handshake, bf16 through the direct custom op, and
the unrecorded handshake as the negative control (stale_replay). GPU (registered only with a device):
memop, memop with explicit batch-memop nodes, hostfn (all pass after a passing probe), eager (a capture
refusal: FallbackEager -> fallback_eager), and the unrecorded-memop fault forced into capture (stale_replay).
Shapes stay small on CPU (E=4, H=128, I=64, 3 tokens) so the suite runs in seconds on CI's two cores;
rebuilds and 19 live graphs run from tests/test_cpu_moe.py (harness.check's rebuilds/live_graphs).
"""

from __future__ import annotations

import functools

import torch

from harness import Case, register
from kernels import cpu_moe

EXPERTS, HIDDEN, INTER, TOKENS, TOP_K = 4, 128, 64, 3, 2
GPU_SHAPE = (8, 512, 256, 4, 2)  # the seed's layer on GPUs: E, H, I, batch, top_k


@functools.cache
def bank(fmt: str, gpu: bool = False) -> cpu_moe.ExpertBank:
    e, h, i = GPU_SHAPE[:3] if gpu else (EXPERTS, HIDDEN, INTER)
    return cpu_moe.make_bank(fmt, e, h, i, seed=hash(fmt) % 1000)


@functools.cache
def executor(fmt: str, mode: str, probe: bool = True, fault: str = "") -> cpu_moe.CpuMoeExecutor:
    gpu = mode in cpu_moe.GPU_MODES
    tokens, top_k = (GPU_SHAPE[3], GPU_SHAPE[4]) if gpu else (TOKENS, TOP_K)
    ex = cpu_moe.CpuMoeExecutor(
        bank(fmt, gpu),
        top_k=top_k,
        graph_sizes=(tokens,),
        mode=mode,
        device="cuda" if gpu else "cpu",
        faults=cpu_moe.Faults(unrecorded_memop=fault == "unrecorded"),
    )
    ex.explicit_memop_nodes = fault == "explicit"
    if probe:
        cpu_moe.probe_and_enable(ex)
    else:
        ex.enable_graphs(True)  # forced: what an engine without the probe does
    return ex


def _inputs(gpu: bool):
    tokens, top_k = (GPU_SHAPE[3], GPU_SHAPE[4]) if gpu else (TOKENS, TOP_K)
    experts, hidden = (GPU_SHAPE[0], GPU_SHAPE[1]) if gpu else (EXPERTS, HIDDEN)

    def make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return cpu_moe.make_routing(seed, tokens, experts, top_k, hidden, device, torch.bfloat16)

    return make


def _case(
    fmt: str, mode: str, *, expect: str = "pass", probe: bool = True, fault: str = "", note: str = ""
) -> None:
    gpu = mode in cpu_moe.GPU_MODES

    def op(hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor) -> torch.Tensor:
        return executor(fmt, mode, probe, fault)(hidden, expert_ids, router_weights)

    def reference(
        hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor
    ) -> torch.Tensor:
        return cpu_moe.reference_moe(hidden, expert_ids, router_weights, bank(fmt, gpu))

    suffix = f"_{fault}" if fault else ""
    register(
        Case(
            name=f"cpu_moe_{fmt}_{mode}{suffix}",
            make_inputs=_inputs(gpu),
            op=op,
            reference=reference,
            tolerance=cpu_moe.THRESHOLDS[fmt],
            expect=expect,
            note=note
            or f"{fmt} threshold {cpu_moe.THRESHOLDS[fmt]} (kernels/cpu_moe.py THRESHOLDS: seed 000)",
        )
    )


for _fmt in cpu_moe.FORMATS:
    _case(_fmt, "recorded")
_case("bf16", "direct")
_case(
    "bf16",
    "unrecorded",
    expect="stale_replay",
    probe=False,
    note="negative control: notify/wait is a plain pybind11 call, so replay copies a stale host result",
)

if torch.cuda.is_available():
    for _fmt in cpu_moe.FORMATS:
        _case(_fmt, "memop")
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
