"""Tensor-parallel consensus on the handshake probe: MIN all-reduce over a Gloo group (FreeToken issue #350).

Method: two real ranks (torch.multiprocessing spawn, Gloo, file:// rendezvous), each probing its own executor;
a rank "fails" by using the unrecorded handshake. Expected: one failing rank disables capture on both;
both passing enables both. The multi_gpu test does the same with each rank on its own GPU (memop handshake,
Gloo on CPU tensors: NCCL is not needed for one flag).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _rank_main(rank: int, init_file: str, out_dir: str, scenarios: list[list[int]], device: str) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from graphsafe.kernels import cpu_moe

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        for index, failing_ranks in enumerate(scenarios):
            _one_scenario(rank, out_dir, index, failing_ranks, device, cpu_moe)
    finally:
        dist.destroy_process_group()


def _one_scenario(
    rank: int, out_dir: str, index: int, failing_ranks: list[int], device: str, cpu_moe: Any
) -> None:
    on_gpu = device == "cuda"
    if on_gpu:
        torch.cuda.set_device(rank)
    mode = (
        ("memop" if on_gpu else "recorded")
        if rank not in failing_ranks
        else ("memop" if on_gpu else "unrecorded")
    )
    bank = cpu_moe.make_bank("bf16", 4, 128, 64, seed=1)
    ex = cpu_moe.CpuMoeExecutor(
        bank,
        top_k=2,
        graph_sizes=(2,),
        mode=mode,
        device=f"cuda:{rank}" if on_gpu else "cpu",
        faults=cpu_moe.Faults(unrecorded_memop=on_gpu and rank in failing_ranks),
    )
    local = cpu_moe.probe_handshake(ex)
    agreed = cpu_moe.consensus(local.ok)
    ex.enable_graphs(agreed, local.reason)
    Path(out_dir, f"s{index}_rank{rank}.json").write_text(
        json.dumps({"local": local.ok, "enabled": ex.graphs_enabled, "reason": local.reason})
    )
    ex.close()


def _run(scenarios: list[list[int]], device: str = "cpu") -> list[list[dict]]:
    """One spawn (two processes, one Gloo group) runs every scenario; results[scenario][rank]."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.spawn(_rank_main, args=(init_file, tmp, scenarios, device), nprocs=WORLD, join=True)
        return [
            [json.loads(Path(tmp, f"s{i}_rank{r}.json").read_text()) for r in range(WORLD)]
            for i in range(len(scenarios))
        ]


def test_one_failing_rank_disables_all_and_all_passing_enable_all() -> None:
    """Scenario 0: rank 1's probe fails (unrecorded handshake) -> rank 0 passed locally, yet both disable.
    Scenario 1 (negative control): both probes pass -> both ranks enable graphs."""
    one_fails, all_pass = _run([[1], []])
    assert one_fails[0]["local"] and not one_fails[1]["local"], one_fails
    assert not one_fails[0]["enabled"] and not one_fails[1]["enabled"]
    assert all(r["local"] and r["enabled"] for r in all_pass), all_pass


def test_consensus_without_process_group_is_local() -> None:
    from graphsafe.kernels import cpu_moe

    assert cpu_moe.consensus(True) and not cpu_moe.consensus(False)


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_two_gpu_consensus_one_failing_rank() -> None:
    """Each rank on its own GPU with the memop handshake; rank 1 injects the unrecorded-memop fault."""
    one_fails, all_pass = _run([[1], []], device="cuda")
    assert one_fails[0]["local"] and not one_fails[1]["local"], one_fails
    assert not any(r["enabled"] for r in one_fails)
    assert all(r["local"] and r["enabled"] for r in all_pass), all_pass
