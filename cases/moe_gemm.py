"""Cases for the grouped quantized MoE GEMM (aiter PR #5831): graphsafe::moe_gemm behind the sync-free
routing of kernels/common/routing.py, for every weight format of kernels/common/quant.py.

What is compared, and why:
  * The routing runs inside the captured op: A and B differ in expert ids / group sizes (and tokens), so a
    replay only passes if the block map is rebuilt on the device every time (no .item(), no frozen shape).
  * Reference: kernels/moe_gemm/reference.moe_gemm_reference, f32 matmul over weights dequantized with the
    kernels' own decode. What is left is f32 summation order and ONE bf16 rounding of the output (half an
    ulp: 2^-8 of the value), so every format gets the same tight threshold TOLERANCE, not aiter PR #5831's
    quantization thresholds (those bound the error against UNquantized weights; tests/test_moe_gemm_ops.py
    checks them and reports the cosine against the fp32 product).
  * Weights are static (same for A and B, as after model load); x, routing and group sizes are dynamic.

Configurations: aiter PR #5831's 13 shape/layout configurations (K=96: a partial 128-block for block_fp8; K=32:
one K chunk; ragged [0,7,64,1,100,0,84,0] with zero-token experts; NK-view vs KN-copy layouts; decode
1 token per expert; top-k routing with -1 padding and foreign experts under expert parallelism) run in
mxfp8; every other format runs the 3 configurations that stress its layout (K=96, ragged, EP top-k).
Decode (1 token per expert) runs in mxfp8 (the CUDA-core kernel, its zero-fill folded into its own grid) and
mxfp4 (the tensor-core ring kernel) with NaN rows, slack rows and empty experts; mxfp4 also runs the prefill
configurations (the prefill tile kernel, its e2m1 weights decoded in registers).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from graphsafe import Case, register
from graphsafe.kernels.common import quant, routing
from graphsafe.kernels.moe_gemm import ops as moe_gemm_ops  # importing it registers graphsafe::moe_gemm
from graphsafe.kernels.moe_gemm.reference import moe_gemm_reference

# 2^-8 (bf16 half ulp, relative) plus f32 reordering (K <= 256: ~1e-5), rounded up.
TOLERANCE = 5e-3
RAGGED = (0, 7, 64, 1, 100, 0, 84, 0)


@dataclass(frozen=True)
class Config:
    name: str
    experts: int
    n: int
    k: int
    block_m: int
    sizes: tuple[int, ...] | None = None  # group-size routing: per-expert max tokens (drawn per seed)
    tokens: int = 0  # top-k routing: tokens and top-k
    topk: int = 0
    ep_foreign: bool = False  # half the ids belong to another rank's experts, plus -1 padding
    kn_copy: bool = False  # weight passed as a KN-contiguous copy (strided path) instead of the NK view
    slack: int = 0  # rows no expert claims in group-size routing
    nan_rows: int = 0  # x rows that hold one NaN (drawn per seed): the op returns (values, NaN mask)


CONFIGS = (
    Config("uniform_k128", 8, 64, 128, 4, sizes=(4,) * 8),
    Config("uniform_k128_kncopy", 8, 64, 128, 4, sizes=(4,) * 8, kn_copy=True),
    Config("k96_partial_block", 8, 64, 96, 4, sizes=(6,) * 8),
    Config("k32_single_block", 8, 64, 32, 4, sizes=(6,) * 8),
    Config("ragged_bm16", 8, 64, 64, 16, sizes=RAGGED),
    Config("ragged_bm64_kncopy", 8, 48, 64, 64, sizes=RAGGED, kn_copy=True),
    Config("decode_1tok", 16, 64, 256, 1, sizes=(1,) * 16),
    Config("topk_t32", 8, 64, 128, 4, tokens=32, topk=2),
    Config("topk_ep_half_foreign", 8, 64, 128, 4, tokens=32, topk=2, ep_foreign=True),
    Config("n129_k256", 4, 129, 256, 16, sizes=(20, 0, 9, 33)),
    Config("n127_k160_slack", 4, 127, 160, 8, sizes=(5, 11, 0, 3), slack=9),
    Config("single_expert", 1, 64, 64, 16, sizes=(33,)),
    Config("one_hot_expert", 8, 64, 64, 16, sizes=(0, 0, 0, 50, 0, 0, 0, 0)),
)
PER_FORMAT_CONFIGS = ("k96_partial_block", "ragged_bm16", "topk_ep_half_foreign")
# Decode slots of one row: experts draw 0 or 1 token per seed (empty experts change between A and B), 5 slack
# rows no slot covers (zero-filled inside the op) and -1 surplus slots, and 2 NaN rows whose mask must follow
# the seed. mxfp8 takes the CUDA-core kernel with its zero-fill blocks, mxfp4 the ring kernel (moe_gemm.hip).
DECODE_CONFIGS = (Config("decode_1tok_nan_slack", 16, 72, 256, 1, sizes=(1,) * 16, slack=5, nan_rows=2),)
DECODE_FORMATS = ("mxfp8", "mxfp4")
MXFP4_CONFIGS = ("decode_1tok", "n127_k160_slack")
# Slots of more than 16 rows in bf16/mxfp8/block_fp8/mxfp4 with the NK view take a prefill kernel on CUDA
# sm_80+ (moe_gemm.hip): on the H100 / H200 (sm_90a builds) the warpgroup-MMA kernels (128 weight columns per
# CTA; 192 for MXFP8 and MXFP4 at block_m >= 128), elsewhere gs_moe_gemm_prefill_kernel (64 x 256 output
# tiles, 128 x 256 with 8 warps for block_m >= 128). These reach them with empty experts and uncovered rows
# (ragged + slack), a partial column tile past N (N=300) and a partial stage (K=224: 7 chunks), -1 slots and
# foreign experts (EP top-k), and NaN rows whose mask must follow the seed; the bm128 ones with slots that
# leave part of a 128-row tile idle (up to 100 and 150 rows).
PREFILL_CONFIGS = (
    Config("prefill_bm64_ragged", 8, 300, 224, 64, sizes=RAGGED, slack=9),
    Config("prefill_bm64_topk_ep", 8, 136, 256, 64, tokens=96, topk=2, ep_foreign=True),
    Config("prefill_bm64_nan_rows", 4, 264, 128, 64, sizes=(70, 0, 40, 20), slack=5, nan_rows=3),
    Config("prefill_bm128_ragged", 8, 300, 224, 128, sizes=RAGGED, slack=9),
    Config("prefill_bm128_nan_rows", 4, 264, 128, 128, sizes=(150, 0, 40, 20), slack=5, nan_rows=3),
)
PREFILL_FORMATS = ("bf16", "mxfp8", "block_fp8", "mxfp4")
# The ring kernel (slots of up to 16 rows, MXFP4 included) with its x ring one stage ahead of the weights:
# uncovered rows (slack, empty experts; bf16 zero-fills in the ring's own grid), NaN rows that must keep their
# mask, K=288 = two stages of 4 chunks plus a partial one with scale rows of 9 bytes (no 4-byte copies),
# N=136 past the 128-column tile.
RING_CONFIGS = (
    Config(
        "ring_bm16_k288_nan_slack", 8, 136, 288, 16, sizes=(16, 0, 5, 16, 3, 0, 11, 1), slack=7, nan_rows=2
    ),
)
RING_FORMATS = ("bf16", "mxfp8", "block_fp8", "mxfp4")


@functools.lru_cache(maxsize=16)  # a shape search asks for many (E, N, K): keep the last few
def _weights(fmt: str, experts: int, n: int, k: int) -> quant.QuantizedWeight:
    w = torch.randn(experts, n, k, generator=torch.Generator().manual_seed(4004))
    return quant.quantize_weight(w, fmt)


def _weight_inputs(fmt: str, cfg: Config, device: torch.device) -> dict[str, torch.Tensor]:
    w, s, g = moe_gemm_ops.kn_views(_weights(fmt, cfg.experts, cfg.n, cfg.k))
    if cfg.kn_copy:
        w, s = w.contiguous(), (s.contiguous() if s is not None else None)
    out = {"w": w.to(device)}  # .to keeps a view's strides only for the same device; re-view below
    if w.device != device and not cfg.kn_copy:
        out["w"] = w.transpose(1, 2).to(device).transpose(1, 2)
    if s is not None:
        out["w_scale"] = s.transpose(1, 2).to(device).transpose(1, 2) if not cfg.kn_copy else s.to(device)
    if g is not None:
        out["w_global"] = g.to(device)
    return out


def _routing_inputs(cfg: Config, g: torch.Generator) -> dict[str, torch.Tensor]:
    if cfg.sizes is not None:
        # Each expert draws 0..max tokens, so sizes (and which experts are empty) change between seeds;
        # experts the config gives 0 stay empty. Rows: sum of the maxima + slack, a static bound.
        maxima = torch.tensor(cfg.sizes)
        sizes = (
            (torch.rand(len(cfg.sizes), generator=g) * (maxima + 1)).floor().to(torch.int32).clamp(max=maxima)
        )
        return {"group_sizes": sizes}
    local_experts = cfg.experts
    span = 2 * local_experts if cfg.ep_foreign else local_experts
    ids = torch.randint(0, span, (cfg.tokens, cfg.topk), generator=g)
    if cfg.ep_foreign:
        ids[torch.rand(cfg.tokens, cfg.topk, generator=g) < 0.1] = -1  # top-k padding
    return {"topk_ids": ids.to(torch.int32)}


def _rows(cfg: Config) -> int:
    return sum(cfg.sizes) + cfg.slack if cfg.sizes is not None else cfg.tokens * cfg.topk


def _make_inputs(fmt: str, cfg: Config):
    def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(cfg.tokens if cfg.sizes is None else _rows(cfg), cfg.k, generator=g)
        if cfg.nan_rows:
            rows = torch.randperm(x.shape[0], generator=g)[: cfg.nan_rows]
            x[rows, torch.randint(0, cfg.k, (cfg.nan_rows,), generator=g)] = float("nan")
        inputs = {"x": x.to(torch.bfloat16), **_routing_inputs(cfg, g)}
        inputs = {name: t.to(device) for name, t in inputs.items()}
        return {**inputs, **_weight_inputs(fmt, cfg, device)}

    return make_inputs


def _route(cfg: Config, x, group_sizes=None, topk_ids=None):
    """(grouped activations, block map), built on the device with static shapes only."""
    if group_sizes is not None:
        return x, routing.block_map_from_group_sizes(group_sizes, x.shape[0], cfg.block_m)
    rows, _sizes, bmap = routing.route_topk(topk_ids, cfg.experts, cfg.block_m, expert_start=0)
    return x[rows // cfg.topk], bmap


def _split_nan(cfg: Config, y: torch.Tensor):
    """A NaN row of x must make its output row NaN: compared as a bit-exact mask beside the finite values
    (a NaN in the compared output always fails)."""
    if not cfg.nan_rows:
        return y
    return y.nan_to_num(nan=0.0), torch.isnan(y)


def _op(fmt: str, cfg: Config):
    def op(x, w, w_scale=None, w_global=None, group_sizes=None, topk_ids=None):
        xg, bmap = _route(cfg, x, group_sizes, topk_ids)
        return _split_nan(cfg, torch.ops.graphsafe.moe_gemm(xg, w, w_scale, w_global, bmap, fmt, cfg.block_m))

    return op


def _reference(fmt: str, cfg: Config):
    def reference(x, w, w_scale=None, w_global=None, group_sizes=None, topk_ids=None):
        xg, bmap = _route(cfg, x, group_sizes, topk_ids)
        q = _weights(fmt, cfg.experts, cfg.n, cfg.k)
        q = quant.QuantizedWeight(
            q.fmt,
            q.data.to(x.device),
            None if q.scale is None else q.scale.to(x.device),
            None if q.global_scale is None else q.global_scale.to(x.device),
            q.k,
        )
        return _split_nan(cfg, moe_gemm_reference(xg, q, bmap).to(torch.bfloat16))

    return reference


def _static_inputs(fmt: str) -> tuple[str, ...]:
    scale = () if fmt == "bf16" else ("w_scale",)
    return ("w", *scale, *(("w_global",) if fmt == "nvfp4" else ()))


# Shape search beside the hand list (harness/search.py): top-k routing at every token count, expert count and
# top-k, N off the kernel's tiles, K over whole and partial 128-blocks (mxfp8, block_m 16). The hand list holds
# the edges seen in aiter PR #5831 (N=129, K=96, empty experts); the search walks each dimension and Hypothesis
# combines them. T starts at 2: two stamped top-k ids make A and every B differ for any E >= 2.
SEARCH_FORMAT = "mxfp8"
SEARCH_BLOCK_M = 16
SEARCH_SIZES = {
    "T": range(2, 65),
    "E": range(2, 17),
    "topk": range(1, 5),
    "N": range(1, 161),
    "K": range(32, 289, 32),
}


def _search_config(T: int, E: int, topk: int, N: int, K: int) -> Config:
    return Config("search", E, N, K, SEARCH_BLOCK_M, tokens=T, topk=topk)


def _search_inputs(seed: int, device: torch.device, *, T: int, E: int, topk: int, N: int, K: int):
    made = _make_inputs(SEARCH_FORMAT, _search_config(T, E, topk, N, K))(seed, device)
    # Seeds A..A+3 as two base-E digits in two ids: they differ pairwise for every E >= 2.
    made["topk_ids"][0, 0] = seed % E
    made["topk_ids"][-1, -1] = (seed // E) % E
    return made


def _search_call(reference: bool):
    """The op (or reference) for the config the tensors give: E, N from w [E, K, N], K and T from x, top-k from
    the ids."""

    def call(x, w, w_scale=None, w_global=None, topk_ids=None):
        cfg = _search_config(x.shape[0], w.shape[0], topk_ids.shape[1], w.shape[2], x.shape[1])
        return (_reference if reference else _op)(SEARCH_FORMAT, cfg)(
            x, w, w_scale, w_global, topk_ids=topk_ids
        )

    return call


def _register_all() -> None:
    by_name = {c.name: c for c in CONFIGS + PREFILL_CONFIGS + DECODE_CONFIGS + RING_CONFIGS}
    for fmt in quant.FORMATS:
        names = [c.name for c in CONFIGS] if fmt == "mxfp8" else list(PER_FORMAT_CONFIGS)
        if fmt == "mxfp4":
            names += list(MXFP4_CONFIGS)
        if fmt in DECODE_FORMATS:
            names += [c.name for c in DECODE_CONFIGS]
        if fmt in PREFILL_FORMATS:
            names += [c.name for c in PREFILL_CONFIGS]
        if fmt in RING_FORMATS:
            names += [c.name for c in RING_CONFIGS]
        for name in names:
            cfg = by_name[name]
            register(
                Case(
                    name=f"moe_gemm.{fmt}.{cfg.name}",
                    make_inputs=_make_inputs(fmt, cfg),
                    op=_op(fmt, cfg),
                    reference=_reference(fmt, cfg),
                    tolerance=TOLERANCE,
                    static_inputs=_static_inputs(fmt),
                    note=(
                        "reference dequantizes with the kernels' decode: only f32 order and one bf16 output "
                        "rounding (2^-8) remain, so 5e-3 for every format; routing changes between A and B"
                    ),
                )
            )
    register(
        Case(
            name=f"moe_gemm.{SEARCH_FORMAT}.search.topk_bm{SEARCH_BLOCK_M}",
            make_inputs=_search_inputs,
            op=_search_call(reference=False),
            reference=_search_call(reference=True),
            tolerance=TOLERANCE,
            static_inputs=_static_inputs(SEARCH_FORMAT),
            sizes=SEARCH_SIZES,
            note="the hand list's tolerance and reference over searched T, E, top-k, N and K",
        )
    )


_register_all()
