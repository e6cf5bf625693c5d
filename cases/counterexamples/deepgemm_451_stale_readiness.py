"""DeepGEMM PR #451: MegaMoE's combine accepts a stale readiness tag on graph replay, because the tag repeats.

Public report: https://github.com/deepseek-ai/DeepGEMM/pull/451 (2026-09-17), "Reset MegaMoE combine
readiness for CUDA graph replay". The combine waits until each peer rank has pushed its expert outputs into
this rank's receive buffer and stamped a readiness flag with the launch's tag (%gridid). Eagerly every launch
has a new tag, so a flag left by the previous launch never matches. A replayed graph repeats its captured
tag: the previous replay's flag already matches, the barrier does not wait, and the combine reads the old
(or half-updated) receive buffer. Eager passed before and after the fix; changed-input graph replay failed
before it; the fix resets the local readiness flags before the pull barrier.

Rebuilt here in torch ops (the same on the cpu and gpu backends), one rank with PEERS simulated peers:
- the tag is a Python int taken from a launch counter, as %gridid is per launch; a graph freezes the value
  it saw at capture, as replay repeats %gridid;
- `stale = flags == tag` is the barrier's poll: where it holds, the consumer reads the receive buffer before
  the peer's push lands (`early`); elsewhere it waits (reads after the push). The push (each peer's expert
  output, a small matmul) then lands and the flag is stamped with the tag;
- the workspace (receive buffer and flags) belongs to the static input buffer, as an engine's per-graph
  buffers do: the harness's eager calls between replays use other buffers, so consecutive replays meet
  their own flags, as the PR's consecutive changed-input replays did.
Buggy: no reset (stale_replay: the replay returns the previous input's combine). Fixed: the flags are
reset before the poll, as the PR does (pass; the report: all 12 changed-input replays equal eager).

Left out: several ranks and NVLink/NVSHMEM pushes (the peers are simulated on one device, and the race is
resolved deterministically: a consumer that does not wait always reads before the push); the real
%gridid; FP8/FP4 experts.
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

TOKENS, HIDDEN, PEERS = 8, 64, 2
REPLAYS = 12  # the report's changed-input replays per case


class ReadinessCombine:
    """One rank's combine: PEERS peers push expert outputs, the consumer waits on tagged readiness flags."""

    def __init__(self, reset_flags: bool) -> None:
        self.reset_flags = reset_flags
        self.launches = 0  # the eager %gridid: a fresh tag per launch
        self._workspaces: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def _workspace(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (str(x.device), x.data_ptr())
        if key not in self._workspaces:
            recv = torch.zeros(PEERS, TOKENS, HIDDEN, dtype=torch.float32, device=x.device)
            flags = torch.zeros(PEERS, dtype=torch.int64, device=x.device)
            self._workspaces[key] = (recv, flags)
        return self._workspaces[key]

    def __call__(
        self, x: torch.Tensor, combine_weights: torch.Tensor, expert_weights: torch.Tensor
    ) -> torch.Tensor:
        recv, flags = self._workspace(x)
        self.launches += 1
        tag = self.launches  # frozen into the graph at capture, as replay repeats %gridid
        if self.reset_flags:
            flags.zero_()  # the fix: local readiness flags reset before the pull barrier
        stale = flags.eq(tag).view(PEERS, 1, 1)  # the barrier's poll: a matching tag means "ready"
        early = recv.clone()  # what a consumer that does not wait reads: the previous push
        recv.copy_(torch.einsum("th,pgh->ptg", x, expert_weights))  # the peers' pushes land
        flags.fill_(tag)
        received = torch.where(stale, early, recv)
        return torch.einsum("tp,pth->th", combine_weights, received)


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    experts = torch.Generator().manual_seed(451)  # static: the peers' expert weights
    return {
        "x": torch.randn(TOKENS, HIDDEN, generator=g).to(device),
        "combine_weights": torch.softmax(torch.randn(TOKENS, PEERS, generator=g), dim=-1).to(device),
        "expert_weights": (torch.randn(PEERS, HIDDEN, HIDDEN, generator=experts) / HIDDEN**0.5).to(device),
    }


def reference(x: torch.Tensor, combine_weights: torch.Tensor, expert_weights: torch.Tensor) -> torch.Tensor:
    pushed = torch.einsum("th,pgh->ptg", x.double(), expert_weights.double())
    return torch.einsum("tp,pth->th", combine_weights.double(), pushed).float()


def _case(variant: str, reset_flags: bool, expect: str, note: str) -> Case:
    combine = ReadinessCombine(reset_flags)
    return register(
        Case(
            name=f"deepgemm451.readiness_tag.{variant}",
            make_inputs=make_inputs,
            op=combine,
            reference=reference,
            expect=expect,
            static_inputs=("expert_weights",),
            note=note,
        )
    )


BUGGY = _case("buggy", False, "stale_replay", "the replayed tag matches the previous replay's flag: no wait")
FIXED = _case("fixed", True, "pass", "flags reset before the poll: every launch waits for its push")

REPORT = Report(
    title="DeepGEMM #451: MegaMoE combine accepts stale readiness tags on graph replay",
    url="https://github.com/deepseek-ai/DeepGEMM/pull/451",
    date="2026-09-17",
    reproduced="a combine whose barrier polls readiness flags stamped with a per-launch tag that a graph "
    "freezes at capture (main), and the same combine with the flags reset before the poll (the PR); "
    f"{REPLAYS} changed-input replays per case, as the report's",
    left_out="several GPUs and the peers' NVLink pushes (simulated on one device, the race resolved "
    "deterministically: a consumer that does not wait reads before the push); the hardware %gridid; the "
    "FP8/FP4 and BF16 kernels themselves",
    replays=REPLAYS,
    tables=(
        CaseTable(
            title="Changed-input graph replay (error = max|out-ref| / max|ref|; f32 threshold 1e-5)",
            lines=(Line("combine", buggy=BUGGY, fixed=FIXED),),
            columns=(
                Column("eager error", "buggy"),
                Column("graph error", "buggy"),
                Column("verdict", "buggy"),
                Column("graph vs eager", "fixed"),
                Column("verdict", "fixed"),
            ),
            sides=("main", "PR"),
            per_replay=True,
        ),
    ),
)
