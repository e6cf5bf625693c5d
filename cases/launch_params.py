"""Negative controls of the launch diff, one per shape of a value frozen at capture, each with its fixed twin.

Every case runs a host plan before each call (`prepare`: graphsafe.kernels.launch_params.ops.HostPlan, an
engine's plan() reading the batch's valid-row count on the host and writing device buffers the graph reads).
The buggy variant takes one of the plan's host values into the launch, where a captured graph freezes it;
the fixed variant reads the same value on the device. Input A (seed 0) has 3 valid rows, each B more
(`_n_valid`), so A's plan and B's differ. What each buggy variant must get, and what the launch diff must name
(tests/test_launch_diff.py checks both; FINDINGS below lists them):

  shape                                   GPU kernel control (a GPU only)         torch-op control (cpu and gpu)
  a scalar argument frozen at capture     kernel `kv_append`, argument 5 (int)    op `aten.select.int`, `index`
  a grid sized from the capture batch     kernel `scale_valid_rows`, its grid     op `aten.slice.Tensor`, `end`
  a host plan's result not refreshed      kernel `run_plan`, argument 4 (int)     (the same as the slice: a count)
  an RNG seed/offset frozen in the graph  kernel `sample_rows`, argument 6        op `sample_rows`, `offset`
  work eager does that the graph lacks    eager B runs kernel `apply_fixup`       eager B runs op `aten.add_.Tensor`

All buggy variants get stale_replay (their replays differ from eager), so the launch diff runs on its own for
them; the fixed twins pass, and under `--explain` report no launch difference. The kernel controls register
only where a GPU exists (as cases/platform/) and declare `requires=("gpu",)`.
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register
from graphsafe.kernels.launch_params import ops as L

CAPACITY, COLS = 32, 16
VOCAB = 64  # the sampler controls: a flat distribution, so frozen noise changes the tokens drawn
FIXUP_FROM = 8


def _n_valid(seed: int) -> int:
    """3 valid rows for seed 0 (input A), 8, 13, 18, 23, 28, 4, 9, ... after: distinct from A's for seeds
    1..28, which covers every replay count a run uses."""
    return 3 + (5 * seed) % (CAPACITY - 3)


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(CAPACITY, COLS, generator=g).to(device),
        "new_row": torch.randn(COLS, generator=g).to(device),
        "n_valid": torch.tensor([_n_valid(seed)], dtype=torch.int32).to(device),
    }


def sampler_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs = make_inputs(seed, device)
    inputs["logits"] = torch.randn(8, VOCAB, generator=g).to(device)
    return inputs


# ------------------------------------------------------------------------------------ references (oracles)


def _valid(n_valid: torch.Tensor) -> int:
    return int(n_valid.reshape(-1)[0].item())


def position_reference(x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    out[_valid(n_valid) - 1] = new_row
    return out


def scaled_rows_reference(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, factor: float
) -> torch.Tensor:
    out = torch.zeros_like(x, dtype=torch.float64)
    n = _valid(n_valid)
    out[:n] = x[:n].double() * factor
    return out.to(x.dtype)


def fixup_reference(x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor) -> torch.Tensor:
    out = x.double() * 2
    if _valid(n_valid) >= FIXUP_FROM:
        out += 1
    return out.to(x.dtype)


# ------------------------------------------------------------------------------- GPU kernel controls


def kv_append_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    if fixed:
        return L.kv_append(x, new_row, pos=0, pos_dev=plan.device["position"])
    return L.kv_append(x, new_row, pos=plan.position, pos_dev=None)


def scale_rows_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    per_block = L.rows_per_block()
    rows = CAPACITY if fixed else plan.n_valid  # the bug: a grid for the rows the plan saw at capture
    return L.scale_valid_rows(x, n_valid, grid=(rows + per_block - 1) // per_block)


def run_plan_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    if fixed:
        return L.run_plan(x, plan.device["rows"], work_items=0, work_items_dev=plan.device["count"])
    return L.run_plan(x, plan.device["rows"], work_items=plan.work_items, work_items_dev=None)


def fixup_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    out = x * 2
    if fixed:
        L.apply_fixup(out, needed_dev=plan.device["needs_fixup"])
    elif plan.needs_fixup:  # the bug: decided on the host when the graph is captured
        L.apply_fixup(out, needed_dev=None)
    return out


# ------------------------------------------------------------------- torch-op controls (cpu and gpu)


def select_position_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    out = x.clone()
    if fixed:
        out.index_copy_(0, plan.device["position"].long(), new_row.unsqueeze(0))
    else:
        out.select(0, plan.position).copy_(new_row)
    return out


def sized_rows_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    if fixed:
        rows = torch.arange(CAPACITY, device=x.device).unsqueeze(1)
        return torch.where(rows < n_valid.long(), x * 2, torch.zeros_like(x))
    out = torch.zeros_like(x)
    out[: plan.n_valid] = x[: plan.n_valid] * 2  # the bug: work sized from the rows the plan saw at capture
    return out


def torch_fixup_op(
    x: torch.Tensor, new_row: torch.Tensor, n_valid: torch.Tensor, *, plan: L.HostPlan, fixed: bool
) -> torch.Tensor:
    out = x * 2
    if fixed:
        out += plan.device["needs_fixup"].to(out.dtype)
    elif plan.needs_fixup:
        out.add_(1.0)
    return out


# ----------------------------------------------------------------------------------------- sampling


SAMPLER_INCREMENT = 8 * 32  # flashinfer's top-k/top-p sampling advances the offset by batch * 32


def sample_op(
    x: torch.Tensor,
    new_row: torch.Tensor,
    n_valid: torch.Tensor,
    logits: torch.Tensor,
    *,
    philox: L.HostPhilox,
    fixed: bool,
) -> torch.Tensor:
    probs = torch.softmax(logits.float(), dim=-1)
    if fixed:  # uniforms from torch's generator: graph-safe, drawn anew on every replay
        return L.sample_rows(probs, torch.rand(probs.shape[0], device=probs.device), 0, 0)
    seed, offset = philox.advance(SAMPLER_INCREMENT)  # host values at call time: frozen by a capture
    return L.sample_rows(probs, None, seed, offset)


# ------------------------------------------------------------------------------------------- register

# case name -> (the text its launch-diff finding must contain on the gpu backend, on the cpu backend; None
# where the case does not run there). tests/test_launch_diff.py asserts these.
FINDINGS: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...] | None]] = {}


def _register_pair(
    shape: str,
    op: object,
    reference: object,
    *,
    gpu_finding: tuple[str, ...] | None,
    cpu_finding: tuple[str, ...] | None,
    note: str,
    requires: tuple[str, ...] = (),
) -> None:
    """Register `launch_params.<shape>.buggy` and `.fixed`, each with a host plan of its own."""
    for variant, fixed in (("buggy", False), ("fixed", True)):
        name = f"launch_params.{shape}.{variant}"
        plan = L.HostPlan(capacity=CAPACITY, fixup_from=FIXUP_FROM)
        register(
            Case(
                name=name,
                make_inputs=make_inputs,
                op=functools.partial(op, plan=plan, fixed=fixed),  # type: ignore[arg-type]
                reference=reference,  # type: ignore[arg-type]
                expect="pass" if fixed else "stale_replay",
                prepare=plan.plan,
                requires=requires,
                bit_exact=True,
                note=f"{note} ({'fixed: read on the device at replay' if fixed else 'buggy: frozen at capture'})",
            )
        )
        if not fixed:
            FINDINGS[name] = (gpu_finding, cpu_finding)


# The kernel controls register only where a GPU exists (as cases/platform/), and declare it too.
if torch.cuda.is_available():
    _register_pair(
        "kernel_position",
        kv_append_op,
        position_reference,
        gpu_finding=("kernel `kv_append`", "argument 5 (int) is 2 in the graph captured with A, 7 for B"),
        cpu_finding=None,
        requires=("gpu",),
        note="a KV-cache append at the plan's position passed as a kernel argument",
    )
    _register_pair(
        "kernel_grid",
        scale_rows_op,
        functools.partial(scaled_rows_reference, factor=2.0),
        gpu_finding=("kernel `scale_valid_rows`", "grid (1,1,1) captured, (2,1,1) needed"),
        cpu_finding=None,
        requires=("gpu",),
        note="a grid of ceil(valid rows / 4) blocks from the plan, no grid-stride loop",
    )
    _register_pair(
        "kernel_plan_count",
        run_plan_op,
        functools.partial(scaled_rows_reference, factor=3.0),
        gpu_finding=("kernel `run_plan`", "argument 4 (int) is 3 in the graph captured with A, 8 for B"),
        cpu_finding=None,
        requires=("gpu",),
        note="the plan's work list is refreshed on the device before every replay, its length is a kernel argument",
    )
    _register_pair(
        "kernel_fixup",
        fixup_op,
        fixup_reference,
        gpu_finding=("eager B runs kernel `apply_fixup` that the graph does not contain",),
        cpu_finding=None,
        requires=("gpu",),
        note="a fix-up pass launched only when the host plan says the batch needs it",
    )
_register_pair(
    "op_position",
    select_position_op,
    position_reference,
    gpu_finding=("a pointer into output 0 at byte 128", "a pointer into output 0 at byte 448"),
    cpu_finding=("op `aten.select.int`", "argument `index` is 2 in the graph captured with A, 7 for B"),
    note="a row written at the plan's position through select(0, position)",
)
_register_pair(
    "op_sized_rows",
    sized_rows_op,
    functools.partial(scaled_rows_reference, factor=2.0),
    gpu_finding=("in the graph captured with A", "for B"),
    cpu_finding=("op `aten.slice.Tensor`", "argument `end` is 3 in the graph captured with A, 8 for B"),
    note="work on the first n rows, n the plan's valid-row count",
)
_register_pair(
    "op_fixup",
    torch_fixup_op,
    fixup_reference,
    gpu_finding=("eager B runs kernel", "that the graph does not contain"),
    cpu_finding=("eager B runs op `aten.add_.Tensor` that the graph does not contain",),
    note="a fix-up add run only when the host plan says the batch needs it",
)
for _variant, _fixed in (("buggy", False), ("fixed", True)):
    _name = f"launch_params.sampler_seed.{_variant}"
    register(
        Case(
            name=_name,
            make_inputs=sampler_inputs,
            op=functools.partial(sample_op, philox=L.HostPhilox(seed=123, offset=0), fixed=_fixed),
            expect="pass" if _fixed else "stale_replay",
            bit_exact=True,
            note="inverse-CDF sampling over a flat 64-token distribution; buggy: (seed, offset) read on the "
            "host at call time, frozen by a capture; fixed: uniforms from torch's graph-safe generator",
        )
    )
FINDINGS["launch_params.sampler_seed.buggy"] = (
    ("kernel `sample_rows`", "argument 6 (unsigned long)", "in the graph captured with A"),
    ("op `graphsafe_launch_params.sample_rows.default`", "argument `offset`"),
)
