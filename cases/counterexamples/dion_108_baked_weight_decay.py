"""Dion PR #108: a scheduled weight decay is baked into a captured optimizer step at its capture-step value.

Public report: https://github.com/microsoft/dion/pull/108 (2026-07-26), "cuda_graph: release(), refuse
capture with grad-less params, and a live weight decay" (merged; its third gap is the one rebuilt here).
The PR, on the Muon/Dion optimizers' captured step: "weight_decay reached the kernels through
torch.tensor(group["weight_decay"]) -- a fresh host scalar, whose value a CUDA op lifts into the kernel's
launch args and bakes at capture. Schedule-coupled weight decay (Defazio 2506.02285) rescales weight_decay
every step, so under capture it froze at the capture-step value; during LR warmup that is a small fraction
of the intended decay, for the entire run, with no error." The fix carries the weight decay as a
persistent 0-d device tensor, refilled in place outside the graph before every step, as the LR already was.

Rebuilt here in torch ops (the same on the cpu and gpu backends): Muon's `muon_update_post_orthogonalize`
(dion/muon.py before the PR: `X *= 1 - base_lr * weight_decay`, then `X -= adjusted_lr * U`, one call per
parameter shape) on the PR test's two weight matrices (64x128 and 128x64, lr 0.02, spectral-norm LR
adjustment) and its schedule, weight decay 0.3 - 0.025 t over 12 steps, the graph captured after 3 warm-up
steps. Input `step` is the step index (A: step 3, the capture step; B_i: steps 4, 5, ...); the case's
`prepare` hook is the host side of a step: the schedule writes `group["weight_decay"]`, then the optimizer
syncs its live hyperparameters into their device tensors (`_sync_hyperparam_tensors`).
- buggy (main): the update reads `torch.tensor(group["weight_decay"])`, a host scalar made during the
  call; a graph keeps the capture-step value 0.225 while eager reads 0.2, 0.175, ...: `stale_replay`;
- fixed (the PR): the update reads the group's persistent device tensor, filled in place before every
  step: `pass`.
The LR is a persistent device tensor in both (it was live before the PR). A second line keeps the weight
decay constant (the default float path): the baked value is then the right one and both variants pass,
which is why every other baked group scalar (mu, beta1, epsilon) is harmless until something schedules it.

Left out: Newton-Schulz orthogonalization, momentum and the megabatched all-to-all (U, the orthogonalized
update, is an input); the AdamW scalar path (the PR applies a live weight decay there as its own pass,
since `torch._fused_adamw_` takes it as a float); cautious weight decay; the wrapper's warm-up and capture
(`CudaGraphOptimizer`), which the harness's capture stands in for.
"""

from __future__ import annotations

import math

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

SHAPES = ((64, 128), (128, 64))  # the PR test's weight matrices
LR = 0.02  # the PR test's lr
STEPS, WARMUP = 12, 3  # the PR test: 12 steps, the graph captured after 3 eager warm-up steps
CONSTANT_WD = 0.01  # Muon's default weight decay, for the constant-schedule line


def scheduled_wd(step: int) -> float:
    """The PR test's schedule-coupled weight decay, `[0.3 - 0.025 * t for t in range(STEPS)]`, repeated."""
    return 0.3 - 0.025 * (step % STEPS)


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs: dict[str, torch.Tensor] = {}
    for i, shape in enumerate(SHAPES):
        inputs[f"x{i}"] = torch.randn(shape, generator=g).to(device)  # the parameter
        inputs[f"u{i}"] = torch.randn(shape, generator=g).to(device)  # its orthogonalized update
    # A is the capture step (seed 0: step WARMUP); B_i the steps after it.
    inputs["step"] = torch.tensor([WARMUP + seed], dtype=torch.int64).to(device)
    return inputs


def adjusted_lr_ratio(shape: tuple[int, int]) -> float:
    """dion's `adjust_lr_spectral_norm` (Muon's default adjust_lr): lr * sqrt(fan_out / fan_in)."""
    fan_out, fan_in = shape
    return math.sqrt(fan_out / fan_in)


