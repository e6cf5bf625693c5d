"""Cases for the MoE combine/gate family (vllm.cpp PR #509): shared_expert_gate, moe_combine,
moe_combine_gate, through the graphsafe:: custom ops of kernels/moe_combine/ops.py.

What is compared, and why:
  * ``.exact`` cases: moe_combine is BIT-EXACT against kernels/moe_combine/reference.moe_combine_f32, an independent
    torch recipe of the same f32 operations in the same order with one rounding (reference.py explains
    why that holds). On the cpu backend eager is the g++ implementation; on a GPU it is the kernel. Both
    are checked bitwise against the same torch oracle.
  * ``.vs_cpu_impl`` cases: the sigmoid ops cannot be bit-exact against torch.sigmoid (different exp), so
    their bitwise check is eager vs the g++ CPU implementation (kernels/moe_combine/moe_combine.cpp), as the #509
    review asks (same math, same order, one store rounding). On the cpu backend that comparison is eager
    vs itself and proves nothing beyond replay == eager; it bites on a GPU.
  * ``.f64`` cases: every op against a float64 oracle with the per-dtype tolerance, independent of the
    f32 ordering choice (a tolerance override, where there is one, says why).
Dtype mixes: ``prod`` is the model path's mix (bf16 expert_out, bf16 shared, bf16 out: qwen3_5.cpp per the
#509 review); ``f32`` is all-f32; ``mixed`` is bf16 expert_out with f32 shared and f32 out.
Shapes: T=0, K=1, H=127/129 (not a multiple of the 8-wide vector path or the 256-thread block),
production H=7168, and a large T.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from graphsafe import Case, register
from graphsafe.kernels.moe_combine import ops, reference  # noqa: F401  (ops registers torch.ops.graphsafe.moe_combine*)

BF16, F32 = torch.bfloat16, torch.float32


@dataclass(frozen=True)
class Mix:
    """Storage dtypes of one case: expert_out, shared, out."""

    name: str
    expert_out: torch.dtype
    shared: torch.dtype
    out: torch.dtype


MIXES = (Mix("prod", BF16, BF16, BF16), Mix("f32", F32, F32, F32), Mix("mixed", BF16, F32, F32))
PROD, ALL_F32 = MIXES[0], MIXES[1]

# (T, K, H): T=0 (no tokens), K=1, H off the vector width and the block size, production H, and a large T.
# NOTE on the large T: H=129 takes the scalar path, so 9000 x 129 = 1.16M threads' worth of elements, more
# than one grid of the H200 holds (132 SMs x 32 blocks x 256 threads = 1.08M): the grid-stride loop
# iterates. A 4096 x 4096 production-width version took minutes per case on the 2-core CI machine.
SMALL_SHAPES = ((0, 8, 128), (7, 1, 129), (33, 8, 127))
PROD_SHAPES = (*SMALL_SHAPES, (16, 8, 7168), (9000, 2, 129))


def _stamp_seed(t: torch.Tensor, seed: int) -> None:
    """Make the first element a function of the seed, so that two seeds never give equal tensors.

    A one-element bf16 tensor (T=1, K=1, H=1) drew the same value for seeds 315 and 316 in the CI profile of
    the Hypothesis sweep, and the protocol refuses inputs that do not differ between A and B. k/32 for
    k < 128 is exact in bf16 and f32, and consecutive seeds (A and its B_i) get different k.
    """
    if t.numel():
        t.view(-1)[0] = (seed % 128) / 32.0


def make_inputs_factory(
    T: int, K: int, H: int, mix: Mix, *, shared: bool = True, gate: bool = False, routed: bool = True
) -> Callable[[int, torch.device], dict[str, torch.Tensor]]:
    """Inputs for one shape and dtype mix; every tensor depends on the seed (none is static)."""

    def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        inputs: dict[str, torch.Tensor] = {}
        if routed:
            inputs["expert_out"] = torch.randn(T, K, H, generator=g).to(mix.expert_out)
            # Router weights: positive, summing to 1 per token like a softmax over the selected top-k; with
            # K=1 normalising would make every weight 1.0 for every seed, so K=1 keeps the raw draw.
            w = torch.rand(T, K, generator=g) + 0.05
            inputs["weights"] = w / w.sum(dim=1, keepdim=True) if K > 1 else w
        if shared:
            inputs["shared"] = torch.randn(T, H, generator=g).to(mix.shared)
        if gate:
            inputs["gate_logit"] = 3.0 * torch.randn(T, generator=g)  # reaches the sigmoid's flat tails
        for t in inputs.values():
            _stamp_seed(t, seed)
        return {name: t.to(device) for name, t in inputs.items()}

    return make_inputs


# Shape search beside the hand list (harness/search.py): every T, K and H up to past the 256-thread block and
# around the 8-wide vector path, walked one dimension at a time and combined by Hypothesis; the hand list keeps
# the production width (7168) and the grid-stride T (9000), which a search would only pay for again.
SEARCH_SIZES = {"T": range(0, 97), "K": range(1, 9), "H": range(1, 265)}


def sized_inputs_factory(mix: Mix, **flags: bool) -> Callable[..., dict[str, torch.Tensor]]:
    """make_inputs taking the searched T, K, H as keyword arguments (Case.sizes)."""

    def make_inputs(seed: int, device: torch.device, *, T: int, K: int, H: int) -> dict[str, torch.Tensor]:
        return make_inputs_factory(T, K, H, mix, **flags)(seed, device)

    return make_inputs


def on_cpu_implementation(op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Reference = the same op run by the g++ CPU implementation, moved back to the inputs' device."""

    def reference_fn(**inputs: torch.Tensor) -> torch.Tensor:
        device = next(iter(inputs.values())).device
        return op(**{k: v.cpu() for k, v in inputs.items()}).to(device)

    return reference_fn


