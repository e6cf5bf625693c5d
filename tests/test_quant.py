"""Round-trip and encoding tests for kernels/common/quant.py (CPU, pure torch, well under a second each), and the
one format table it shares with C++ (kernels/common/gs_formats.h).

Bounds are derived from each format's grid, not fitted: max relative error is max|deq - w| / max|w| and
is bounded by the worst rounding or clipping step at the top of a block's range; cosine bounds are set
below the measured value for N(0,1) weights with margin (e4m3: ~0.9996, e2m1/Q4_0: ~0.993-0.996).
"""

import math

import pytest
import torch

from graphsafe.kernels.common import quant as q

# fmt -> (min cosine, max relative error, why the max relative error bound holds)
ROUND_TRIP_BOUNDS = {
    "bf16": (0.99999, 2.0**-8, "7 stored mantissa bits: ulp 2^-7 relative, half an ulp 2^-8"),
    "mxfp8": (0.999, 1 / 8, "OCP floor rule puts block amax in [256, 512) and clips at 448: <= 64/512"),
    "fp8_fnuz": (0.999, 8 / 240 + 1e-6, "top binade [128, 240] has ulp 16: half ulp 8 over amax 240"),
    "block_fp8": (0.999, 16 / 448 + 1e-6, "top binade [256, 448] has ulp 32: half ulp 16 over amax 448"),
    "mxfp4": (0.99, 1 / 4, "amax lands in [4, 8), clipped at 6 (<= 2/8); the 4..6 gap rounds by <= 1/4"),
    "nvfp4": (0.99, 0.2, "4..6 gap rounds by <= 1/6 of amax, plus e4m3 rounding of the block scale (1/16)"),
    "q4_0": (0.99, 1 / 8, "+amax maps to q = 16 -> clamped 15 = 7/8 amax: error amax/8"),
}


def _weights(shape=(8, 64, 256), seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fmt", q.FORMATS)
def test_round_trip_within_format_bounds(fmt):
    """Method: quantize N(0,1) [8, 64, 256] weights, dequantize, compare. Fails if a scale rule, nibble
    order or rounding is wrong (any of those drops the cosine below 0.9 or breaks the error bound)."""
    w = _weights()
    deq = q.dequantize_weight(q.quantize_weight(w, fmt))
    min_cos, max_rel, _why = ROUND_TRIP_BOUNDS[fmt]
    assert deq.shape == w.shape
    assert torch.isfinite(deq).all()
    assert q.cosine(deq, w) >= min_cos
    assert q.max_rel_error(deq, w) <= max_rel


@pytest.mark.parametrize("fmt", q.FORMATS)
def test_round_trip_negative_control_detects_scrambled_values(fmt):
    """Negative control for the test above: the same checks reject a dequantization whose K order was
    reversed (what a wrong nibble order or a wrong scale index does)."""
    w = _weights(seed=1)
    deq = q.dequantize_weight(q.quantize_weight(w, fmt)).flip(-1)
    assert q.cosine(deq, w) < 0.5


def test_layouts_keep_k_last_so_the_kn_view_shares_storage():
    w = _weights((4, 64, 128))
    for fmt in q.FORMATS:
        qw = q.quantize_weight(w, fmt)
        assert qw.data.shape[:-1] == (4, 64)
        view = qw.data.mT
        assert view.data_ptr() == qw.data.data_ptr()


def test_e2m1_all_16_codes_decode_and_reencode():
    codes = torch.arange(16, dtype=torch.uint8)
    vals = q.e2m1_decode(codes)
    expected = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert vals.tolist() == expected
    assert torch.signbit(vals[8])  # code 8 is -0
    reenc = q.e2m1_encode(vals)
    assert reenc[:8].tolist() == list(range(8))
    assert reenc[9:].tolist() == list(range(9, 16))
    assert reenc[8].item() == 0  # quantization never emits -0


def test_e2m1_rounds_ties_to_even_and_saturates():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -5.0, 0.2, 0.26])
    # ties go to the even code: 0.25->0 (c0), 0.75->1 (c2), 1.25->1 (c2), 1.75->2 (c4), 2.5->2 (c4),
    # 3.5->4 (c6), 5->4 (c6); beyond 6 saturates at 6
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -4.0, 0.0, 0.5]
    assert q.e2m1_decode(q.e2m1_encode(x)).tolist() == expected