class MuonPostOrthogonalize:
    """The weight-decay-and-update step of one Muon param group, with the group's hyperparameters.

    `live_weight_decay`: the weight decay reaches the update as the group's persistent device tensor (the
    PR); otherwise as `torch.tensor(group["weight_decay"])`, made during the call (main)."""

    def __init__(self, *, live_weight_decay: bool, schedule: bool) -> None:
        self.live_weight_decay = live_weight_decay
        self.schedule = schedule
        self.group: dict[str, float] = {"lr": LR, "weight_decay": CONSTANT_WD}
        # Persistent 0-d device tensors per device, as DistributedOrthoBase._hyperparam_tensors holds them.
        self._tensors: dict[tuple[str, str], torch.Tensor] = {}

    def _tensor(self, device: torch.device, name: str) -> torch.Tensor:
        key = (str(device), name)
        if key not in self._tensors:
            self._tensors[key] = torch.zeros((), dtype=torch.float32, device=device)
        return self._tensors[key]

    def prepare(self, inputs: dict[str, torch.Tensor]) -> None:
        """The host side of one step, outside the graph: the schedule, then the hyperparameter sync."""
        device = inputs["x0"].device
        if self.schedule:
            self.group["weight_decay"] = scheduled_wd(int(inputs["step"].item()))
        self._tensor(device, "lr").fill_(self.group["lr"])  # live before the PR too
        if self.live_weight_decay:
            self._tensor(device, "weight_decay").fill_(self.group["weight_decay"])

    def __call__(
        self,
        x0: torch.Tensor,
        u0: torch.Tensor,
        x1: torch.Tensor,
        u1: torch.Tensor,
        step: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        del step  # read on the host by `prepare`, as a schedule reads its step counter
        base_lr = self._tensor(x0.device, "lr")
        if self.live_weight_decay:
            weight_decay = self._tensor(x0.device, "weight_decay")
        else:
            weight_decay = torch.tensor(self.group["weight_decay"])  # main: a host scalar, made now
        out = []
        for x, u in ((x0, u0), (x1, u1)):  # one megabatch per parameter shape
            adjusted_lr = base_lr * adjusted_lr_ratio(tuple(x.shape))
            (decayed,) = torch._foreach_mul([x], 1 - base_lr * weight_decay)  # apply weight decay
            (update,) = torch._foreach_mul([u], adjusted_lr)
            torch._foreach_sub_([decayed], [update])  # weight update
            out.append(decayed)
        return tuple(out)


def _reference(schedule: bool):
    def reference(x0, u0, x1, u1, step) -> tuple[torch.Tensor, ...]:
        """float64: X (1 - lr wd(t)) - lr sqrt(fan_out/fan_in) U, with the weight decay of this step."""
        wd = scheduled_wd(int(step.item())) if schedule else CONSTANT_WD
        outs = []
        for x, u in ((x0, u0), (x1, u1)):
            ratio = adjusted_lr_ratio(tuple(x.shape))
            outs.append((x.double() * (1 - LR * wd) - LR * ratio * u.double()).to(x.dtype))
        return tuple(outs)

    return reference


def _case(label: str, *, live: bool, schedule: bool, expect: str, note: str) -> Case:
    step_fn = MuonPostOrthogonalize(live_weight_decay=live, schedule=schedule)
    return register(
        Case(
            name=f"dion108.muon_weight_decay.{label}",
            make_inputs=make_inputs,
            op=step_fn,
            reference=_reference(schedule),
            prepare=step_fn.prepare,
            expect=expect,
            note=note,
        )
    )


SCHEDULED_BUGGY = _case(
    "scheduled_buggy",
    live=False,
    schedule=True,
    expect="stale_replay",
    note="torch.tensor(group['weight_decay']) made during the call: the graph keeps the capture step's 0.225",
)
SCHEDULED_FIXED = _case(
    "scheduled_fixed",
    live=True,
    schedule=True,
    expect="pass",
    note="the weight decay is a persistent device tensor refilled before every step",
)
CONSTANT_BUGGY = _case(
    "constant_buggy",
    live=False,
    schedule=False,
    expect="pass",
    note="a baked weight decay that never changes is the right one: the float path stays correct",
)
CONSTANT_FIXED = _case(
    "constant_fixed",
    live=True,
    schedule=False,
    expect="pass",
    note="the live weight decay with a constant value",
)

REPORT = Report(
    title="Dion #108: a scheduled weight decay is baked into the captured optimizer step at its capture value",
    url="https://github.com/microsoft/dion/pull/108",
    date="2026-07-26",
    reproduced="Muon's weight-decay-and-update step on the PR test's two weight matrices, lr 0.02, weight decay "
    "0.3 - 0.025 t captured at step 3: the weight decay as torch.tensor(group['weight_decay']) made during "
    "the call (main) or as a persistent device tensor refilled before each step (the PR); and the same with "
    "a constant weight decay",
    left_out="Newton-Schulz orthogonalization, momentum and the megabatch all-to-all (the orthogonalized "
    "update is an input); the AdamW scalar path; cautious weight decay; CudaGraphOptimizer's own warm-up "
    "and capture (the harness's capture stands in)",
    tables=(
        CaseTable(
            title="Weight decay under capture: scheduled (0.3 - 0.025 t, captured at t=3) and constant",
            label_header="weight decay",
            lines=(
                Line("scheduled", buggy=SCHEDULED_BUGGY, fixed=SCHEDULED_FIXED),
                Line("constant 0.01", buggy=CONSTANT_BUGGY, fixed=CONSTANT_FIXED),
            ),
            columns=(
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="PR"),
                Column("graph error", "buggy", header="main graph error"),
                Column("graph error", "fixed", header="PR graph error"),
                Column("as expected"),
            ),
            sides=("main", "PR"),
        ),
    ),
)
