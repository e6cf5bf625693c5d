"""Tests for graphsafe::moe_gemm (kernels/moe_gemm/ops.py): accuracy against the f32 oracle per format,
bitwise NK/KN equality, -1 slots, the zero-fill of uncovered rows (with its negative control), and
refusals. CPU tests use small shapes (the g++ module builds once, ~10 s cold); GPU tests compare the
CUDA-core kernel with the CPU twin bit for bit, and the tensor-core kernel (kernel_path "tensor_core")
with the twin within one bf16 rounding, run to run bitwise, and for NaN propagation."""

import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from graphsafe import check
from graphsafe.kernels.common import quant, routing
from graphsafe.kernels.moe_gemm import ops as mo
from graphsafe.kernels.moe_gemm.reference import moe_gemm_reference

# The kernels' source: moe_gemm.hip and the headers it includes (its unit parts include moe_gemm.hip).
FAMILY_DIR = pathlib.Path(mo.FAMILY_DIR)
MOE_GEMM_SOURCES = sorted([*FAMILY_DIR.glob("*.hip"), *FAMILY_DIR.glob("*.h")])
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

# bf16 output: one round-to-nearest-even of an f32 sum, at most half an ulp = 2^-8 of the value; the
# f32 accumulation order adds ~K * 2^-24 relative (K = 96: 6e-6).
OUTPUT_ROUNDING_BOUND = 2.0**-8 + 1e-5


def _problem(fmt, e=4, n=40, k=96, sizes=(3, 0, 7, 1), slack=5, block_m=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = quant.quantize_weight(torch.randn(e, n, k, generator=g), fmt)
    rows = sum(sizes) + slack
    bmap = routing.block_map_from_group_sizes(torch.tensor(sizes, dtype=torch.int32), rows, block_m)
    x = torch.randn(rows, k, generator=g).to(torch.bfloat16)
    return x, q, bmap


@pytest.mark.parametrize("fmt", quant.FORMATS)
def test_matches_f32_oracle_within_one_bf16_rounding(fmt):
    """Method: the oracle dequantizes with the kernels' decode and does an f32 matmul; the op differs by
    accumulation order and one bf16 rounding only. A wrong scale index, nibble order or stride breaks it."""
    x, q, bmap = _problem(fmt)
    out = mo.moe_gemm(x, q, bmap, block_m=4)
    ref = moe_gemm_reference(x, q, bmap)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert torch.isfinite(out).all()
    assert quant.max_rel_error(out.float(), ref) <= OUTPUT_ROUNDING_BOUND
    assert quant.cosine(out.float(), ref) >= 0.99999


@pytest.mark.parametrize("fmt", quant.FORMATS)
def test_nk_view_and_kn_copy_are_bitwise_identical(fmt):
    """The [E,K,N] view of [E,N,K] storage (16-byte path) and a K-major->N-major copy (strided path) give
    the same bits: the math order does not depend on the layout, so the copy is never needed."""
    x, q, bmap = _problem(fmt, k=128, n=33)
    w, s, g = mo.kn_views(q)
    assert w.data_ptr() == q.data.data_ptr()  # a view, no copy
    view_out = torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, 4)
    sc = s.contiguous() if s is not None else None
    copy_out = torch.ops.graphsafe.moe_gemm(x, w.contiguous(), sc, g, bmap, fmt, 4)
    assert torch.equal(view_out.view(torch.int16), copy_out.view(torch.int16))


def test_uncovered_rows_are_zero_under_poisoned_allocation():
    """Half-foreign expert map (aiter#5831): half the rows belong to no local expert. With NaN-filled
    empty() the op must still return exact zeros there."""
    x, q, bmap = _problem("mxfp8", sizes=(4, 4), slack=8)
    with _nan_fill():
        out = mo.moe_gemm(x, q, bmap, block_m=4)
    assert torch.equal(out[8:], torch.zeros_like(out[8:]))
    assert torch.isfinite(out).all()


def test_negative_control_without_zero_fill_leaves_nan_rows():
    x, q, bmap = _problem("mxfp8", sizes=(4, 4), slack=8)
    with _nan_fill():
        out = mo.moe_gemm(x, q, bmap, block_m=4, zero_unwritten=False)
    assert torch.isnan(out[8:]).all()  # 100% NaN rows, as aiter PR #5831 saw before its fix
    assert torch.isfinite(out[:8]).all()


def test_minus_one_slots_return_at_once_and_their_rows_are_zeroed():
    x, q, _ = _problem("bf16", sizes=(8,), slack=0, e=1)
    bmap = torch.tensor([[0, 4, 4], [-1, 0, 4], [-1, 0, 0]], dtype=torch.int32)  # rows 0..3: slot is -1
    out = mo.moe_gemm(x, q, bmap, block_m=4)
    assert torch.equal(out[:4], torch.zeros_like(out[:4]))
    ref = moe_gemm_reference(x, q, bmap)
    assert quant.max_rel_error(out[4:].float(), ref[4:]) <= OUTPUT_ROUNDING_BOUND


def test_ragged_groups_with_zero_token_experts_and_block_m_16():
    sizes = (0, 7, 64, 1, 100, 0, 84, 0)  # aiter PR #5831's ragged sizes
    x, q, bmap = _problem("mxfp4", e=8, n=16, k=32, sizes=sizes, slack=3, block_m=16)
    out = mo.moe_gemm(x, q, bmap, block_m=16)
    ref = moe_gemm_reference(x, q, bmap)
    assert quant.max_rel_error(out.float(), ref) <= OUTPUT_ROUNDING_BOUND


def test_nan_weight_scale_propagates():
    """NaN is never a wildcard: an E8M0 NaN scale (0xFF, the poison byte) must reach the output."""
    x, q, bmap = _problem("mxfp8", sizes=(4,), e=1, slack=0)
    q.scale[0, 5, 1] = 255
    out = mo.moe_gemm(x, q, bmap, block_m=4)
    assert torch.isnan(out[:, 5]).all()
    assert torch.isfinite(out[:, :5]).all()


def test_opcheck_on_cpu():
    x, q, bmap = _problem("nvfp4", sizes=(2, 3), e=2, slack=1, n=8, k=32)
    w, s, g = mo.kn_views(q)
    # test_schema is left out: it perturbs inputs with mul, which torch has no Float8_e4m3fn CPU kernel for
    utils = ("test_faketensor", "test_autograd_registration")
    torch.library.opcheck(mo.moe_gemm_op, (x, w, s, g, bmap, "nvfp4", 4), test_utils=utils)


