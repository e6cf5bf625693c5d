"""sglang-omni PR #419: the Qwen3-Omni talker's layer-0 sampler replays a (seed, offset) frozen at capture.

Public report: https://github.com/sgl-project/sglang-omni/pull/419 (2026-05-09), "[Fix] Qwen3-Omni: Force
pytorch sampling backend for talker layer-0", with the root cause traced in #415. Under CUDA graphs the
talker's layer-0 codec token is sampled by FlashInfer's top_k_top_p_sampling_from_probs without a seed, so
FlashInfer's get_seed_and_offset reads the generator's (seed, offset) on the host and passes them to the
sampling kernel as plain values: captured once, every replay draws the same uniform numbers. "Most samples
normal, but a small fraction blowing up to 558%, 897% WER": where the layer-0 distribution is peaked, any
uniform picks the same token, and only the flatter "trap prompts" loop. The frozen offset differs from boot
to boot ("12847 on boot 1, 12903 on boot 2, 12856 on boot 3"), so which prompts fail changes with every
restart. The fix samples layer 0 with the pytorch backend (graph-safe torch RNG).

Rebuilt here with the talker's sampling settings (sglang-omni talker_executor.py: temperature 0.9, top_k 50,
top_p 1.0; a 3072-token codec vocabulary whose top 1024 ids are suppressed) on 8 rows:
- buggy: softmax(logits / 0.9), top-50 mask, then the launch_params family's `sample_rows` kernel with
  (seed, offset) computed on the host at call time as get_seed_and_offset does (seed 123, offset from the
  report's 12847, advanced by batch * 32 per call); the kernel takes them as plain arguments;
- fixed: the same filtered distribution sampled with torch.multinomial (the pytorch backend: graph-safe).
What the tables show:
1. peaked layer-0 distributions (the report's "most samples"), outputs compared (the second table, run
   without the launch diff and not registered, so `verify --explain` never meets it): the buggy variant PASSES.
   Its replay draws other uniforms than eager B, but every one picks the dominant token, so the tokens are
   the same; nothing else the harness checks sees it either: eager matches the reference (the dominant
   token), the hidden-state probe's fresh eager B matches the later one (same token), and every output
   element is written (no poison). The frozen value gives the right output for these inputs.
2. the same cases with `launch_diff=True`: the launch diff compares the graph captured with A with a capture
   made for B and finds the sampling kernel's offset argument frozen (stale_replay, the finding in the
   detail); the fixed variant has no launch difference. This line is caught by the launch diff alone.
3. flat "trap" distributions, outputs compared: the frozen uniforms pick other tokens than eager's, so the
   output comparison catches the buggy variant by itself (stale_replay), as the report's failing prompts.

Left out: the talker model, the code predictor's layers 1..15, the repetition penalty and the WER
measurement; the top_p filter (1.0 keeps every token); FlashInfer's rejection-sampling kernel (ours is an
inverse-CDF scan over the same filtered distribution: the frozen arguments are the same two integers); the
drift of the frozen offset across boots (one process here). On the cpu backend the sampling op is a torch
custom op whose (seed, offset) arguments the dispatcher record freezes the same way.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from graphsafe import Case, check, register
from graphsafe.kernels.launch_params import ops as L
from graphsafe.toolkit import CaseTable, Column, Line, MeasuredTable, Measurement, Report

ROWS, VOCAB, SUPPRESSED = 8, 3072, 1024  # talker codec vocabulary; its top 1024 ids are never sampled
TEMPERATURE, TOP_K = 0.9, 50
SEED, OFFSET_AT_CAPTURE = 123, 12847  # the report's torch.manual_seed(123) and boot-1 offset
INCREMENT = ROWS * 32  # flashinfer top_k_top_p_sampling_from_probs: get_seed_and_offset(batch_size * 32)
PEAKED_MARGIN, TRAP_MARGIN = 16.0, 0.0  # logit lead of each row's dominant token over N(0, 1) noise


def _inputs(seed: int, device: torch.device, *, margin: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(ROWS, VOCAB, generator=g)
    dominant = torch.randint(0, VOCAB - SUPPRESSED, (ROWS,), generator=g)
    logits[torch.arange(ROWS), dominant] += margin
    return {"logits": logits.to(device)}


def _filtered_probs(logits: torch.Tensor) -> torch.Tensor:
    """softmax(logits / temperature) over the live codec ids, keeping the top 50 (the rest 0)."""
    live = logits.float().clone()
    live[:, VOCAB - SUPPRESSED :] = -torch.inf
    probs = torch.softmax(live / TEMPERATURE, dim=-1)
    kth = torch.topk(probs, TOP_K, dim=-1).values[:, -1:]
    return torch.where(probs >= kth, probs, torch.zeros_like(probs))


def sample_layer0(logits: torch.Tensor, *, philox: L.HostPhilox | None) -> torch.Tensor:
    probs = _filtered_probs(logits)
    if philox is None:  # the fix: the pytorch sampling backend
        return torch.multinomial(probs, 1).squeeze(1)
    seed, offset = philox.advance(INCREMENT)  # get_seed_and_offset: host integers, frozen by a capture
    return L.sample_rows(probs, None, seed, offset)


def dominant_token(logits: torch.Tensor) -> torch.Tensor:
    """The oracle of a peaked row: its most likely live token."""
    return logits[:, : VOCAB - SUPPRESSED].double().argmax(dim=-1)


def _case(name: str, margin: float, fixed: bool, launch_diff: bool, expect: str, note: str) -> Case:
    philox = None if fixed else L.HostPhilox(seed=SEED, offset=OFFSET_AT_CAPTURE - INCREMENT)
    return register(
        Case(
            name=f"sglang_omni419.layer0_sampling.{name}",
            make_inputs=functools.partial(_inputs, margin=margin),
            op=functools.partial(sample_layer0, philox=philox),
            reference=dominant_token if margin == PEAKED_MARGIN else None,
            bit_exact=True,
            expect=expect,
            launch_diff=launch_diff,
            note=note,
        )
    )


EXPLAINED_BUGGY = _case(
    "peaked.launch_diff.buggy",
    PEAKED_MARGIN,
    fixed=False,
    launch_diff=True,
    expect="stale_replay",
    note="the launch diff finds the sampling kernel's offset argument frozen at capture",
)
EXPLAINED_FIXED = _case(
    "peaked.launch_diff.fixed",
    PEAKED_MARGIN,
    fixed=True,
    launch_diff=True,
    expect="pass",
    note="no launch difference: the uniforms come from torch's generator at replay",
)
TRAP_BUGGY = _case(
    "trap.buggy",
    TRAP_MARGIN,
    fixed=False,
    launch_diff=False,
    expect="stale_replay",
    note="a flat distribution: the frozen uniforms pick other tokens than eager's",
)
TRAP_FIXED = _case(
    "trap.fixed", TRAP_MARGIN, fixed=True, launch_diff=False, expect="pass", note="torch.multinomial"
)


def outputs_only(case: Case) -> Case:
    """The case without the launch diff: what the harness checked before it (not registered, so that
    `verify --explain` does not run a case built to pass the output comparison)."""
    return dataclasses.replace(
        case, name=case.name.replace(".launch_diff.", ".outputs_only."), launch_diff=False
    )


def _outputs_only_rows(backend: str) -> list[Measurement]:
    rows = []
    for side, case in (("main", EXPLAINED_BUGGY), ("#419", EXPLAINED_FIXED)):
        result = check(outputs_only(case), backend, replays=REPORT.replays)
        rows.append(
            Measurement(
                (f"peaked, {side}", result.verdict, result.detail or "-"), ok=result.verdict == "pass"
            )
        )
    return rows


REPORT = Report(
    title="sglang-omni #419: Qwen3-Omni talker layer-0 sampling replays a (seed, offset) frozen at CUDA-graph capture",
    url="https://github.com/sgl-project/sglang-omni/pull/419",
    date="2026-05-09",
    reproduced="FlashInfer-style sampling whose (seed, offset) are host integers read at call time (frozen by a "
    "capture) against torch.multinomial, on peaked and flat distributions with the talker's sampling settings; "
    "the peaked line passes the output comparison and is caught only by the launch diff",
    left_out="the talker model, layers 1..15, the repetition penalty and WER; FlashInfer's rejection-sampling "
    "kernel (an inverse-CDF kernel with the same two frozen arguments); the offset's drift across boots",
    tables=(
        CaseTable(
            title="layer-0 sampling under graph replay (main: FlashInfer backend without a seed; #419: pytorch backend)",
            label_header="distribution, check",
            lines=(
                Line("peaked, launch diff", buggy=EXPLAINED_BUGGY, fixed=EXPLAINED_FIXED),
                Line("flat (trap prompt), outputs compared", buggy=TRAP_BUGGY, fixed=TRAP_FIXED),
            ),
            columns=(
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="#419"),
                Column("detail", "buggy", header="main: detail"),
                Column("as expected"),
            ),
            sides=("main", "#419"),
        ),
        MeasuredTable(
            title="the peaked line with outputs compared only (the harness before the launch diff)",
            headers=("distribution, side", "verdict", "detail"),
            measure=_outputs_only_rows,
            claim="both pass: the frozen uniforms still pick every row's dominant token, so the output comparison, "
            "the reference, the hidden-state probe and the poison scan all miss main's bug",
        ),
    ),
)