def test_pack_unpack_nibble_order():
    codes = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    packed = q.pack_nibbles(codes)
    assert packed.tolist() == [0x21, 0x43]  # element 2i in the low nibble
    assert q.unpack_nibbles(packed).tolist() == [1, 2, 3, 4]
    # matches torch's float4_e2m1fn_x2 convention where torch can decode it
    assert packed.view(torch.float4_e2m1fn_x2).view(torch.uint8).tolist() == [0x21, 0x43]


def test_e8m0_edge_cases():
    codes = torch.tensor([0, 1, 126, 127, 128, 254, 255], dtype=torch.uint8)
    vals = q.e8m0_to_float(codes)
    assert vals[0].item() == 2.0**-127  # f32 denormal, still exact
    assert vals[1].item() == 2.0**-126
    assert vals[2].item() == 0.5 and vals[3].item() == 1.0 and vals[4].item() == 2.0
    assert vals[5].item() == 2.0**127
    assert math.isnan(vals[6].item())
    # agrees with torch's own float8_e8m0fnu decoding
    torch_vals = codes.view(torch.float8_e8m0fnu).float()
    assert torch.equal(vals.nan_to_num(-1.0), torch_vals.nan_to_num(-1.0))
    amax = torch.tensor([0.0, 1.0, 1.9999, 2.0, float("nan"), float("inf"), 1e-45, 3e38])
    enc = q.e8m0_from_amax(amax, emax=8).tolist()
    assert enc[0] == 127  # zero block: scale 1
    assert enc[1] == 127 - 8 and enc[2] == 127 - 8 and enc[3] == 128 - 8  # floor(log2), exact at 2^k
    assert enc[4] == 255 and enc[5] == 255  # non-finite amax poisons the block
    assert enc[6] == 0  # clamps at the smallest exponent
    assert enc[7] == 127 + 127 - 8
    with pytest.raises(ValueError, match=r"E8M0 scale dtype must be torch\.uint8"):
        q.e8m0_to_float(torch.zeros(2, dtype=torch.int32))


def test_nan_input_poisons_its_block_in_every_format():
    """NaN is a failure, never a wildcard: a NaN weight must surface as NaN after the round trip."""
    w = _weights((2, 32, 128))
    w[1, 3, 40] = float("nan")
    for fmt in q.FORMATS:
        deq = q.dequantize_weight(q.quantize_weight(w, fmt))
        assert torch.isnan(deq[1, 3, 40]), fmt
        assert torch.isfinite(deq[0]).all(), fmt


def test_fnuz_encoding_and_range():
    vals = torch.tensor([240.0, -240.0, 1000.0, 0.0])
    enc = q.saturating_fp8(vals, torch.float8_e4m3fnuz).view(torch.uint8).tolist()
    assert enc == [0x7F, 0xFF, 0x7F, 0x00]
    nan = torch.tensor([0x80], dtype=torch.uint8).view(torch.float8_e4m3fnuz).float()
    assert math.isnan(nan.item())  # gfx942: 0x80 is the only NaN