def _refusal_cases():
    x, q, bmap = _problem("mxfp8", sizes=(2,), e=1, slack=0, n=8, k=64)
    w, s, _ = mo.kn_views(q)
    op = torch.ops.graphsafe.moe_gemm
    return [
        (lambda: op(x, w, s, None, bmap, "int3", 4), "fmt must be one of"),
        (lambda: op(x.half(), w, s, None, bmap, "mxfp8", 4), "x must be a 2-D torch.bfloat16"),
        (lambda: op(x[:, :48], w, s, None, bmap, "mxfp8", 4), "multiple of 32"),
        (lambda: op(x, w.view(torch.uint8), s, None, bmap, "mxfp8", 4), "w for fmt 'mxfp8' must be"),
        (lambda: op(x, w, None, None, bmap, "mxfp8", 4), "w_scale for fmt 'mxfp8' must be"),
        (lambda: op(x, w, s[:, :1], None, bmap, "mxfp8", 4), "must have shape"),
        (lambda: op(x, w, s, None, bmap.long(), "mxfp8", 4), "block_map must be torch.int32"),
    ]


@pytest.mark.parametrize("index", range(7))
def test_bad_input_is_refused_by_name(index):
    call, match = _refusal_cases()[index]
    with pytest.raises(ValueError, match=match):
        call()


def test_cpp_entry_refuses_unknown_format_code():
    with pytest.raises(ValueError, match="allowed: 0 bf16"):
        mo.cpu_module().moe_gemm(
            9, 0, 0, 0, 32, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0
        )


def test_eager_calls_reach_the_cpp_kernel_and_the_loader_checks_first():
    """After the first call on the CPU the op has a C++ kernel at the CPU key (moe_gemm.torch.cpp), which the
    dispatcher takes instead of the Python loader; the loader itself refuses bad arguments by name before it
    builds or registers anything."""
    x, q, bmap = _problem("bf16")
    w, s, g = mo.kn_views(q)
    with pytest.raises(ValueError, match=r"block_m must be a positive int"):
        mo.moe_gemm_impl(x, w, s, g, bmap, "bf16", 0)
    with pytest.raises(ValueError, match=r"fmt must be one of"):
        mo.moe_gemm_impl(x, w, s, g, bmap, "int3", 4)
    want = torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, "bf16", 4)
    assert torch._C._dispatch_has_kernel_for_dispatch_key("graphsafe::moe_gemm", "CPU")
    # Called directly, the loader (registered already) ends in the same C++ call.
    assert torch.equal(mo.moe_gemm_impl(x, w, s, g, bmap, "bf16", 4), want)


class _nan_fill:
    """torch.utils.deterministic.fill_uninitialized_memory: empty() results come back NaN."""

    def __enter__(self):
        self.prev = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        self.prev_fill = torch.utils.deterministic.fill_uninitialized_memory
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True

    def __exit__(self, *exc):
        torch.utils.deterministic.fill_uninitialized_memory = self.prev_fill
        torch.use_deterministic_algorithms(self.prev[0], warn_only=self.prev[1])


# ------------------------------------------------------------------------------------------ GPU


def _to(q, device):
    def mv(t):
        return None if t is None else t.to(device)

    return quant.QuantizedWeight(q.fmt, mv(q.data), mv(q.scale), mv(q.global_scale), q.k)


def _expected_path(fmt: str, block_m: int) -> str:
    """The launcher's choice on CUDA sm_80+ for aligned NK views (moe_gemm.hip, gs_moe_gemm_uses_mma)."""
    tensor = (fmt in ("bf16", "mxfp8", "block_fp8") and block_m > 4) or fmt == "mxfp4"
    return "tensor_core" if tensor else "cuda_core"


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", quant.FORMATS)
@pytest.mark.parametrize(
    ("block_m", "sizes"), [(1, (1, 0, 1, 1)), (4, (3, 0, 7, 1)), (16, (0, 7, 64, 1)), (64, (0, 7, 64, 100))]
)
def test_gpu_matches_cpu_twin(fmt, block_m, sizes):
    """The CUDA-core kernel (16-byte path and strided path) equals the CPU twin bit for bit. Where the
    tensor-core kernel runs (kernel_path says so) the test asks for one bf16 rounding instead: what its
    own accumulation order can change. The KN copy always takes the strided CUDA-core path."""
    x, q, bmap = _problem(fmt, e=4, n=70, k=256, sizes=sizes, slack=6, block_m=block_m)
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m)
    qd = _to(q, "cuda")
    gpu_view = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).cpu()
    w, s, g = mo.kn_views(qd)
    sc = s.contiguous() if s is not None else None
    gpu_copy = torch.ops.graphsafe.moe_gemm(x.cuda(), w.contiguous(), sc, g, bmap.cuda(), fmt, block_m).cpu()
    assert torch.equal(cpu.view(torch.int16), gpu_copy.view(torch.int16))
    path = mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m)
    assert path == _expected_path(fmt, block_m)
    if path == "cuda_core":
        assert torch.equal(cpu.view(torch.int16), gpu_view.view(torch.int16))
    else:
        assert torch.isfinite(gpu_view).all()
        assert quant.max_rel_error(gpu_view.float(), cpu.float()) <= OUTPUT_ROUNDING_BOUND


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "mxfp8", "block_fp8", "mxfp4"])
@pytest.mark.parametrize(
    ("block_m", "sizes", "n", "k"),
    [
        (1, (1, 1, 0, 1), 520, 4096),
        (4, (4, 3, 0, 1), 136, 96),
        (16, (16, 3, 0, 9), 200, 4096),
        (16, (5, 16, 0, 12), 136, 96),
        (64, (0, 100, 64, 7), 136, 96),
        (64, (64, 33, 0, 130), 520, 4096),
        (128, (5, 200, 0, 17), 137, 224),
        (256, (300, 5, 0, 260), 520, 96),
        (1, (1, 0, 1, 1), 136, 288),
        (16, (16, 9, 0, 2), 136, 544),
    ],
)
def test_gpu_tensor_core_path_accuracy_and_determinism(fmt, block_m, sizes, n, k):
    """MXFP4 takes the ring up to block_m 16 (1 and 4: decode) and the prefill kernel above; the other formats
    from block_m 16 on (block_m 1 and 4 run the CUDA-core kernel for them, checked against the same bound). The
    tensor-core kernels (block_m 16: the shared-memory ring; 64: the prefill kernel's 64 x 256 tiles, 128: its
    128 x 256 tiles of 8 warps; on the H100 / H200 the warpgroup-MMA kernels' 64- and 128-row tiles for every
    format, where the 5- and 17-row slots leave the second row of warps idle and 200 rows run a full and a
    72-row tile; N=520 leaving three warps of the last tile idle, N=137 odd (scalar stores), 200 rows looping
    over four 64-row groups in one slot, K=224 a partial stage and a partial group of MXFP8 scale bytes) against
    the f32 oracle (one bf16 rounding plus f32 reordering over K), with partial 16-row tiles, a partial
    128-column block, an odd chunk count (K=96: 3 chunks, a partial 4-chunk stage, and an MXFP8 scale row of
    3 bytes, which the ring cannot copy as one word) and long K; two runs give the same bits (graph replay
    compares against eager). block_m 256 puts two 128-row groups in one slot of the 128-row kernels."""
    x, q, bmap = _problem(fmt, e=4, n=n, k=k, sizes=sizes, slack=5, block_m=block_m, seed=3)
    qd, xd, bd = _to(q, "cuda"), x.cuda(), bmap.cuda()
    assert mo.kernel_path(xd, qd, bd, block_m) == _expected_path(fmt, block_m)
    first = mo.moe_gemm(xd, qd, bd, block_m=block_m)
    second = mo.moe_gemm(xd, qd, bd, block_m=block_m)
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))
    ref = moe_gemm_reference(x, q, bmap)
    assert torch.isfinite(first).all()
    assert quant.max_rel_error(first.float().cpu(), ref) <= OUTPUT_ROUNDING_BOUND + k * 2.0**-24
    assert torch.equal(first[sum(sizes) :].cpu(), torch.zeros(5, n, dtype=torch.bfloat16))  # slack rows


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("poison", [0x7F, 0xFF])
def test_gpu_tensor_core_path_propagates_nan_weights(poison, block_m):
    """An e4m3fn NaN byte (the allocator's 0x7F / 0xFF poison patterns) in one weight column must make
    that column NaN, as the CPU twin's decode does, and leave the other columns finite. This is what bites
    if the ring's e4m3 -> f16 conversion loses NaN (the portable form patches it; a plain shift decodes
    0x7F to 480.0, a finite, wrong weight). bench/moe_gemm_variants.cu checks every byte in every position
    of a word through each decode."""
    x, q, bmap = _problem("mxfp8", e=2, n=24, k=64, sizes=(16, 16), slack=0, block_m=block_m)
    q.data[1, 5, 17] = torch.tensor(poison, dtype=torch.uint8).view(torch.float8_e4m3fn)
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m)
    assert torch.isnan(cpu[16:, 5]).all() and torch.isnan(out[16:, 5]).all()
    assert torch.isfinite(out[:16]).all() and torch.isfinite(out[16:, :5]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [32, 64, 128])
