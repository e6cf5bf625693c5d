"""Reproduction of FreeToken #350 (seed 000): CPU/hybrid MoE graph replay returns finite, stale outputs.

One layer, 8 experts, H=512, I=256, batch 4, top_k 2, BF16 experts; capture with input A, copy B into the
same buffers, replay three times with new inputs. The unsafe handshake is the unrecorded shape (CPU
backend: notify/wait as a plain pybind11 call; GPU: memops issued on a non-capturing stream, so they run once
during capture and are never recorded, as ROCm did), with graphs forced on as main did: it fails 3/3. The
safe one (recorded notify/wait; GPU: memop graph nodes, enabled by a passing probe) passes 3/3 with graph
error equal to eager error. Both cases run on either backend: the op picks the executor from the inputs'
device (kernels/cpu_moe_common.py, module note on devices).

    python -m cases.counterexamples.issue350 [--backend cpu|gpu]
"""

from __future__ import annotations

import argparse
import functools

import torch

from harness import Case, check, register
from kernels import cpu_moe

EXPERTS, HIDDEN, INTER, BATCH, TOP_K = 8, 512, 256, 4, 2
THRESHOLD = cpu_moe.THRESHOLDS["bf16"]  # 0.02, the seed's BF16 acceptance threshold


@functools.cache
def _bank() -> cpu_moe.ExpertBank:
    return cpu_moe.make_bank("bf16", EXPERTS, HIDDEN, INTER, seed=350)


@functools.cache
def _executor(safe: bool, device_type: str) -> cpu_moe.CpuMoeExecutor:
    on_gpu = device_type == "cuda"
    ex = cpu_moe.CpuMoeExecutor(
        _bank(),
        top_k=TOP_K,
        graph_sizes=(BATCH,),
        mode=("memop" if on_gpu else ("recorded" if safe else "unrecorded")),
        device=device_type,
        faults=cpu_moe.Faults(unrecorded_memop=on_gpu and not safe),
    )
    if safe:
        cpu_moe.probe_and_enable(ex)  # fail closed: a failing probe gives fallback_eager, not pass
    else:
        ex.enable_graphs(True)  # main's behaviour: graphs on without a real replay probe
    return ex


def _inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return cpu_moe.make_routing(seed, BATCH, EXPERTS, TOP_K, HIDDEN, device, torch.bfloat16)


def _op(safe: bool):
    def op(hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor) -> torch.Tensor:
        return _executor(safe, hidden.device.type)(hidden, expert_ids, router_weights)

    return op


def _reference(hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor) -> torch.Tensor:
    return cpu_moe.reference_moe(hidden, expert_ids, router_weights, _bank())


UNSAFE = register(
    Case(
        name="issue350_unsafe_unrecorded_handshake",
        make_inputs=_inputs,
        op=_op(safe=False),
        reference=_reference,
        tolerance=THRESHOLD,
        expect="stale_replay",
        note="seed 000: replay skips notify/wait and copies the capture-time result; threshold is the "
        "seed's bf16 0.02",
    )
)
SAFE = register(
    Case(
        name="issue350_safe_recorded_handshake",
        make_inputs=_inputs,
        op=_op(safe=True),
        reference=_reference,
        tolerance=THRESHOLD,
        expect="pass",
        note="seed 000 fix: notify/wait recorded in the graph, enabled by a passing probe; bf16 0.02",
    )
)


def table(backend: str = "cpu", replays: int = 3) -> str:
    """The seed's table: replay | unsafe eager/graph error | safe eager/graph error (first byte pattern)."""
    unsafe = check(UNSAFE, backend, replays=replays)
    safe = check(SAFE, backend, replays=replays)
    rows_u = [r for r in unsafe.rows if r.replay >= 0][:replays]
    rows_s = [r for r in safe.rows if r.replay >= 0][:replays]
    lines = [
        f"issue 350 on backend {backend!r} (threshold {THRESHOLD}; error = max|out-ref| / max|ref|)",
        "replay | unsafe eager error | unsafe graph error | safe eager error | safe graph error",
    ]

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.6f}"

    for u, s in zip(rows_u, rows_s, strict=False):
        lines.append(
            f"{u.replay:6d} | {fmt(u.eager_error):>18} | {fmt(u.graph_error):>18} | "
            f"{fmt(s.eager_error):>16} | {fmt(s.graph_error):>16}"
        )
    fails = sum(1 for r in rows_u if r.row_verdict != "pass")
    passes = sum(1 for r in rows_s if r.row_verdict == "pass")
    equal = all(r.graph_error == r.eager_error for r in rows_s)
    lines.append(
        f"unsafe: {fails}/{len(rows_u)} replays fail (verdict {unsafe.verdict}, expected {UNSAFE.expect}); "
        f"safe: {passes}/{len(rows_s)} pass (verdict {safe.verdict}), graph error == eager error: {equal}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend", choices=("cpu", "gpu"), default="gpu" if torch.cuda.is_available() else "cpu"
    )
    args = parser.parse_args()
    print(table(args.backend))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
