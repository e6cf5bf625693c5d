"""PyTorch issue #114844: a module attribute assigned in `forward` is not updated by graph replay.

Public report: https://github.com/pytorch/pytorch/issues/114844 (2023-11-30), "CUDA graph doesn't update
tensor on replay". The module keeps an intermediate with `self.x = res` in `forward`. Capture runs
`forward` once, so the attribute is bound once, to the capture-time tensor; replay runs the recorded kernels
and no Python, so nothing rebinds it. Whoever rebinds `model.x` between capture and replay (the issue's
script does it by hand; an engine does it with an eager forward, a prefill between decode replays) leaves
`model.x` pointing at that tensor after every replay. The graph's returned output is right; only the side
channel is stale.

Why a measured table and not `graphsafe.check`: the check compares what the captured op returns, and this
failure is in state read outside the graph after replay, so the module runs the issue's own steps on the
chosen backend's capture and replay (`graphsafe.backends`): build the model, capture `model(static)`, rebind
`model.x` (by hand, or by an eager forward), copy the new input in, replay, then read `model.x` against
`Linear1(new input)`.
- buggy: `self.x = res` (the issue's module): `model.x` is stale after replay;
- fixed: `x` is a registered buffer written in place, `self.x.copy_(res)`, and callers write into it rather
  than rebinding it: replay writes the buffer, `model.x` is current.
The returned output is checked too: it is right in both variants, which is why the bug goes unnoticed.

Left out: nothing of the issue's script; `torch.compile` modes that guard Python attributes are not covered.
"""

from __future__ import annotations

import torch

from graphsafe.toolkit import GraphBackend, MeasuredTable, Measurement, Report, get_backend

N, D_IN, INNER, D_OUT = 2, 2, 4, 2  # the issue's sizes
STALE_BELOW = 1e-5  # a relative error above this means model.x is not Linear1(new input)


class Model(torch.nn.Module):
    """The issue's module; `in_place=True` keeps `x` as a buffer written with copy_ (the fix)."""

    def __init__(self, in_place: bool) -> None:
        super().__init__()
        self.Linear1 = torch.nn.Linear(D_IN, INNER)
        self.Linear2 = torch.nn.Linear(INNER, D_OUT)
        self.in_place = in_place
        if in_place:
            self.register_buffer("x", torch.zeros(N, INNER))
        else:
            self.x = None

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        res = self.Linear1(inp)
        if self.in_place:
            self.x.copy_(res)
        else:
            self.x = res
        return self.Linear2(res)


def _rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().max() / (want.double().abs().max() + 1e-6))


def run_issue_script(backend: str, in_place: bool, between: str) -> tuple[float, float]:
    """The issue's steps on `backend`; returns (model.x error, returned output error) after the replay."""
    be = get_backend(backend)
    # Inside the backend's poisoned-allocation scope, as graphsafe.check runs every capture; every tensor of the
    # steps is a local of _issue_steps, so none outlives the scope's memory pool.
    with be.poisoned_allocation(0xFF), torch.no_grad():
        return _issue_steps(be, in_place, between)


def _issue_steps(be: GraphBackend, in_place: bool, between: str) -> tuple[float, float]:
    torch.manual_seed(114844)
    model = Model(in_place).to(be.device)
    static = torch.ones(N, D_IN, device=be.device)
    model(static)  # the issue's eager call before capture
    graph = be.capture(lambda: model(static))
    try:
        if between == "assign":  # the issue: "Keep some intermediate value in model.x"
            kept = torch.tensor([[100.0] * INNER, [200.0] * INNER], device=be.device)
            if in_place:
                model.x.copy_(kept)
            else:
                model.x = kept
        else:  # an eager forward between replays, as an engine's prefill
            model(torch.full((N, D_IN), 3.0, device=be.device))
        new_input = torch.ones(N, D_IN, device=be.device).add_(10)
        static.copy_(new_input)
        graph.replay()
        be.synchronize()
        x_error = _rel_error(model.x, model.Linear1(new_input))
        out_error = _rel_error(graph.outputs[0], model.Linear2(model.Linear1(new_input)))
    finally:
        graph.release()
    return x_error, out_error


def _measure(backend: str) -> list[Measurement]:
    rows = []
    for between, how in (
        ("assign", "model.x set by hand (the issue)"),
        ("eager", "an eager forward (a prefill)"),
    ):
        for in_place, variant in ((False, "self.x = res (issue)"), (True, "self.x.copy_(res) (fix)")):
            x_error, out_error = run_issue_script(backend, in_place, between)
            stale = x_error > STALE_BELOW
            expected_stale = not in_place
            rows.append(
                Measurement(
                    values=(
                        f"{variant}, between capture and replay: {how}",
                        f"{x_error:.6f}",
                        "stale" if stale else "updated",
                        f"{out_error:.6f}",
                    ),
                    ok=stale == expected_stale and out_error <= STALE_BELOW,
                )
            )
    return rows


REPORT = Report(
    title="PyTorch #114844: a module attribute assigned in forward is not updated on graph replay",
    url="https://github.com/pytorch/pytorch/issues/114844",
    date="2023-11-30",
    reproduced="the issue's script on the chosen backend's capture and replay, with the attribute rebound "
    "between capture and replay by hand (the issue) or by an eager forward (an engine's prefill), for the "
    "issue's module and for one that writes a registered buffer in place",
    left_out="torch.compile's guarded modes; the check is a measured table because the stale value lives "
    "outside what the captured op returns",
    tables=(
        MeasuredTable(
            title="model.x after replay against Linear1(new input) (error = max|x-ref| / max|ref|)",
            headers=("module, rebinding", "model.x error", "model.x", "returned output error"),
            measure=_measure,
            claim="the issue's module leaves model.x stale, the in-place buffer is updated, and the returned "
            "output is right in both",
        ),
    ),
)