def test_gpu_bf16_prefill_propagates_nan_of_one_weight_and_one_x_row_only(block_m):
    """bf16 slots of more than 16 rows (the warpgroup-MMA kernel on the H100 / H200: 64-row CTAs below block_m
    128, 128-row CTAs from it; the mma.sync tile kernel elsewhere): a NaN weight makes its column NaN in its
    own expert's rows only and a NaN element of x makes its row NaN only, as in the CPU twin; every other
    output is finite and the slack rows stay zero. Catches a kernel that mixes rows or columns of
    neighbouring tiles, or swaps the two warpgroups' halves."""
    x, q, bmap = _problem("bf16", e=2, n=136, k=96, sizes=(70, 33), slack=2, block_m=block_m, seed=11)
    q.data[1, 5, 40] = float("nan")  # expert 1 (rows 70..102), column 5
    x[3, 77] = float("nan")  # expert 0's row 3
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m)
    expected_nan = torch.zeros(out.shape, dtype=torch.bool)
    expected_nan[70:103, 5] = True
    expected_nan[3, :] = True
    assert torch.equal(torch.isnan(cpu), expected_nan)
    assert torch.equal(torch.isnan(out), expected_nan)
    assert torch.equal(out[103:], torch.zeros(2, 136, dtype=torch.bfloat16))
    finite = ~expected_nan
    ref = moe_gemm_reference(x, q, bmap)
    assert quant.max_rel_error(out.float()[finite], ref[finite]) <= OUTPUT_ROUNDING_BOUND + 96 * 2.0**-24


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("fmt", "block_m"),
    [
        ("mxfp8", 16),
        ("mxfp8", 64),
        ("mxfp8", 128),
        ("mxfp4", 1),
        ("mxfp4", 16),
        ("mxfp4", 64),
        ("mxfp4", 128),
    ],
)
def test_gpu_ring_kernel_takes_the_exact_path_for_e8m0_0_and_255(fmt, block_m):
    """The ring kernel (block_m 16) forms an MXFP8 scale 2^(e-127) by shifting e into f32's exponent
    field, which is right for e = 1..254 only: e = 255 (NaN) would give inf and e = 0 (2^-127, an f32
    subnormal) would give 0. A warp vote sends a stage holding either to gs_e8m0. Without the vote the
    e = 255 column comes out inf, not NaN. Large scales (up to 2^73) and small ones (2^-117) must not
    disturb their columns' other chunks. Each column is checked against the CPU twin on its own, so a small
    column cannot hide behind a large one. block_m 64 runs the prefill kernel: it multiplies the f16 weights
    by the scale only while every scale byte a warp reads for 4 chunks lies in 113..134 (its fast path, which
    quantize_weight's scales of about 2^-7 take in the other tests); the columns set here send every group to
    its exact path, f32 partials times gs_e8m0. MXFP4 (weights >= 2^-1) shares the ring's scale code, and
    the prefill kernel's (block_m 64 and 128) vote with its own fast range, 104..128. MXFP8 and MXFP4 at block_m
    64 and 128 on the H100 / H200 take the warpgroup-MMA kernel; column 7's 2^-127 beside scales near 2^-7 puts
    the tile in its exact form, which multiplies each chunk's f32 partial by gs_e8m0's scale: column 8 (chunks
    0..3 at 2^-118, 4..7 at 2^-117, a column of outputs near 1e-33) shows a scale applied to the wrong chunk or
    column, or lost below bf16's normal range."""
    x, q, bmap = _problem(fmt, e=2, n=24, k=256, sizes=(16, 11), slack=0, block_m=block_m, seed=5)
    q.scale[:, 1, :] = 135
    q.scale[:, 2, 3] = 140
    q.scale[1, 3, :] = 200
    q.scale[0, 4, 5] = 255
    q.scale[:, 6, 2] = 10  # 2^-117 times weights >= 2^-9: the smallest scale that stays exact in bf16
    q.scale[:, 7, 0] = 0
    q.scale[:, 8, :4] = 9
    q.scale[:, 8, 4:] = 10
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).float().cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m).float()
    assert torch.equal(torch.isnan(out), torch.isnan(cpu))
    assert torch.isnan(out[:16, 4]).all() and torch.isfinite(out[16:]).all()
    for col in range(24):
        if col == 4:
            continue
        ref = cpu[:, col]
        assert quant.max_rel_error(out[:, col], ref) <= OUTPUT_ROUNDING_BOUND + 256 * 2.0**-24, col
    assert torch.isfinite(out[:16, :4]).all() and out[:, 3].abs().max() > 2.0**60


def _hip_constant(name: str) -> int:
    """The integer value of the kernels' `constexpr int` / `int64_t` named `name`: defined exactly once among
    moe_gemm.hip and the headers it includes (kernels/moe_gemm/*.hip, *.h)."""
    pattern = re.compile(rf"constexpr int(?:64_t)? {name} = (\d+);")
    found = [m.group(1) for path in MOE_GEMM_SOURCES for m in pattern.finditer(path.read_text())]
    assert len(found) == 1, f"{name}: {len(found)} definitions in {[p.name for p in MOE_GEMM_SOURCES]}"
    return int(found[0])


def _fast_form_window(fmt: str) -> tuple[int, int]:
    """kWqTop* and kWqWindow* of the wgmma kernel's fast form for fmt's element type (moe_gemm.wgmma_q.h)."""
    kind = "E2m1" if fmt == "mxfp4" else "E4m3"
    return _hip_constant(f"kWqTop{kind}"), _hip_constant(f"kWqWindow{kind}")


