"""Quantize/dequantize references for the weight formats the MoE GEMM consumes (pure torch, any device).

Role: the oracle side of kernels/moe_gemm/moe_gemm.hip and kernels/cpu_moe/cpu_moe.cpp. Every format is stored as structure-of-arrays
(values, scales, optional global scale) along the last (K) axis so that an [E, N, K] weight and its
[E, K, N] transposed view share storage (aiter PR #5831's per-call permute().contiguous() copy is what the GEMM
must avoid). Dequantization here does the same f32 operations the kernels do (decode the code to f32, then
one f32 multiply per scale), so dequantized weights are bit-identical to the kernels' decoded weights and
the only kernel-vs-reference difference left is the order of the f32 accumulation.

Formats (name -> layout of a [..., N, K] weight):
- "bf16": values bf16 [..., N, K]; no scale.
- "mxfp8": e4m3fn values [..., N, K]; E8M0 scale (uint8) [..., N, K/32] (OCP MX v1.0, emax 8).
- "fp8_fnuz": e4m3fnuz values (gfx942 encoding: max 240, bias 8, NaN = 0x80, no -0, no inf);
  f32 scale per output channel [..., N, 1].
- "block_fp8": e4m3fn values; f32 scale per 128x128 weight block [..., cdiv(N,128), cdiv(K,128)]
  (DeepSeek-V3 layout); activations use one f32 scale per token and group of 128 along K.
- "mxfp4": e2m1 packed two per byte (element 2i in the low nibble, OCP / torch float4_e2m1fn_x2 order)
  [..., N, K/2]; E8M0 scale [..., N, K/32] (emax 2).
- "nvfp4": e2m1 packed as mxfp4; e4m3fn scale per 16 [..., N, K/16]; f32 global scale per matrix
  [...] (NVIDIA's two-level scaling: global = amax / (448 * 6)).
- "q4_0": ggml Q4_0: blocks of 32, f16 d = max / -8 (max is the signed value of largest |x|), 4-bit
  q = min(15, trunc(x / d + 8.5)), value = (q - 8) * d. Nibble order within a block follows ggml
  (byte j holds element j low, element j + 16 high); d is split into its own f16 tensor [..., N, K/32].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

FORMATS = ("bf16", "mxfp8", "fp8_fnuz", "block_fp8", "mxfp4", "nvfp4", "q4_0")
# The code each format has in C++ (kernels/common/gs_formats.h, GsFormat): the one table every op family hands
# formats over with. tests/test_quant.py pins it against the header.
FORMAT_CODES = {name: code for code, name in enumerate(FORMATS)}

MX_BLOCK = 32  # OCP MX v1.0: one shared E8M0 scale per 32 elements
NVFP4_BLOCK = 16  # NVFP4: one e4m3 scale per 16 elements
FP8_BLOCK = 128  # DeepSeek-V3 block FP8: 128x128 weight blocks, 1x128 activation groups
Q4_0_BLOCK = 32  # ggml QK4_0

E4M3FN_MAX = 448.0  # OCP e4m3fn: S.1111.110 = 1.75 * 2^8
E4M3FNUZ_MAX = 240.0  # gfx942 e4m3fnuz: bias 8, S.1111.111 = 1.875 * 2^7
E2M1_MAX = 6.0
E8M0_NAN = 255
E8M0_BIAS = 127

# e2m1 magnitudes for codes 0..7; codes 8..15 are the negatives (sign bit 3). -0 (code 8) decodes to -0.0.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Rounding thresholds between consecutive magnitudes, and whether a tie rounds up (to the even code).
_E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E2M1_TIE_UP = (False, True, False, True, False, True, False)


@dataclass(frozen=True)
class QuantizedWeight:
    """A quantized [..., N, K] tensor. `data`/`scale` keep K last so `.mT` gives the [..., K, N] view."""

    fmt: str
    data: Tensor
    scale: Tensor | None = None
    global_scale: Tensor | None = None
    k: int = 0  # logical K (data holds K/2 bytes for the FP4 formats)


def _check_fmt(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")


def _check_k_multiple(x: Tensor, block: int, fmt: str) -> None:
    if x.dim() < 1 or x.shape[-1] % block != 0:
        raise ValueError(f"{fmt}: K (last dim of x, shape {tuple(x.shape)}) must be a multiple of {block}")


def _blocks(x: Tensor, block: int) -> Tensor:
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)


# --------------------------------------------------------------------------- E8M0 (OCP MX shared exponent)


def e8m0_from_amax(amax: Tensor, emax: int) -> Tensor:
    """Biased E8M0 exponent (uint8) with scale = 2^(floor(log2 amax) - emax), per OCP MX v1.0 sec. 6.3.

    floor(log2) comes from frexp (exact; log2 in float rounds up just below powers of two).
    amax == 0 gives 127 (scale 1: any scale decodes zeros to zero). NaN/inf amax gives 255 (NaN) so a
    non-finite input poisons its block instead of vanishing. Exponents clamp to [0, 254].
    """
    amax = amax.float()
    _, exp = torch.frexp(amax)  # amax = m * 2^exp, m in [0.5, 1)  =>  floor(log2 amax) = exp - 1
    biased = (exp.to(torch.int32) - 1 - emax + E8M0_BIAS).clamp(0, 254)
    biased = torch.where(amax == 0, torch.full_like(biased, E8M0_BIAS), biased)
    biased = torch.where(torch.isfinite(amax), biased, torch.full_like(biased, E8M0_NAN))
    return biased.to(torch.uint8)


def e8m0_to_float(code: Tensor) -> Tensor:
    """2^(code - 127) as f32 (code 0 is the f32 denormal 2^-127); 255 is NaN."""
    if code.dtype != torch.uint8:
        raise ValueError(f"E8M0 scale dtype must be torch.uint8, got {code.dtype}")
    c = code.to(torch.int32)
    val = torch.ldexp(torch.ones_like(c, dtype=torch.float32), c - E8M0_BIAS)
    return torch.where(c == E8M0_NAN, torch.full_like(val, float("nan")), val)


# --------------------------------------------------------------------------- e2m1 (FP4) codes


def e2m1_encode(x: Tensor) -> Tensor:
    """Round f32 to the nearest e2m1 code (uint8 0..15), ties to even, saturating at +-6.

    e2m1 has no NaN or inf: callers route non-finite inputs through a NaN scale instead.
    """
    mag = x.float().abs()
    code = torch.zeros_like(mag, dtype=torch.uint8)
    for thr, tie_up in zip(_E2M1_THRESHOLDS, _E2M1_TIE_UP, strict=True):
        code += (mag >= thr if tie_up else mag > thr).to(torch.uint8)
    sign = (torch.signbit(x.float()) & (code > 0)).to(torch.uint8)  # no -0 from quantization
    return code | (sign << 3)


def e2m1_decode(code: Tensor) -> Tensor:
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=code.device)
    c = code.to(torch.int64)
    mag = lut[c & 7]
    return torch.where((c & 8) != 0, -mag, mag)


def pack_nibbles(codes: Tensor) -> Tensor:
    """[..., K] codes -> [..., K/2] bytes, element 2i in the low nibble (OCP / float4_e2m1fn_x2 order)."""
    c = codes.to(torch.uint8).reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return c[..., 0] | (c[..., 1] << 4)


def unpack_nibbles(packed: Tensor) -> Tensor:
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# --------------------------------------------------------------------------- FP8 helpers


def fp8_max(dtype: torch.dtype) -> float:
    if dtype == torch.float8_e4m3fn:
        return E4M3FN_MAX
    if dtype == torch.float8_e4m3fnuz:
        return E4M3FNUZ_MAX
    raise ValueError(f"fp8 dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dtype}")


def saturating_fp8(x: Tensor, dtype: torch.dtype) -> Tensor:
    """Clamp to the format's max, then cast: torch casts out-of-range values to NaN for fnuz (0x80),
    which would turn a scaling mistake into NaN instead of the clipping real quantizers do."""
    m = fp8_max(dtype)
    return x.float().clamp(-m, m).to(dtype)


# --------------------------------------------------------------------------- MXFP8 / MXFP4


def quantize_mx(
    x: Tensor, elem: str = "fp8", fp8_dtype: torch.dtype = torch.float8_e4m3fn, emax: int | None = None
):
    """OCP MX quantization along the last dim: returns (values, E8M0 scales [..., K/32]).

    elem "fp8": values in fp8_dtype (e4m3fn, emax 8; e4m3fnuz, emax 7). elem "fp4": e2m1 codes packed.
    `emax` overrides the element emax: emax=8 with e4m3fnuz reproduces aiter PR #5831's bug (a quantizer
    scaled for OCP's 448 feeding gfx942's 240-max format; round-trip cosine fell to 0.989).
    """
    if elem == "fp8":
        emax = emax if emax is not None else (8 if fp8_dtype == torch.float8_e4m3fn else 7)
        fp8_max(fp8_dtype)
    elif elem == "fp4":
        emax = 2 if emax is None else emax
    else:
        raise ValueError(f"elem must be one of ('fp8', 'fp4'), got {elem!r}")
    _check_k_multiple(x, MX_BLOCK, f"mx{elem}")
    xb = _blocks(x, MX_BLOCK)
    code = e8m0_from_amax(xb.abs().amax(dim=-1), emax)
    scale = e8m0_to_float(code).unsqueeze(-1)
    scaled = (xb / scale).reshape(x.shape)  # division by a power of two: exact
    if elem == "fp8":
        return saturating_fp8(scaled, fp8_dtype), code
    return pack_nibbles(e2m1_encode(scaled)), code


def dequantize_mx(values: Tensor, scale: Tensor) -> Tensor:
    packed_fp4 = values.dtype == torch.uint8
    v = e2m1_decode(unpack_nibbles(values)) if packed_fp4 else values.float()
    s = e8m0_to_float(scale).repeat_interleave(MX_BLOCK, dim=-1)
    return v * s


# --------------------------------------------------------------------------- FP8 per channel / per block


def quantize_fp8_per_channel(
    w: Tensor, dtype: torch.dtype = torch.float8_e4m3fnuz, qmax: float | None = None
):
    """One f32 scale per row (output channel): scale = amax / qmax (qmax defaults to the format's max)."""
    qmax = fp8_max(dtype) if qmax is None else qmax
    amax = w.float().abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    return saturating_fp8(w.float() / scale, dtype), scale


def dequantize_fp8_per_channel(values: Tensor, scale: Tensor) -> Tensor:
    return values.float() * scale


def _pad_to(x: Tensor, dim: int, multiple: int) -> Tensor:
    pad = (-x.shape[dim]) % multiple
    if pad == 0:
        return x
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat((x, x.new_zeros(shape)), dim=dim)


def quantize_block_fp8(w: Tensor, block: int = FP8_BLOCK):
    """[..., N, K] -> (e4m3fn values, f32 scales [..., cdiv(N,128), cdiv(K,128)]); partial edge blocks
    take their amax over the elements that exist (zero padding never raises an amax)."""
    n, k = w.shape[-2], w.shape[-1]
    wp = _pad_to(_pad_to(w.float(), -1, block), -2, block)
    nb, kb = wp.shape[-2] // block, wp.shape[-1] // block
    tiles = wp.reshape(*w.shape[:-2], nb, block, kb, block)
    amax = tiles.abs().amax(dim=(-3, -1))
    scale = torch.where(amax > 0, amax / E4M3FN_MAX, torch.ones_like(amax))
    full = scale.repeat_interleave(block, dim=-2).repeat_interleave(block, dim=-1)[..., :n, :k]
    return saturating_fp8(w.float() / full, torch.float8_e4m3fn), scale


def dequantize_block_fp8(values: Tensor, scale: Tensor, block: int = FP8_BLOCK) -> Tensor:
    n, k = values.shape[-2], values.shape[-1]
    full = scale.repeat_interleave(block, dim=-2).repeat_interleave(block, dim=-1)[..., :n, :k]
    return values.float() * full


def quantize_fp8_token_groups(x: Tensor, group: int = FP8_BLOCK):
    """Activations [..., K]: one f32 scale per token and group of 128 along K (DeepSeek-V3 act quant)."""
    k = x.shape[-1]
    xp = _pad_to(x.float(), -1, group)
    g = xp.reshape(*x.shape[:-1], xp.shape[-1] // group, group)
    amax = g.abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax / E4M3FN_MAX, torch.ones_like(amax))
    q = saturating_fp8(x.float() / scale.repeat_interleave(group, dim=-1)[..., :k], torch.float8_e4m3fn)
    return q, scale


def dequantize_fp8_token_groups(values: Tensor, scale: Tensor, group: int = FP8_BLOCK) -> Tensor:
    return values.float() * scale.repeat_interleave(group, dim=-1)[..., : values.shape[-1]]


# --------------------------------------------------------------------------- NVFP4


def quantize_nvfp4(w: Tensor):
    """[..., N, K] -> (packed e2m1 [..., N, K/2], e4m3fn scales [..., N, K/16], f32 global [...]).

    global = amax(matrix) / (448 * 6) so the largest block scale lands at e4m3's max; block scale =
    amax(block) / 6 / global rounded to e4m3fn; values = x / (scale * global) rounded to e2m1.
    """
    _check_k_multiple(w, NVFP4_BLOCK, "nvfp4")
    if w.dim() < 2:
        raise ValueError(f"nvfp4: w must be [..., N, K] (2+ dims), got shape {tuple(w.shape)}")
    amax_t = w.float().abs().amax(dim=(-2, -1))
    glob = torch.where(amax_t > 0, amax_t / (E4M3FN_MAX * E2M1_MAX), torch.ones_like(amax_t))
    g = glob[..., None, None]
    xb = _blocks(w, NVFP4_BLOCK)
    sblk = saturating_fp8(xb.abs().amax(dim=-1) / E2M1_MAX / g, torch.float8_e4m3fn)
    eff = (sblk.float() * g).unsqueeze(-1)  # the kernel's order: e4m3 -> f32, times global
    scaled = torch.where(eff > 0, xb / eff, torch.zeros_like(xb)).reshape(w.shape)
    return pack_nibbles(e2m1_encode(scaled)), sblk, glob


def dequantize_nvfp4(packed: Tensor, scale: Tensor, glob: Tensor) -> Tensor:
    v = e2m1_decode(unpack_nibbles(packed))
    eff = (scale.float() * glob[..., None, None]).repeat_interleave(NVFP4_BLOCK, dim=-1)
    return v * eff


# --------------------------------------------------------------------------- Q4_0 (ggml)


def quantize_q4_0(w: Tensor):
    """ggml quantize_row_q4_0_ref: returns (packed uint8 [..., K/2] in ggml nibble order, f16 d [..., K/32])."""
    _check_k_multiple(w, Q4_0_BLOCK, "q4_0")
    xb = _blocks(w, Q4_0_BLOCK)
    idx = xb.abs().argmax(dim=-1, keepdim=True)  # first index of the largest |x|, as ggml's strict '<'
    vmax = torch.gather(xb, -1, idx)
    d = vmax / -8.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.clamp(torch.trunc(xb * inv + 8.5), max=15).to(torch.uint8)  # (int8_t)(x*id + 8.5f), MIN 15
    packed = q[..., :16] | (q[..., 16:] << 4)
    return packed.reshape(*w.shape[:-1], w.shape[-1] // 2), d.squeeze(-1).to(torch.float16)


def dequantize_q4_0(packed: Tensor, d: Tensor) -> Tensor:
    pb = packed.reshape(*packed.shape[:-1], packed.shape[-1] // 16, 16)
    q = torch.cat((pb & 0x0F, pb >> 4), dim=-1).to(torch.int32) - 8
    v = q.float() * d.float().unsqueeze(-1)
    return v.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# --------------------------------------------------------------------------- one entry point per direction


def quantize_weight(w: Tensor, fmt: str) -> QuantizedWeight:
    """Quantize a [..., N, K] weight into `fmt` (see the module note for each layout)."""
    _check_fmt(fmt)
    k = w.shape[-1]
    if fmt == "bf16":
        return QuantizedWeight(fmt, w.to(torch.bfloat16), k=k)
    if fmt == "mxfp8":
        v, s = quantize_mx(w, "fp8", torch.float8_e4m3fn)
        return QuantizedWeight(fmt, v, s, k=k)
    if fmt == "fp8_fnuz":
        v, s = quantize_fp8_per_channel(w, torch.float8_e4m3fnuz)
        return QuantizedWeight(fmt, v, s, k=k)
    if fmt == "block_fp8":
        v, s = quantize_block_fp8(w)
        return QuantizedWeight(fmt, v, s, k=k)
    if fmt == "mxfp4":
        v, s = quantize_mx(w, "fp4")
        return QuantizedWeight(fmt, v, s, k=k)
    if fmt == "nvfp4":
        v, s, g = quantize_nvfp4(w)
        return QuantizedWeight(fmt, v, s, g, k=k)
    v, s = quantize_q4_0(w)
    return QuantizedWeight(fmt, v, s, k=k)


def dequantize_weight(q: QuantizedWeight) -> Tensor:
    """f32 [..., N, K] with the kernels' decode arithmetic."""
    _check_fmt(q.fmt)
    if q.fmt == "bf16":
        return q.data.float()
    if q.fmt in ("mxfp8", "mxfp4"):
        return dequantize_mx(q.data, q.scale)
    if q.fmt == "fp8_fnuz":
        return dequantize_fp8_per_channel(q.data, q.scale)
    if q.fmt == "block_fp8":
        return dequantize_block_fp8(q.data, q.scale)
    if q.fmt == "nvfp4":
        return dequantize_nvfp4(q.data, q.scale, q.global_scale)
    return dequantize_q4_0(q.data, q.scale)


def cosine(a: Tensor, b: Tensor) -> float:
    """Cosine similarity of two flattened tensors in f64 (NaN if either holds NaN: never a wildcard)."""
    a64, b64 = a.double().flatten(), b.double().flatten()
    return float((a64 @ b64) / (a64.norm() * b64.norm()))


def max_rel_error(out: Tensor, ref: Tensor) -> float:
    """max|out - ref| / max|ref|, the error measure of the three reproduced reports (NaN anywhere gives NaN)."""
    return float((out.double() - ref.double()).abs().max() / ref.double().abs().max())
