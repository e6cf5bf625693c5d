"""local-inference-lab/vllm PR #619: a side-stream gate projection inside a captured layer, made graph-safe.

Public report: https://github.com/local-inference-lab/vllm/pull/619 (2026-09-03), "perf(glm5next): make KDA
gate overlap graph-safe" (the side stream itself came from PR #582). GLM-5.3's KDA layer runs its low-rank
gate projections g_b(g_a(x)) on a side CUDA stream while the main stream computes the packed QKV projection;
the streams join before the gate is consumed. The intermediate g_a(x) is produced on the main stream and read
on the side stream: unless it records that consumer stream, the caching allocator may recycle its storage
for the main stream's next allocation while the side stream is still reading it. The PR records the
consumer stream (and keeps the overlap out of uncaptured warm-up and breakable capture).

Rebuilt here on one GPU (torch ops and streams): out = qkv * sigmoid(g_b(g_a(x))), with
- sequential: every projection on the main stream (`VLLM_GLM53_KDA_GATE_SIDE_STREAM=0`), which also runs
  on the cpu backend;
- buggy: g_a(x) is written into a block the main stream reuses for the QKV projection as soon as its own use
  ends, which is what the allocator does with a block that did not record its side-stream consumer; the
  side stream's projection is made slow (`torch.cuda._sleep`) so its read lands after the reuse, as a
  long GEMM's would: eager and graph both read the QKV values as the gate input (`eager_mismatch`);
- fixed: the QKV projection gets storage of its own while the consumer runs (what `record_stream` buys):
  the overlap stays, the output equals the sequential one (`pass`).
The recycled block is held explicitly (one scratch tensor per device), so the reuse is deterministic instead
of depending on the caching allocator's choice of block.

Left out: the KDA layer and GLM-5.3; the lifecycle guard's other half (no overlap during uncaptured
graph-preparation forwards and breakable capture: the harness's warm-up runs the overlap eagerly, which the
fixed variant survives because its storage is protected either way); the allocator's own recycling
decision. The side-stream variants need CUDA streams: on the cpu backend they print as skipped.
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

TOKENS, HIDDEN, WIDTH = 32, 256, 512  # the gate and QKV projections share a width: one block fits either
SLEEP_CYCLES = 20_000_000  # about 10 ms at 2 GHz: the side stream's projection outlasts the main stream's
_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}
_RECYCLED: dict[torch.device, torch.Tensor] = {}


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.Generator().manual_seed(619)  # static: the layer's weights
    return {
        "x": torch.randn(TOKENS, HIDDEN, generator=g).to(device),
        "w_qkv": (torch.randn(HIDDEN, WIDTH, generator=w) / HIDDEN**0.5).to(device),
        "w_ga": (torch.randn(HIDDEN, WIDTH, generator=w) / HIDDEN**0.5).to(device),
        "w_gb": (torch.randn(WIDTH, WIDTH, generator=w) / WIDTH**0.5).to(device),
    }


def gate_layer(
    x: torch.Tensor, w_qkv: torch.Tensor, w_ga: torch.Tensor, w_gb: torch.Tensor, *, mode: str
) -> torch.Tensor:
    if mode == "sequential":
        return (x @ w_qkv) * torch.sigmoid((x @ w_ga) @ w_gb)
    if x.device.type != "cuda":
        raise NotImplementedError(f"mode {mode!r} overlaps two CUDA streams; inputs are on {x.device}")
    main = torch.cuda.current_stream(x.device)
    side = _SIDE_STREAMS.setdefault(x.device, torch.cuda.Stream(x.device))
    recycled = _RECYCLED.get(x.device)
    if recycled is None:
        recycled = _RECYCLED[x.device] = torch.empty(TOKENS, WIDTH, device=x.device)
    intermediate = torch.matmul(x, w_ga, out=recycled)  # g_a(x), on the main stream
    side.wait_stream(main)
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)  # the side projection runs long
        gate = intermediate @ w_gb  # g_b reads the intermediate on the side stream
    # unrecorded: the block is handed on while g_b still reads it; recorded: the QKV projection gets storage
    # of its own, the block stays the intermediate's until its consumer is done.
    qkv = torch.matmul(x, w_qkv, out=recycled) if mode == "unrecorded" else x @ w_qkv
    main.wait_stream(side)  # join before the gate is consumed
    return qkv * torch.sigmoid(gate)


def reference(x: torch.Tensor, w_qkv: torch.Tensor, w_ga: torch.Tensor, w_gb: torch.Tensor) -> torch.Tensor:
    x, w_qkv, w_ga, w_gb = (t.double() for t in (x, w_qkv, w_ga, w_gb))
    return ((x @ w_qkv) * torch.sigmoid((x @ w_ga) @ w_gb)).float()


def _case(variant: str, mode: str, expect: str, note: str) -> Case:
    return register(
        Case(
            name=f"vllm_lil619.kda_gate.{variant}",
            make_inputs=make_inputs,
            op=functools.partial(gate_layer, mode=mode),
            reference=reference,
            expect=expect,
            static_inputs=("w_qkv", "w_ga", "w_gb"),
            note=note,
        )
    )


SEQUENTIAL = _case("sequential", "sequential", "pass", "every projection on the main stream")
STREAMS = "the overlap needs CUDA streams; the cpu backend runs one stream"
BUGGY = FIXED = None
if torch.cuda.is_available():
    BUGGY = _case("buggy", "unrecorded", "eager_mismatch", "the intermediate's block is recycled under g_b")
    FIXED = _case("fixed", "recorded", "pass", "the intermediate keeps its block until g_b is done")

REPORT = Report(
    title="local-inference-lab/vllm #619: KDA gate projections on a side stream inside a captured layer",
    url="https://github.com/local-inference-lab/vllm/pull/619",
    date="2026-09-03",
    reproduced="a layer whose gate projections run on a side stream while the main stream computes the "
    "packed projection: sequential, with the intermediate's storage recycled under its side-stream consumer "
    "(main), and with that storage kept until the consumer is done (the PR)",
    left_out="the KDA layer and GLM-5.3; the lifecycle guard for uncaptured graph-preparation forwards and "
    "breakable capture; the caching allocator's own recycling (held explicitly, so the reuse is "
    "deterministic); on the cpu backend the two side-stream lines (no streams there)",
    tables=(
        CaseTable(
            title="Gate projections: sequential, and overlapped on a side stream",
            label_header="execution",
            lines=(
                Line("sequential (side stream off)", fixed=SEQUENTIAL),
                Line("side stream", buggy=BUGGY, fixed=FIXED, gpu_only=STREAMS),
            ),
            columns=(
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="PR"),
                Column("eager error", "buggy", header="main eager error"),
                Column("graph error", "fixed", header="PR graph error"),
                Column("as expected"),
            ),
            sides=("main", "PR"),
        ),
    ),
)