# The f16 bias of each element type's decoded bits in the fast form: e4m3 decodes to its value, e2m1 to its
# value times 2^-14 (gs_e2m1x8_to_f16x2_mul), so the kernel's multiplier is 2^(d + bias).
_DECODE_BIAS = {"mxfp8": 0, "mxfp4": 14}


def _element_values(fmt: str) -> torch.Tensor:
    """Every non-NaN value of fmt's element type, in f64."""
    if fmt == "mxfp4":
        return quant.e2m1_decode(torch.arange(16, dtype=torch.uint8)).to(torch.float64)
    e4m3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
    return e4m3[~torch.isnan(e4m3)]


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_fast_form_window_keeps_every_weight_exact_in_f16(fmt):
    """The quantized wgmma kernel's fast form turns each weight into w 2^d in f16, d = e - c from top - window
    to top (read from the source), and its exactness rests on every such product being an f16 value:
    checked for every value of the element type (e4m3: 255 non-NaN; e2m1: 16) and every d against f64. The
    kernel forms the multiplier's bits as (d + bias + 15) << 10 (bias 0 for e4m3, which decodes to its value;
    14 for e2m1, decoded to value * 2^-14), which must name a normal f16 (exponent field 1..30). Controls: one
    step past the top overflows the largest value's product (e4m3) or the multiplier's field (e2m1), and two
    steps past the bottom lose the smallest value's lowest bit."""
    top, window = _fast_form_window(fmt)
    values, bias = _element_values(fmt), _DECODE_BIAS[fmt]

    def exact(d: int) -> bool:
        scaled = values * 2.0**d
        return torch.equal(scaled.to(torch.float16).to(torch.float64), scaled)

    def normal_multiplier(d: int) -> bool:
        return 1 <= d + bias + 15 <= 30

    span = range(top - window, top + 1)
    assert all(exact(d) and normal_multiplier(d) for d in span), (top, window)
    assert not (exact(top + 1) and normal_multiplier(top + 1))
    assert not exact(top - window - 2)