def combine_op(routed_scale: float, out_dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    def op(expert_out, weights, shared=None):
        return torch.ops.graphsafe.moe_combine(expert_out, weights, shared, routed_scale, out_dtype)

    return op


def combine_gate_op(routed_scale: float, out_dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    def op(expert_out, weights, shared, gate_logit):
        return torch.ops.graphsafe.moe_combine_gate(
            expert_out, weights, shared, gate_logit, routed_scale, out_dtype
        )

    return op


def gate_op(out_dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    def op(gate_logit, shared):
        return torch.ops.graphsafe.shared_expert_gate(gate_logit, shared, out_dtype)

    return op


def _bind(fn: Callable[..., torch.Tensor], **params) -> Callable[..., torch.Tensor]:
    def bound(**inputs: torch.Tensor) -> torch.Tensor:
        return fn(**inputs, **params)

    return bound


def shape_name(T: int, K: int, H: int) -> str:
    return f"T{T}K{K}H{H}"


# NOTE on the f32-output gate tolerance: the op rounds its shared term through bf16 by definition, and the
# f64 oracle rounds gate*shared computed in f64, the kernel gate*shared computed in f32 with its own expf:
# they may round to neighbouring bf16 values, one bf16 ulp = 2^-8 of the shared term. Relative to
# max|ref| that is below 1e-2 for these inputs; the f32 default 1e-5 would flag the definition itself.
GATE_F32_TOLERANCE = 1e-2


def register_cases() -> list[Case]:
    cases: list[Case] = []
    for mix in MIXES:
        for scale in (1.0, 0.7):
            for T, K, H in PROD_SHAPES if mix is PROD else SMALL_SHAPES:
                dims = shape_name(T, K, H)
                for with_shared in (True, False) if mix is PROD else (True,):
                    tag = "" if with_shared else ".noshared"
                    cases.append(
                        Case(
                            name=f"moe_combine.{mix.name}.s{scale}{tag}.{dims}.exact",
                            make_inputs=make_inputs_factory(T, K, H, mix, shared=with_shared),
                            op=combine_op(scale, mix.out),
                            reference=_bind(reference.moe_combine_f32, routed_scale=scale, out_dtype=mix.out),
                            bit_exact=True,
                            family="moe_combine",
                            note="bitwise vs reference.moe_combine_f32 (independent torch, same f32 ops in the "
                            "same order, one rounding): holds on both backends",
                        )
                    )
            T, K, H = 33, 8, 127
            cases.append(
                Case(
                    name=f"moe_combine.{mix.name}.s{scale}.{shape_name(T, K, H)}.f64",
                    make_inputs=make_inputs_factory(T, K, H, mix),
                    op=combine_op(scale, mix.out),
                    reference=_bind(reference.moe_combine_f64, routed_scale=scale, out_dtype=mix.out),
                    family="moe_combine",
                    note="per-dtype tolerance vs a float64 einsum oracle",
                )
            )
            for T, K, H in ((0, 8, 128), (7, 1, 129), (33, 8, 127), (16, 8, 7168))[: 4 if mix is PROD else 3]:
                dims = shape_name(T, K, H)
                make = make_inputs_factory(T, K, H, mix, gate=True)
                op = combine_gate_op(scale, mix.out)
                cases.append(
                    Case(
                        name=f"moe_combine_gate.{mix.name}.s{scale}.{dims}.vs_cpu_impl",
                        make_inputs=make,
                        op=op,
                        reference=on_cpu_implementation(op),
                        bit_exact=True,
                        family="moe_combine",
                        note="bitwise vs the g++ CPU implementation (same expf, order, rounding); on the cpu "
                        "backend that is eager vs itself, so only replay == eager is checked there",
                    )
                )
                cases.append(
                    Case(
                        name=f"moe_combine_gate.{mix.name}.s{scale}.{dims}.f64",
                        make_inputs=make,
                        op=op,
                        reference=_bind(
                            reference.moe_combine_gate_f64, routed_scale=scale, out_dtype=mix.out
                        ),
                        tolerance=None if mix.out == BF16 else GATE_F32_TOLERANCE,
                        family="moe_combine",
                        note="float64 oracle; f32 out: one bf16 ulp of the bf16-rounded shared term "
                        "(see GATE_F32_TOLERANCE)",
                    )
                )
    for mix in MIXES:
        for T, C in ((0, 64), (7, 129), (33, 7168))[: 3 if mix is PROD else 2]:
            make = make_inputs_factory(T, 1, C, mix, gate=True, routed=False)
            op = gate_op(mix.out)
            cases.append(
                Case(
                    name=f"shared_expert_gate.{mix.name}.T{T}C{C}.vs_cpu_impl",
                    make_inputs=make,
                    op=op,
                    reference=on_cpu_implementation(op),
                    bit_exact=True,
                    family="moe_combine",
                    note="bitwise vs the g++ CPU implementation; trivial on the cpu backend",
                )
            )
            cases.append(
                Case(
                    name=f"shared_expert_gate.{mix.name}.T{T}C{C}.f64",
                    make_inputs=make,
                    op=op,
                    reference=_bind(reference.shared_expert_gate_f64, out_dtype=mix.out),
                    family="moe_combine",
                    note="per-dtype tolerance vs float64 sigmoid * shared",
                )
            )
    for mix in (PROD, MIXES[2]):
        cases.append(
            Case(
                name=f"moe_combine.{mix.name}.s0.7.search.exact",
                make_inputs=sized_inputs_factory(mix),
                op=combine_op(0.7, mix.out),
                reference=_bind(reference.moe_combine_f32, routed_scale=0.7, out_dtype=mix.out),
                bit_exact=True,
                family="moe_combine",
                sizes=SEARCH_SIZES,
                note="bitwise vs reference.moe_combine_f32 at every searched T, K, H",
            )
        )
    gate = combine_gate_op(1.0, PROD.out)
    cases.append(
        Case(
            name="moe_combine_gate.prod.s1.0.search.vs_cpu_impl",
            make_inputs=sized_inputs_factory(PROD, gate=True),
            op=gate,
            reference=on_cpu_implementation(gate),
            bit_exact=True,
            family="moe_combine",
            sizes=SEARCH_SIZES,
            note="bitwise vs the g++ CPU implementation at every searched T, K, H (trivial on the cpu backend)",
        )
    )
    # Refusals: f16 anywhere a storage dtype goes is refused by name before any pointer is read.
    f16 = Mix("f16", torch.float16, torch.float16, torch.float16)
    cases.append(
        Case(
            name="moe_combine.f16_expert_out.refused",
            make_inputs=make_inputs_factory(5, 2, 16, Mix("f16eo", torch.float16, BF16, BF16)),
            op=combine_op(1.0, BF16),
            expect="refused",
            family="moe_combine",
            note="ValueError naming expert_out and the allowed dtypes (vllm.cpp#509 finding 1)",
        )
    )
    cases.append(
        Case(
            name="shared_expert_gate.f16_shared.refused",
            make_inputs=make_inputs_factory(5, 1, 16, f16, gate=True, routed=False),
            op=gate_op(BF16),
            expect="refused",
            family="moe_combine",
            note="ValueError naming shared and the allowed dtypes",
        )
    )
    return [register(case) for case in cases]


CASES = register_cases()
