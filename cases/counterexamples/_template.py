"""TEMPLATE: copy to cases/counterexamples/<project>_<number>_<short_name>.py and replace every TEMPLATE.

The opening note says, in this order: the public report (`<Project> issue/PR #N: what goes wrong`), its link
and date, the failure as the report describes it, how the module rebuilds it (what the buggy and the fixed
variant do and the verdict each gets), and what is left out (hardware, several GPUs, the real kernel).

Public report: https://github.com/OWNER/REPO/issues/0 (TEMPLATE: the link, and the date as YYYY-MM-DD).

The example below is runnable as it stands, so the template is checked with the rest
(`graphsafe repro cases/counterexamples/_template.py --backend cpu`): an op whose output comes from
`torch.empty` and is written only in its first half (buggy: `uninitialized` under the harness's poisoned
allocation) against one that zero-fills the rest (fixed: `pass`). Replace it with the report's failure shape,
rebuilt as small as it stays recognizable: torch ops where the bug lives in Python, a small kernel only where
it lives in a kernel.

The leading underscore keeps this file out of the built-in suite; your copy must not have one.
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

ROWS, COLS = 8, 16  # TEMPLATE: the smallest sizes that still show the failure


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Tensors only; every input not named in `static_inputs` must differ between seeds."""
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(ROWS, COLS, generator=g).to(device)}


def op(x: torch.Tensor, *, fixed: bool) -> torch.Tensor:
    """TEMPLATE: the failure shape. Here: the output's second half is never written unless `fixed`."""
    out = torch.zeros_like(x) if fixed else torch.empty_like(x)
    out[: ROWS // 2].copy_(x[: ROWS // 2] * 2)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    """An independent oracle for what the op should return (float64 where arithmetic is involved)."""
    out = torch.zeros_like(x, dtype=torch.float64)
    out[: ROWS // 2] = x[: ROWS // 2].double() * 2
    return out.to(x.dtype)


VARIANTS = {
    variant: register(
        Case(
            name=f"template.half_written_output.{variant}",  # TEMPLATE: <project><number>.<op>.<variant>
            make_inputs=make_inputs,
            op=functools.partial(op, fixed=fixed),
            reference=reference,
            expect=expect,  # the verdict the report's behaviour gets; see README "Verdicts, likely causes, what to try"
            note=note,  # why this verdict (and any tolerance) is what it is
        )
    )
    for variant, fixed, expect, note in (
        ("buggy", False, "uninitialized", "TEMPLATE: what the buggy variant does"),
        ("fixed", True, "pass", "TEMPLATE: what the fix changes"),
    )
}

REPORT = Report(
    title="TEMPLATE #0: one line saying what goes wrong",
    url="https://github.com/OWNER/REPO/issues/0",
    date="1970-01-01",
    reproduced="TEMPLATE: what the module rebuilds, in a sentence or two",
    left_out="TEMPLATE: what the original needs that is not here (hardware, several GPUs, the real kernel)",
    tables=(
        CaseTable(
            title="TEMPLATE: the report's table title (keep its columns and thresholds where it has a table)",
            label_header="check",
            lines=(Line("half-written output", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="PR"),
                Column("nonfinite", "buggy", header="main NaN/poison count"),
                Column("graph error", "fixed", header="PR graph error"),
                Column("as expected"),
            ),
            sides=("main", "PR"),  # how the report names the two sides
        ),
    ),
)