# Per format: the seed, column 9's E8M0 bytes (chunks 0..3, 4..7: a span of exactly the fast form's window) and
# column 200's (chunk 0, the rest: one wider).
_SPLIT_SCALES = {"mxfp8": (17, (107, 128), (100, 122)), "mxfp4": (19, (104, 128), (100, 125))}


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
@pytest.mark.parametrize("block_m", [64, 128])
@pytest.mark.parametrize("k", [256, 1056])
def test_gpu_mx_prefill_fast_and_exact_forms_split_by_column_tile(fmt, block_m, k):
    """MXFP8 and MXFP4 prefill on the H100 / H200 take a fast form for column tiles (128 columns at block_m 64,
    192 at 128: kWqGroupsMx warpgroups) whose every column's E8M0 bytes (255 aside) span at most the element
    type's window (kWqWindowE4m3 21, kWqWindowE2m1 24, read from the source: the scale goes into the f16
    weights, each column's largest exponent sets its offset) and an exact form (an f32 partial per chunk times
    its scale) for the other tiles: K 256 in one launch whose CTAs each take theirs, K 1056 in two (the fast
    form's launch, then the exact form's; kWqAutoMaxK, read from the source, lies between). Tile 0 (columns
    0..127 or 0..191) is fast, with a NaN scale (255) in column 5's chunk 2 and column 9 spanning exactly the
    window; the last tile (from column 128 or 192) holds column 200 spanning one more (it must take the exact
    form) and column 210 at 2^-118. Every column must match the CPU twin on its own and the NaN column must be
    NaN in its expert's rows only; a tile neither form computes, a wrong per-column offset or (MXFP4) a wrong
    e2m1 pair order fails it (the window's exactness is proved on the CPU:
    test_fast_form_window_keeps_every_weight_exact_in_f16). Elsewhere (mma.sync) the tile kernel computes the
    same numbers."""
    seed, col9, col200 = _SPLIT_SCALES[fmt]
    window = _fast_form_window(fmt)[1]
    assert col9[1] - col9[0] == window and col200[1] - col200[0] == window + 1
    groups = _hip_constant("kWqGroupsMx")
    tile = 64 * groups if block_m >= 128 else 128
    assert 9 < tile <= 200 < 210 < 256  # columns 5, 9 in tile 0; 200, 210 in the last
    assert 256 <= _hip_constant("kWqAutoMaxK") < 1056  # one parametrization on each side
    x, q, bmap = _problem(fmt, e=2, n=256, k=k, sizes=(70, 33), slack=2, block_m=block_m, seed=seed)
    q.scale[0, 5, 2] = 255
    q.scale[:, 9, :4], q.scale[:, 9, 4:] = col9
    q.scale[:, 200, 0], q.scale[:, 200, 1:] = col200
    q.scale[:, 210, :] = 9
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).float().cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m).float()
    assert torch.equal(torch.isnan(out), torch.isnan(cpu))
    assert torch.isnan(out[:70, 5]).all() and torch.isfinite(out[70:, 5]).all()
    assert out[:, 210].abs().max() > 0
    for col in range(256):
        rows = slice(70, None) if col == 5 else slice(None)
        bound = OUTPUT_ROUNDING_BOUND + k * 2.0**-24
        assert quant.max_rel_error(out[rows, col], cpu[rows, col]) <= bound, col
    assert torch.equal(out[103:], torch.zeros(2, 256))


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [64, 128])
def test_gpu_block_fp8_prefill_applies_each_128_block_scale(block_m):
    """Block-FP8 keeps one f32 scale per 128 x 128 weight block. Prefill slots on the H100 / H200 sum a 128-K
    block's MMAs into an f32 partial and add it times that block's scale (the 128-column tile is one column
    block); elsewhere the mma.sync tile kernel runs. N = 264 (a partial third column block) and K = 320 (a partial
    third K block, 64 of its 128). Expert 0's block (column block 1, K block 2) holds NaN: its 128 columns are
    NaN in expert 0's rows only. Expert 1's blocks get 2^20, 2^-30 and the partial blocks their own scales, so a
    scale applied to the neighbouring K block, column block or expert, or a partial folded twice or never,
    moves those columns away from the CPU twin, which each column must match on its own."""
    x, q, bmap = _problem("block_fp8", e=2, n=264, k=320, sizes=(70, 33), slack=2, block_m=block_m, seed=23)
    assert tuple(q.scale.shape) == (2, 3, 3)
    q.scale[0, 1, 2] = float("nan")
    q.scale[1, 0, 1] = 2.0**20
    q.scale[1, 1, 0] = 2.0**-30
    q.scale[1, 2, 2] = 3.0
    q.scale[0, 2, 2] = 0.25
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).float().cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m).float()
    expected_nan = torch.zeros(out.shape, dtype=torch.bool)
    expected_nan[:70, 128:256] = True
    assert torch.equal(torch.isnan(cpu), expected_nan)
    assert torch.equal(torch.isnan(out), expected_nan)
    for col in range(264):
        rows = slice(70, None) if 128 <= col < 256 else slice(None)
        bound = OUTPUT_ROUNDING_BOUND + 320 * 2.0**-24
        assert quant.max_rel_error(out[rows, col], cpu[rows, col]) <= bound, col
    assert out[70:103, :128].abs().max() > 2.0**10
    assert torch.equal(out[103:], torch.zeros(2, 264))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("fmt", "block_m"),
    [
        ("mxfp8", 16),
        ("mxfp8", 64),
        ("mxfp4", 1),
        ("mxfp4", 16),
        ("mxfp4", 64),
        ("mxfp4", 128),
        ("block_fp8", 16),
        ("block_fp8", 64),
        ("block_fp8", 128),
    ],
)
def test_gpu_ring_fp8_path_scales_x_rows_into_f16(fmt, block_m):
    """The fp8 ring path reads x as f16 scaled per row by a power of two (gs_moe_prepare_rows). Rows of
    ~2^100 and ~2^-100 leave f16's range unscaled (inf, 0); a row spanning 2^-20..2^20 keeps its large
    terms; inf and NaN in x must give the twin's inf/NaN (inf * 0 is NaN). Compared with the CPU twin. MXFP4
    reads x the same way (K element 5 is byte 2's high nibble there), and so do block-FP8's ring (block_m
    16) and the quantized prefill kernels (block_m 64 and 128: on the H100 / H200 the warpgroup-MMA kernel,
    whose block-FP8 form adds each 128-K block's partial times its f32 scale)."""
    x, q, bmap = _problem(fmt, e=2, n=24, k=256, sizes=(16, 16), slack=0, block_m=block_m, seed=7)
    x[0] = x[0].float() * 2.0**100
    x[1] = x[1].float() * 2.0**-100
    x[2, ::2] = x[2, ::2].float() * 2.0**20
    x[2, 1::2] = x[2, 1::2].float() * 2.0**-20
    x[3, 5] = float("inf")
    x[4, 9] = float("nan")
    if fmt == "mxfp4":  # byte 2 holds K elements 4 (low nibble) and 5 (high nibble)
        q.data[0, :7, 2] = (q.data[0, :7, 2] & 0x0F) | 0x20  # K=5 is 1.0 in columns 0..6: row 3 is inf there
        q.data[0, 7, 2] = 0  # row 3's inf meets a zero weight in column 7: NaN there
    else:
        q.data[0, 7, 5] = 0
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).float().cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m).float()
    assert (
        torch.equal(torch.isnan(out), torch.isnan(cpu))
        and torch.isnan(out[3, 7])
        and torch.isnan(out[4]).all()
    )
    assert torch.equal(torch.isinf(out), torch.isinf(cpu)) and torch.isinf(out[3, :7]).all()
    assert torch.equal(out[3].nan_to_num(), cpu[3].nan_to_num())  # the same signs of inf
    for row in (0, 1, 2, *range(5, 32)):
        assert quant.max_rel_error(out[row], cpu[row]) <= OUTPUT_ROUNDING_BOUND + 256 * 2.0**-24, row
    assert 2.0**90 < out[0].abs().max() < 2.0**120 and 0 < out[1].abs().max() < 2.0**-80


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [64, 128])
@pytest.mark.parametrize("scale", [103, 104, 128, 129])
def test_gpu_prefill_mxfp4_fast_path_is_exact_at_its_bounds(scale, block_m):
    """The prefill kernel multiplies MXFP4's f16-decoded weights by 2^(e-113) (the decode's 2^14 and the scale
    in one HMUL2) while every E8M0 byte a warp reads for 4 chunks lies in 104..128: at 104 the smallest e2m1
    value, 0.5 * 2^-23, is f16's smallest subnormal, and 2^15 (e = 128) is f16's largest power of two. 103 and
    129 must go to the exact path (f32 partials times gs_e8m0). Either way each column is within one bf16
    rounding of the CPU twin; a fast path past its bounds would lose the low bits (e = 103) or overflow the
    multiplier (e = 129). Expert 0's scales are the value under test, expert 1's stay in the fast range. On the
    H100 / H200 the warpgroup-MMA kernel runs instead: every tile's scales span 0 there, so each takes its fast
    form with the column's largest exponent as the offset, and the same bound must hold at these extremes."""
    x, q, bmap = _problem("mxfp4", e=2, n=72, k=256, sizes=(70, 33), slack=2, block_m=block_m, seed=13)
    q.scale[0] = scale
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).float().cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m).float()
    assert torch.isfinite(out).all() and out[:70].abs().max() > 0
    bound = OUTPUT_ROUNDING_BOUND + 256 * 2.0**-24
    for col in range(72):
        assert quant.max_rel_error(out[:70, col], cpu[:70, col]) <= bound, col
        assert quant.max_rel_error(out[70:, col], cpu[70:, col]) <= bound, col
    assert torch.equal(out[103:], torch.zeros(2, 72))


# The prefill tests the plain-sm_90 build reruns (test_gpu_plain_sm90_build_runs_the_mma_sync_prefill_kernels).
_TILE_KERNEL_TESTS = (
    "(accuracy_and_determinism and (64 or 128)) or block_scale or fast_and_exact or exact_at_its_bounds "
    "or (e8m0_0_and_255 and (64 or 128)) or (scales_x_rows and (64 or 128))"
)


def _built_for(build_log: pathlib.Path) -> str:
    """The target a module was built for, from the build.log beside it (every command its build ran): "sm_90a"
    when -DGS_SM90A=1 was passed, else nvcc's -arch value, else "unknown"."""
    log = build_log.read_text()
    if "-DGS_SM90A=1" in log:
        return "sm_90a"
    found = re.search(r"-arch=(\w+)", log)
    return found.group(1) if found else "unknown"


def _build_log(module) -> pathlib.Path:
    return pathlib.Path(module.__file__).with_name("build.log")


def test_built_for_tells_the_sm90a_build_from_plain_sm90(tmp_path):
    """The reading test_gpu_plain_sm90_build_runs_the_mma_sync_prefill_kernels relies on, on the command lines
    harness/native/build.py writes for each target, and on a g++ log that names no target."""
    log = tmp_path / "build.log"
    nvcc = (
        "$ /usr/local/bin/nvcc -x cu -O2 -arch={} {}--fmad=false -c moe_gemm.hip -o 0-moe_gemm.o\n# 9.8 s\n"
    )
    log.write_text(nvcc.format("sm_90a", "-DGS_SM90A=1 "))
    assert _built_for(log) == "sm_90a"
    log.write_text(nvcc.format("sm_90", ""))
    assert _built_for(log) == "sm_90"
    log.write_text("$ /usr/bin/g++ -O2 -std=c++17 -fPIC -c moe_gemm.cpp -o 0-moe_gemm.o\n")
    assert _built_for(log) == "unknown"


