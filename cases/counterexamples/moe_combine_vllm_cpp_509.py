"""vllm.cpp PR #509: the MoE combine/gate port whose calculation was faithful but whose guards were not.

Public report: https://github.com/mudler/vllm.cpp/pull/509 (opened 2026-08-12; the review with both findings
2026-08-13). Reproduce: `graphsafe repro moe_combine_vllm_cpp_509`.

Finding 1, f16 reaches an arm without a refusal. The seam's IsFloat gate admits f16 and the kernel's
dispatch is `if bf16 ... else <float>`, so an f16 expert_out is read as f32: 4 bytes per 2-byte element.
  * fixed:  the production op refuses f16 by name          -> expect `refused`
  * buggy:  a Python-level emulation of the unguarded path: the f16 storage is reinterpreted as f32
            (`view(torch.float32)`), which reads the wrong bytes like the kernel did. The second half of
            what the kernel would read lies past the allocation; it is emulated with zeros and never read,
            so this control cannot crash.                        -> expect `eager_mismatch`
Finding 2, the test exercised only the f32 arms while the model runs bf16. The defect here is a run-time
flag of the real kernel entry point (`defect=1`, 0 in production; kernels/moe_combine/ops.py
moe_combine_negative_control): the bf16 store truncates instead of rounding to nearest even, a wrong bf16
store boundary. It lives in the bf16 arm only.
  * buggy kernel, f32-only case (what the PR tested)             -> expect `pass`: the case misses it
  * buggy kernel, production dtypes (bf16), bit-exact            -> expect `eager_mismatch`: caught
  * buggy kernel, production dtypes, bf16 tolerance 0.02         -> expect `pass`: truncation is within one
    bf16 ulp (< 0.8%), so only the bit-exact gate the review asked for catches it
  * fixed kernel, production dtypes, bit-exact                   -> expect `pass`
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.cases.moe_combine import ALL_F32, PROD, Mix, combine_op, make_inputs_factory
from graphsafe.kernels.moe_combine import ops, reference  # noqa: F401  (ops registers torch.ops.graphsafe.moe_combine*)
from graphsafe.toolkit import CaseTable, Column, Line, Report

T, K, H = 16, 4, 128  # H even: the f16 storage reinterprets as whole f32 words
F16_MIX = Mix("f16", torch.float16, torch.bfloat16, torch.float32)


def unguarded_f16_combine(
    expert_out: torch.Tensor, weights: torch.Tensor, shared: torch.Tensor
) -> torch.Tensor:
    """The #509 dispatch without the dtype refusal: anything not bf16 takes the f32 arm."""
    if expert_out.dtype != torch.bfloat16:
        n = expert_out.numel()
        words = expert_out.reshape(-1).view(torch.float32)  # the n/2 f32 words the allocation holds
        past_the_end = torch.zeros(n - words.numel(), dtype=torch.float32, device=expert_out.device)
        expert_out = torch.cat([words, past_the_end]).view(expert_out.shape)
    return torch.ops.graphsafe.moe_combine(expert_out, weights, shared, 1.0, torch.float32)


def truncating_store_combine(expert_out: torch.Tensor, weights: torch.Tensor, shared: torch.Tensor):
    return torch.ops.graphsafe.moe_combine_negative_control(
        expert_out, weights, shared, 0.7, expert_out.dtype, 1
    )


def _exact_reference(out_dtype: torch.dtype):
    def ref(expert_out, weights, shared):
        return reference.moe_combine_f32(expert_out, weights, shared, 0.7, out_dtype)

    return ref


def _f64_reference(expert_out, weights, shared):
    return reference.moe_combine_f64(expert_out, weights, shared, 1.0, torch.float32)