def test_448_scaled_quantizer_overflows_fnuz():
    """aiter PR #5831's bug: dynamic quant scaled for OCP e4m3fn (448) but stored as gfx942 e4m3fnuz (240).
    Everything above 240/448 of the row max clips; the PR measured round-trip cosine 0.989, this
    reproduces 0.989 on N(0,1) rows. The correctly scaled quantizer (the control) stays above 0.999."""
    w = _weights((64, 512))
    v, s = q.quantize_fp8_per_channel(w, torch.float8_e4m3fnuz, qmax=448.0)
    bad = q.cosine(q.dequantize_fp8_per_channel(v, s), w)
    v, s = q.quantize_fp8_per_channel(w, torch.float8_e4m3fnuz)
    good = q.cosine(q.dequantize_fp8_per_channel(v, s), w)
    assert 0.98 < bad < 0.995
    assert good > 0.999
    # the same mistake in the MX path (emax 8 instead of fnuz's 7)
    v, s = q.quantize_mx(w, "fp8", torch.float8_e4m3fnuz, emax=8)
    assert q.cosine(q.dequantize_mx(v, s), w) < 0.995
    v, s = q.quantize_mx(w, "fp8", torch.float8_e4m3fnuz)
    assert q.cosine(q.dequantize_mx(v, s), w) > 0.999


def test_block_fp8_activation_groups_round_trip_with_partial_group():
    x = _weights((16, 300))  # 300 = 2 full groups of 128 + a partial one of 44
    v, s = q.quantize_fp8_token_groups(x)
    assert s.shape == (16, 3)
    deq = q.dequantize_fp8_token_groups(v, s)
    assert q.cosine(deq, x) > 0.999
    assert q.max_rel_error(deq, x) <= 16 / 448 + 1e-6


def test_block_fp8_partial_weight_blocks():
    w = _weights((2, 130, 96))  # N = 128 + 2, K = 96 < 128
    qw = q.quantize_weight(w, "block_fp8")
    assert qw.scale.shape == (2, 2, 1)
    assert q.cosine(q.dequantize_weight(qw), w) > 0.999


def test_q4_0_matches_ggml_reference_row():
    """Hand-computed ggml quantize_row_q4_0_ref on one block: max = -4 (largest |x|), d = 0.5."""
    x = torch.zeros(32)
    x[0], x[1], x[2], x[16] = -4.0, 1.0, 3.9, 0.26
    packed, d = q.quantize_q4_0(x)
    assert d.item() == 0.5
    # q = min(15, trunc(x / 0.5 + 8.5)): -4 -> 0, 1 -> 10, 3.9 -> 16 -> 15, 0.26 -> 9, 0 -> 8
    assert packed[0].item() == (0 | (9 << 4))  # byte 0: element 0 low, element 16 high
    assert packed[1].item() == (10 | (8 << 4))
    assert packed[2].item() == (15 | (8 << 4))
    deq = q.dequantize_q4_0(packed, d)
    assert deq[0].item() == -4.0 and deq[2].item() == 3.5 and deq[16].item() == 0.5


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: q.quantize_weight(torch.zeros(4, 32), "int3"), "fmt must be one of"),
        (lambda: q.quantize_weight(torch.zeros(4, 48), "mxfp8"), "must be a multiple of 32"),
        (lambda: q.quantize_weight(torch.zeros(4, 24), "nvfp4"), "must be a multiple of 16"),
        (lambda: q.quantize_mx(torch.zeros(4, 32), "fp6"), "elem must be one of"),
        (lambda: q.fp8_max(torch.float8_e5m2), "fp8 dtype must be"),
    ],
)
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_format_codes_are_the_one_table_cpp_uses():
    """Method: parse kernels/common/gs_formats.h, the enum every kernel includes (moe_gemm.hip, cpu_moe_formats.h),
    and its refusal text. Expected: the same name -> code map as quant.FORMAT_CODES, the one Python table."""
    import pathlib
    import re

    header = (pathlib.Path(q.__file__).parent / "gs_formats.h").read_text()
    enum = {name.lower(): int(code) for name, code in re.findall(r"GS_FMT_(\w+) = (\d+),", header)}
    assert enum == q.FORMAT_CODES
    names = re.search(r'#define GS_FORMAT_NAMES "([^"]+)"', header).group(1)
    assert names == ", ".join(f"{code} {name}" for name, code in q.FORMAT_CODES.items())
    assert tuple(q.FORMAT_CODES) == q.FORMATS and sorted(q.FORMAT_CODES.values()) == list(
        range(len(q.FORMATS))
    )