# The child of test_gpu_plain_sm90_build_runs_the_mma_sync_prefill_kernels: names its module's build.log, then runs
# pytest with the arguments it was given.
_SM90_CHILD = (
    "import pathlib, sys, pytest\n"
    "from graphsafe.kernels.moe_gemm import ops\n"
    "print('build log:', pathlib.Path(ops.gpu_module().__file__).with_name('build.log'), flush=True)\n"
    "sys.exit(pytest.main(sys.argv[1:]))\n"
)


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_plain_sm90_build_runs_the_mma_sync_prefill_kernels():
    """On the H100 / H200 the default sm_90a build sends every prefill slot to a warpgroup-MMA kernel, so the
    mma.sync tile kernel that A100-class GPUs run would go untested here. A child process builds the module for
    plain sm_90 (GRAPHSAFE_ARCH, a separate build-cache entry), names its build.log, whose commands must show
    that target, and reruns this file's prefill tests on it: the launcher takes the tile kernels there, and the
    wgmma kernels' bodies trap in that build, so a pass means the tile kernels computed every output. Control:
    the same reading of this process's default module must say sm_90a, so a child that silently built the
    default target would be told apart (the reading itself: test_built_for_tells_the_sm90a_build_from_plain_sm90)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(
            "elsewhere the default build already targets the mma.sync kernels (compute capability != 9.0)"
        )
    if os.environ.get("GRAPHSAFE_ARCH"):
        pytest.skip("GRAPHSAFE_ARCH is set: this process is not the default build")
    assert _built_for(_build_log(mo.gpu_module())) == "sm_90a"
    env = dict(os.environ, GRAPHSAFE_ARCH="sm_90")
    args = [__file__, "-m", "gpu", "-q", "-p", "no:cacheprovider", "-k", _TILE_KERNEL_TESTS]
    cmd = [sys.executable, "-c", _SM90_CHILD, *args]
    child = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=REPO_ROOT)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    named = re.search(r"^build log: (.+)$", child.stdout, re.M)
    assert named and _built_for(pathlib.Path(named.group(1))) == "sm_90", child.stdout[:2000]
    passed = re.search(r"(\d+) passed", child.stdout)
    assert passed and int(passed.group(1)) >= 30, child.stdout[-2000:]  # 33 selected when written


@pytest.mark.gpu
def test_gpu_prefill_fp8_path_refuses_a_missing_workspace():
    """The C++ entry checks the workspace the op allocates for the f16 x (here the prefill kernel's): too small
    is an error naming the size needed, not a write past the buffer."""
    x, q, bmap = _problem("mxfp8", e=2, n=24, k=64, sizes=(16, 16), slack=0, block_m=64)
    out = torch.empty(32, 24, dtype=torch.bfloat16, device="cuda")
    module, args = mo.module_and_args(x.cuda(), *mo.kn_views(_to(q, "cuda")), bmap.cuda(), "mxfp8", out, 64)
    need = module.workspace_bytes(*args)
    assert need == 32 * 64 * 2 + 32 * 4
    with pytest.raises(
        ValueError, match=f"workspace is 0 bytes; allowed: .* at least workspace_bytes\\(\\) = {need}"
    ):
        module.moe_gemm(*args, 1, 0, 0, torch.cuda.current_stream().cuda_stream)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("fmt", "block_m"), [("mxfp8", 16), ("bf16", 16), ("block_fp8", 16), ("mxfp4", 1), ("mxfp4", 64)]
)
def test_gpu_ring_path_replays_from_a_graph_with_new_inputs(fmt, block_m):
    """The ring kernel (x in its own ring one stage ahead of the weights; bf16 zero-fills uncovered rows in its
    own grid, the other formats through the f16-x launch before it): a captured call replays correctly with
    new x and a new block map written into the captured tensors (rows that lose their slot must come out zero,
    rows that gain one must be computed), bit for bit what an eager call gives for the same inputs."""
    x, q, bmap = _problem(fmt, e=4, n=136, k=288, sizes=(5, 0, 16, 1), slack=7, block_m=block_m, seed=11)
    qd, xd, bd = _to(q, "cuda"), x.cuda(), bmap.cuda()
    out = torch.empty(x.shape[0], 136, dtype=torch.bfloat16, device="cuda")
    module, args = mo.module_and_args(xd, *mo.kn_views(qd), bd, fmt, out, block_m)
    assert module.workspace_bytes(*args) == (0 if fmt == "bf16" else 29 * 288 * 2 + 29 * 4)
    assert mo.kernel_path(xd, qd, bd, block_m) == "tensor_core"
    mo.moe_gemm(xd, qd, bd, block_m)  # build, plan and first launches outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = mo.moe_gemm(xd, qd, bd, block_m)
    x2, _, bmap2 = _problem(fmt, e=4, n=136, k=288, sizes=(0, 9, 3, 10), slack=7, block_m=block_m, seed=12)
    assert bmap2.shape == bmap.shape
    xd.copy_(x2.cuda())
    bd.copy_(bmap2.cuda())
    graph.replay()
    eager = mo.moe_gemm(xd, qd, bd, block_m)
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.int16), eager.view(torch.int16))
    ref = moe_gemm_reference(x2, q, bmap2)
    assert torch.equal(captured[22:].cpu(), torch.zeros(7, 136, dtype=torch.bfloat16))
    assert quant.max_rel_error(captured.float().cpu(), ref) <= OUTPUT_ROUNDING_BOUND + 288 * 2.0**-24


# Kernel launches per call on the H100 / H200 (compute capability 9.0, built for sm_90a), at the K named: one
# where the kernel's grid carries the zero-fill, one more for gs_moe_prepare_rows' f16 x, and above K 512
# (kWqAutoMaxK) the MX prefill's fast and exact forms as two.
LAUNCHES_SM90A = [
    ("bf16", 1, 288, 1),  # CUDA-core kernel
    ("bf16", 16, 288, 1),  # bf16 ring
    ("bf16", 64, 288, 1),  # bf16 warpgroup-MMA kernel
    ("bf16", 128, 288, 1),
    ("mxfp8", 1, 288, 1),  # CUDA-core kernel
    ("mxfp8", 16, 288, 2),  # prepare_rows, ring
    ("mxfp4", 1, 288, 2),
    ("block_fp8", 128, 288, 2),  # prepare_rows, quantized warpgroup-MMA kernel
    ("mxfp8", 64, 288, 2),  # prepare_rows, one launch in which each CTA takes its form
    ("mxfp4", 128, 288, 2),
    ("mxfp8", 128, 544, 3),  # prepare_rows, fast form, exact form
    ("mxfp4", 64, 544, 3),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("fmt", "block_m", "k", "launches"), LAUNCHES_SM90A)
def test_gpu_kernel_launches_per_call(fmt, block_m, k, launches):
    """Each launch costs the host a few microseconds per eager call (bench/moe_gemm.py, host_us). Method: capture
    one call with uncovered rows (so the zero-fill runs) and count the graph's kernel nodes. Expected: the table
    above, and no node of another kind (no memset: the zero-fill is a kernel's work)."""
    from graphsafe.native import graph_node_kinds

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the launch counts are stated for the sm_90a build (H100 / H200)")
    assert 288 <= _hip_constant("kWqAutoMaxK") < 544  # the table's K on each side of it
    x, q, bmap = _problem(fmt, e=4, n=136, k=k, sizes=(5, 0, 16, 1), slack=7, block_m=block_m, seed=11)
    qd, xd, bd = _to(q, "cuda"), x.cuda(), bmap.cuda()
    mo.moe_gemm(xd, qd, bd, block_m)  # build, plan and first launches outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        out = mo.moe_gemm(xd, qd, bd, block_m)
    kinds = graph_node_kinds(graph.raw_cuda_graph())
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[22:].cpu(), torch.zeros(7, 136, dtype=torch.bfloat16))
    assert kinds == {"kernel": launches}, kinds
    graph.reset()


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("fmt", "block_m", "slack"),
    [
        ("mxfp8", 4, 8),
        ("mxfp8", 4, 300),
        ("mxfp4", 1, 8),
        ("mxfp4", 1, 5000),
        ("bf16", 16, 5000),
        ("mxfp8", 4, 5000),
        ("mxfp4", 4, 300),
        ("mxfp4", 64, 8),
        ("mxfp4", 128, 300),
        ("mxfp8", 16, 8),
        ("bf16", 16, 8),
        ("mxfp8", 64, 8),
        ("bf16", 64, 8),
        ("block_fp8", 64, 300),
        ("bf16", 128, 8),
        ("bf16", 128, 5000),
        ("bf16", 64, 300),
    ],
)
def test_gpu_zero_fill_and_its_negative_control(fmt, block_m, slack):
    """Every kernel path zero-fills uncovered rows: the CUDA-core kernel (block_m 4), the bf16 ring (16) and,
    on the H100 / H200, the bf16 warpgroup-MMA kernel (64, 128) with zero-fill blocks in their own grids
    (64-row ranges, at most 64 blocks: 5000 rows loop), the fp8 / MXFP4 ring (mxfp4 up to block_m 16, mxfp8
    at 16) and the quantized prefill kernels (64, 128) through gs_moe_prepare_rows, which writes their f16 x;
    with 300 slack rows nearly all of the output is unwritten rows. zero_unwritten=False leaves the poison:
    what the fill is measured against."""
    x, q, bmap = _problem(fmt, sizes=(4, 4), slack=slack, block_m=block_m)
    args = (x.cuda(), _to(q, "cuda"), bmap.cuda())
    with _nan_fill():
        good = mo.moe_gemm(*args, block_m=block_m)
        bad = mo.moe_gemm(*args, block_m=block_m, zero_unwritten=False)
    assert torch.equal(good[8:].cpu(), torch.zeros(slack, 40, dtype=torch.bfloat16))
    assert torch.isfinite(good[:8]).all()
    assert torch.isnan(bad[8:]).all()