CASES = [
    register(c)
    for c in (
        Case(
            name="cx509.f16_expert_out.fixed",
            make_inputs=make_inputs_factory(T, K, H, F16_MIX),
            op=combine_op(1.0, torch.float32),
            reference=_f64_reference,
            expect="refused",
            family="counterexamples",
            note="the production op refuses f16 expert_out with a ValueError naming it",
        ),
        Case(
            name="cx509.f16_expert_out.unguarded",
            make_inputs=make_inputs_factory(T, K, H, F16_MIX),
            op=unguarded_f16_combine,
            reference=_f64_reference,
            expect="eager_mismatch",
            family="counterexamples",
            note="f16 bytes read as f32 (emulated in Python, in bounds): finite garbage, no error",
        ),
        Case(
            name="cx509.bf16_truncating_store.f32_only_case",
            make_inputs=make_inputs_factory(T, K, H, ALL_F32),
            op=truncating_store_combine,
            reference=_exact_reference(torch.float32),
            bit_exact=True,
            expect="pass",
            family="counterexamples",
            note="the PR's f32-only test: the defective bf16 arm is never entered, so it passes",
        ),
        Case(
            name="cx509.bf16_truncating_store.production_dtypes",
            make_inputs=make_inputs_factory(T, K, H, PROD),
            op=truncating_store_combine,
            reference=_exact_reference(torch.bfloat16),
            bit_exact=True,
            expect="eager_mismatch",
            family="counterexamples",
            note="production bf16 mix, bitwise vs the torch f32 oracle: truncation differs from RNE",
        ),
        Case(
            name="cx509.bf16_truncating_store.production_dtypes_tolerance",
            make_inputs=make_inputs_factory(T, K, H, PROD),
            op=truncating_store_combine,
            reference=_exact_reference(torch.bfloat16),
            expect="pass",
            family="counterexamples",
            note="detector limit on purpose: a 0.02 bf16 tolerance cannot see a sub-ulp store defect",
        ),
        Case(
            name="cx509.bf16_truncating_store.fixed",
            make_inputs=make_inputs_factory(T, K, H, PROD),
            op=combine_op(0.7, torch.bfloat16),
            reference=_exact_reference(torch.bfloat16),
            bit_exact=True,
            expect="pass",
            family="counterexamples",
            note="the fixed kernel (defect=0) on the production mix is bitwise equal to the oracle",
        ),
    )
]
(
    F16_FIXED,
    F16_UNGUARDED,
    TRUNCATING_F32_ONLY,
    TRUNCATING_PRODUCTION,
    TRUNCATING_PRODUCTION_TOLERANCE,
    STORE_FIXED,
) = CASES

REPORT = Report(
    title="vllm.cpp #509: MoE combine/gate ROCm port dropped the dtype refusals and tested only f32",
    url="https://github.com/mudler/vllm.cpp/pull/509",
    date="2026-08-13",
    reproduced="finding 1: an f16 expert_out read through the f32 arm (emulated in Python, in bounds) against "
    "the production op's refusal; finding 2: a wrong bf16 store boundary (truncation instead of round to "
    "nearest even, a run-time flag of the real kernel) seen or missed by the PR's f32-only case, the "
    "production bf16 mix at bf16 tolerance, and the production mix bit-exact as the review asked",
    left_out="the 2x out-of-bounds read itself: the emulation reads the f16 storage as f32 words and pads the "
    "half that lies past the allocation with zeros, so it cannot fault; the gfx1100 hardware; the review's "
    "smaller findings (duplicate CMake line, op count in the docs)",
    tables=(
        CaseTable(
            title="Review findings: what each check says about the buggy and the fixed op",
            label_header="finding / check",
            lines=(
                Line("1. f16 expert_out (no refusal vs refusal)", buggy=F16_UNGUARDED, fixed=F16_FIXED),
                Line("2. bf16 store, the PR's f32-only case", buggy=TRUNCATING_F32_ONLY),
                Line(
                    "2. bf16 store, production dtypes, bf16 tolerance 0.02",
                    buggy=TRUNCATING_PRODUCTION_TOLERANCE,
                ),
                Line(
                    "2. bf16 store, production dtypes, bit-exact",
                    buggy=TRUNCATING_PRODUCTION,
                    fixed=STORE_FIXED,
                ),
            ),
            columns=(
                Column("verdict", "buggy"),
                Column("verdict", "fixed"),
                Column("eager error", "buggy"),
                Column("expected"),
                Column("as expected"),
            ),
        ),
    ),
)