@pytest.mark.gpu
def test_gpu_zero_fill_with_no_slots():
    """An empty block map (S = 0) still zero-fills every row (no GEMM kernel is launched then)."""
    x, q, _ = _problem("mxfp8", sizes=(4, 4), slack=8)
    empty = torch.zeros(0, 3, dtype=torch.int32)
    with _nan_fill():
        out = mo.moe_gemm(x.cuda(), _to(q, "cuda"), empty.cuda(), block_m=4)
    assert torch.equal(out.cpu(), torch.zeros(16, 40, dtype=torch.bfloat16))


def test_weight_copy_counterexample_reports_bytes_and_time():
    """Method: aiter PR #5831's per-call weight copy at a small CPU shape. Expected: the copying path's output
    is bitwise the view path's (the copy is pure overhead), bytes and times are reported (no timing assert),
    and both wrappers are registered cases that pass (the copy is graph-safe; its cost is not a verdict)."""
    from graphsafe.cases.counterexamples import moe_gemm_weight_copy as cx

    report = cx.measure_weight_copy(4, 64, 256, 2, torch.device("cpu"), iters=2)
    assert report["bitwise_equal"]
    assert report["copy_bytes_moved"] == 2 * (4 * 64 * 256 + 4 * 64 * 8)
    assert report["copy_ms"] >= 0 and report["gemm_view_ms"] > 0
    verdicts = {name: check(case, backend="cpu").verdict for name, case in cx.VARIANTS.items()}
    assert verdicts == {"buggy": "pass", "fixed": "pass"}


@pytest.mark.parametrize(
    ("fmt", "dtype"), [("mxfp8", torch.float8_e4m3fn), ("fp8_fnuz", torch.float8_e4m3fnuz)]
)
def test_fp8_decode_of_every_byte_in_every_word_position_matches_torch(fmt: str, dtype: torch.dtype) -> None:
    """Method: the CPU twin's chunk decode (the portable decode the GPU's CUDA-core kernel runs too) on all 256
    bytes, each at the 4 byte positions of a little-endian word whose other bytes encode 1.0 (0x38 e4m3fn,
    0x40 e4m3fnuz). Expected: each element's f32 bits equal torch's own decode of that byte, NaN exactly
    where torch gives NaN, and the neighbouring 1.0 bytes untouched (a NaN byte poisons only itself)."""
    one = 0x38 if dtype == torch.float8_e4m3fn else 0x40
    reference = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    module = mo.cpu_module()
    words = torch.zeros(16, dtype=torch.int32)
    out = torch.empty(32, dtype=torch.float32)
    checked = 0
    for byte in range(256):
        for pos in range(4):
            chunk = torch.full((4,), one, dtype=torch.uint8)
            chunk[pos] = byte
            words.zero_()
            words[0] = int.from_bytes(bytes(chunk.tolist()), "little", signed=True)
            module.decode_chunk(quant.FORMAT_CODES[fmt], words.data_ptr(), out.data_ptr())
            want = torch.ones(4)
            want[pos] = reference[byte]
            got = out[:4]
            assert torch.equal(torch.isnan(got), torch.isnan(want)), (byte, pos, got, want)
            finite = ~torch.isnan(want)
            assert torch.equal(got[finite].view(torch.int32), want[finite].view(torch.int32)), (byte, pos)
            checked += 1
    assert checked == 256 * 4


def test_checks_run_once_per_signature_and_a_new_signature_is_checked(monkeypatch):
    """The eager call's host cost: the C++ kernel asks the planner op (and so _validate) once per argument
    signature (shapes, strides, dtypes, devices, fmt, block_m, 16-byte alignment of every tensor); a call with
    another signature is checked again, so a bad argument after a good call is still refused by name."""
    calls = []
    real = mo._validate
    monkeypatch.setattr(mo, "_validate", lambda *a: calls.append(1) or real(*a))
    x, q, bmap = _problem("mxfp8")
    w, s, g = mo.kn_views(q)
    torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, "mxfp8", 4)  # the C++ kernel is registered from here on
    mo.cpu_module().clear_plans()
    calls.clear()
    first = torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, "mxfp8", 4)
    second = torch.ops.graphsafe.moe_gemm(x.clone(), w, s, g, bmap, "mxfp8", 4)
    assert len(calls) == 1 and torch.equal(first, second)
    torch.ops.graphsafe.moe_gemm(x[:-1], w, s, g, bmap, "mxfp8", 4)  # one row fewer: a new signature
    assert len(calls) == 2
    torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, "mxfp8", 16)  # another block_m: a new signature
    assert len(calls) == 3
    with pytest.raises(ValueError, match=r"x must be a 2-D torch\.bfloat16"):
        torch.ops.graphsafe.moe_gemm(x.half(), w, s, g, bmap, "mxfp8", 4)
    with pytest.raises(ValueError, match=r"block_map must be torch\.int32"):
        torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap.long(), "mxfp8", 4)
    with pytest.raises(ValueError, match=r"fmt must be one of"):
        torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, "mxfp9", 4)
    assert len(calls) == 6  # a refused signature is never kept: each refusal asked Python


def test_cached_call_with_a_strided_block_map_matches_the_contiguous_one():
    x, q, bmap = _problem("bf16")
    w, s, g = mo.kn_views(q)
    strided = torch.zeros(bmap.shape[0], 6, dtype=torch.int32)[:, ::2]
    strided.copy_(bmap)
    assert not strided.is_contiguous()
    want = torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, "bf16", 4)
    for _ in range(2):  # the second call goes through the cached plan
        assert torch.equal(torch.ops.graphsafe.moe_gemm(x, w, s, g, strided, "bf16", 4), want)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("block_m", [1, 4, 16])
def test_gpu_e2m1_decode_of_every_byte_in_every_word_position_equals_the_twin(fmt, block_m):
    """Method: 64 columns x 32 bytes enumerate each of the 256 bytes 8 times, at every byte position of a
    little-endian word (the GPU decodes e2m1 a word at a time through f16x2), with unit scales; x row r is
    the one-hot vector of K element r, so out[r, n] reads one decoded weight alone (every e2m1 value is exact
    in bf16). Expected: the GPU equals the CPU twin's gs_e2m1 bit for bit at each block_m (1, 4, 16): nvfp4 on
    the CUDA-core kernel's register tiles, mxfp4 on the ring kernel (gs_e2m1x8_to_f16x2_ring and its x pair
    order), where each output is one exact product too (x row scaled into f16 by 2^7 and back), and the
    outputs hold all 15 distinct e2m1 values (-0 sums to +0)."""
    e, n, k = 1, 64, 64
    data = torch.arange(n * k // 2, dtype=torch.int64).remainder(256).to(torch.uint8).view(e, n, k // 2)
    if fmt == "mxfp4":
        q = quant.QuantizedWeight(fmt, data, torch.full((e, n, k // 32), 127, dtype=torch.uint8), None, k)
    else:
        one = torch.full((e, n, k // 16), 1.0).to(torch.float8_e4m3fn)
        q = quant.QuantizedWeight(fmt, data, one, torch.ones(e), k)
    x = torch.eye(k).to(torch.bfloat16)
    bmap = routing.block_map_from_group_sizes(torch.tensor([k], dtype=torch.int32), k, block_m)
    cpu = mo.moe_gemm(x, q, bmap, block_m)
    assert mo.kernel_path(x.cuda(), _to(q, "cuda"), bmap.cuda(), block_m) == _expected_path(fmt, block_m)
    gpu = mo.moe_gemm(x.cuda(), _to(q, "cuda"), bmap.cuda(), block_m).cpu()
    assert torch.equal(gpu.view(torch.int16), cpu.view(torch.int16))
    assert len(torch.unique(cpu.float())) == 15


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [1, 16])
def test_gpu_ring_mxfp4_scale_fold_bounds(block_m):
    """E8M0 bytes 240 and 241 on the MXFP4 ring, whichever form the launcher takes (kRingXsMxfp4): the swapped
    form XS 2 decodes e2m1 to f16 times 2^-14 and adds 14 to the scale's exponent field for bytes 1..240, while a
    warp whose stage holds a byte 0 or 241..255 multiplies its f32 partials by 2^14 and then by gs_e8m0's scale
    (2^(241 - 127 + 14) would pass f32's largest power of two); XS 0 shifts every byte 1..254 into f32. Columns
    at 240 and 241, beside columns in the usual range, match the CPU twin each within one bf16 rounding and stay
    finite; block_m 16 runs a second 8-row tile in XS (slots of 16 and 11 rows)."""
    x, q, bmap = _problem("mxfp4", e=2, n=24, k=256, sizes=(16, 11), slack=0, block_m=block_m, seed=17)
    x = x / 16  # keeps 2^114 * 6 * |x| summed over 256 terms inside bf16's range
    q.scale[:, 2, :] = 240
    q.scale[:, 5, 3] = 241
    q.scale[1, 9, :] = 241
    qd = _to(q, "cuda")
    assert mo.kernel_path(x.cuda(), qd, bmap.cuda(), block_m) == "tensor_core"
    out = mo.moe_gemm(x.cuda(), qd, bmap.cuda(), block_m=block_m).float().cpu()
    cpu = mo.moe_gemm(x, q, bmap, block_m=block_m).float()
    assert torch.isfinite(cpu).all() and torch.isfinite(out).all()
    assert out[:, 2].abs().max() > 2.0**100 and out[16:, 9].abs().max() > 2.0**100
    for col in range(24):
        assert quant.max_rel_error(out[:, col], cpu[:, col]) <= OUTPUT_ROUNDING_BOUND + 256 * 2.0**-24, col


@pytest.mark.gpu
def test_gpu_workspace_per_call_on_streams_threads_and_under_capture():
    """The workspace rule (moe_gemm.torch.cpp) for the f16 x of the fp8 / MXFP4 tensor-core paths: each call
    takes its workspace from torch's allocator on its stream. Calls on a second stream and from a second thread
    give the first call's bits, and a call captured in a graph keeps its own: replays after eager calls with
    other rows still give the captured inputs' result, bit for bit an eager call's."""
    import threading

    x, q, bmap = _problem("mxfp8", e=4, n=136, k=288, sizes=(16, 3, 0, 9), slack=4, block_m=16, seed=21)
    qd, xd, bd = _to(q, "cuda"), x.cuda(), bmap.cuda()
    assert mo.kernel_path(xd, qd, bd, 16) == "tensor_core"  # MXFP8's ring: f16 x in the workspace
    want = mo.moe_gemm(xd, qd, bd, 16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = mo.moe_gemm(xd, qd, bd, 16)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(on_side.view(torch.int16), want.view(torch.int16))
    seen = {}

    def worker():
        seen["out"] = mo.moe_gemm(xd, qd, bd, 16)
        torch.cuda.current_stream().synchronize()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert torch.equal(seen["out"].view(torch.int16), want.view(torch.int16))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = mo.moe_gemm(xd, qd, bd, 16)
    other = torch.randn_like(xd, dtype=torch.float32).to(torch.bfloat16)
    for _ in range(2):
        mo.moe_gemm(other, qd, bd, 16)  # eager calls with other rows between replays
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.int16), want.view(torch.int16))
