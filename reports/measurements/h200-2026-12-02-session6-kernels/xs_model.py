"""A NumPy model of the MXFP4 ring kernel's chunk arithmetic (kernels/moe_gemm/moe_gemm.hip,
gs_moe_gemm_mma_ring_kernel), unswapped (XS 0, the form the H200 runs and the GPU tests check) and with swapped
operands (XS 1; XS 2 adds the decode's 2^14 in the f32 scale), checked against an f64 reference. No GPU was
available to this session, so this is the check made of XS 1/2's index logic: which decoded word feeds which
fragment register, the x pair order, which scale multiplies which accumulator, the 2^14 fold and its vote.

The model of mma.sync.m16n8k16 (f16 in, f32 out) is the PTX ISA's fragment layout, the one the unswapped kernel
uses and the GPU tests confirm: lane (g = lane / 4, t = lane % 4) holds A rows g (a0, a2) and g + 8 (a1, a3),
K pairs 2t (a0, a1) and 2t + 8 (a2, a3); B column g, K pairs 2t (b0) and 2t + 8 (b1); C rows g (c0, c1) and
g + 8 (c2, c3), columns 2t and 2t + 1. Shared-memory addresses and swizzles are not modelled (XS changes none
of them: it reads the same words at the same offsets as XS 0, tiles 2j and 2j + 1).

    python reports/measurements/h200-2026-12-02-session6-kernels/xs_model.py
"""

from __future__ import annotations

import numpy as np

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def f16_bits(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float16).view(np.uint16).astype(np.uint32)


def f16_val(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)


def halves(word: int) -> tuple[float, float]:
    return float(f16_val(np.uint32(word & 0xFFFF))), float(f16_val(np.uint32(word >> 16)))


def decode_raw(word: int) -> list[int]:
    """gs_e2m1x8_to_f16x2_raw: four f16x2 words (elements (0, 2), (1, 3), (4, 6), (5, 7)) times 2^-14."""
    bl = ((word << 4) & 0x80808080) | ((word << 1) & 0x0E0E0E0E)
    bh = (word & 0x80808080) | ((word >> 3) & 0x0E0E0E0E)

    def perm(x: int, sel_hi: int) -> int:  # __byte_perm(x, 0, 0x1404 / 0x3424): bytes into the halves' tops
        b0, b1 = (x >> (8 * sel_hi)) & 0xFF, (x >> (8 * (sel_hi + 1))) & 0xFF
        return (b0 << 8) | (b1 << 24)

    return [perm(bl, 0), perm(bh, 0), perm(bl, 2), perm(bh, 2)]


def decode_ring(word: int) -> list[int]:
    """gs_e2m1x8_to_f16x2_ring: the same words times 2^14 (HMUL2), exact."""
    out = []
    for h in decode_raw(word):
        lo, hi = halves(h)
        out.append(int(f16_bits(lo * 16384.0)) | (int(f16_bits(hi * 16384.0)) << 16))
    return out


def e8m0(b: int) -> float:
    return float("nan") if b == 255 else 2.0 ** (b - 127) if b else 2.0**-127


def shift(w: int, u: int) -> float:  # gs_e8m0_shift
    bits = ((w >> 1) if u == 3 else (w << (23 - 8 * u))) & 0x7F800000
    return float(np.uint32(bits).view(np.float32))


def outside_1_240(w: int) -> bool:  # gs_e8m0_outside_1_240
    t = (((w & 0x7F7F7F7F) + 0x0F0F0F0F) ^ (w & 0x80808080)) & 0xFFFFFFFF
    return (((t - 0x10101010) & 0xFFFFFFFF) & ~t & 0x80808080) != 0


def has_00_or_ff(w: int) -> bool:  # gs_e8m0_has_00_or_ff
    nw = ~w & 0xFFFFFFFF
    return ((((w - 0x01010101) & 0xFFFFFFFF) & nw) | (((nw - 0x01010101) & 0xFFFFFFFF) & w)) & 0x80808080 != 0


def mma(a: list[list[int]], b: list[list[int]], c: np.ndarray) -> np.ndarray:
    """c[lane][4] += A @ B from per-lane fragments a[lane][4], b[lane][2] (PTX layout above)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for reg, (row, k0) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
            A[row, k0], A[row, k0 + 1] = halves(a[lane][reg])
        for reg, k0 in enumerate((2 * t, 2 * t + 8)):
            B[k0, g], B[k0 + 1, g] = halves(b[lane][reg])
    C = A @ B
    out = c.copy()
    for lane in range(32):
        g, t = lane // 4, lane % 4
        out[lane] += [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]
    return out


def run(xs: int, x16: np.ndarray, words: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """One warp's 32 columns (4 n8 tiles) over one stage of 4 chunks, rows of one 16-row group.
    x16: [16, 128] f16 x in the MXFP4 pair order; words: [32 columns, 4 chunks, 4 lanes t] e2m1 words;
    scales: [32 columns] E8M0 words (byte u: chunk u). Returns out[16 rows, 32 columns] in f64."""
    rows = x16.shape[0]
    acc = np.zeros((4, 32, 4))  # [tile][lane][reg]
    xw = f16_bits(x16)  # u32 per element

    def xword(r: int, u: int, t: int, i: int) -> int:  # f16x2 word i of row r's 8 x elements, chunk u, lane t
        return int(xw[r, 32 * u + 8 * t + 2 * i]) | (int(xw[r, 32 * u + 8 * t + 2 * i + 1]) << 16)

    if xs == 0:
        exact = any(has_00_or_ff(int(scales[n])) for n in range(32))
        for u in range(4):
            for nt in range(4):
                a = [[xword(g, u, t, 0), xword(g + 8, u, t, 0), xword(g, u, t, 1), xword(g + 8, u, t, 1)]
                     for g, t in ((lane // 4, lane % 4) for lane in range(32))]  # fmt: skip
                a2 = [[xword(g, u, t, 2), xword(g + 8, u, t, 2), xword(g, u, t, 3), xword(g + 8, u, t, 3)]
                      for g, t in ((lane // 4, lane % 4) for lane in range(32))]  # fmt: skip
                hs = [decode_ring(int(words[nt * 8 + lane // 4, u, lane % 4])) for lane in range(32)]
                c = mma(a, [[h[0], h[1]] for h in hs], np.zeros((32, 4)))
                c = mma(a2, [[h[2], h[3]] for h in hs], c)
                for lane in range(32):
                    t = lane % 4
                    w0, w1 = int(scales[nt * 8 + 2 * t]), int(scales[nt * 8 + 2 * t + 1])
                    s0 = e8m0((w0 >> 8 * u) & 0xFF) if exact else shift(w0, u)
                    s1 = e8m0((w1 >> 8 * u) & 0xFF) if exact else shift(w1, u)
                    acc[nt, lane] += c[lane] * [s0, s1, s0, s1]
        out = np.zeros((rows, 32))
        for nt in range(4):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for i in range(4):
                    out[g + 8 * (i // 2), nt * 8 + 2 * t + (i % 2)] = acc[nt, lane, i]
        return out
    vote = outside_1_240 if xs == 2 else has_00_or_ff
    exact = any(vote(int(scales[n])) for n in range(32))
    for u in range(4):
        for j in range(2):
            hg = [
                (decode_raw if xs == 2 else decode_ring)(int(words[16 * j + lane // 4, u, lane % 4]))
                for lane in range(32)
            ]
            h8 = [
                (decode_raw if xs == 2 else decode_ring)(int(words[16 * j + 8 + lane // 4, u, lane % 4]))
                for lane in range(32)
            ]
            k0 = [[hg[ln][0], h8[ln][0], hg[ln][1], h8[ln][1]] for ln in range(32)]
            k1 = [[hg[ln][2], h8[ln][2], hg[ln][3], h8[ln][3]] for ln in range(32)]
            for tt in range(2):
                b0 = [
                    [xword(8 * tt + ln // 4, u, ln % 4, 0), xword(8 * tt + ln // 4, u, ln % 4, 1)]
                    for ln in range(32)
                ]
                b1 = [
                    [xword(8 * tt + ln // 4, u, ln % 4, 2), xword(8 * tt + ln // 4, u, ln % 4, 3)]
                    for ln in range(32)
                ]
                c = mma(k1, b1, mma(k0, b0, np.zeros((32, 4))))
                if xs == 2 and exact:
                    c = c * 16384.0
                for lane in range(32):
                    g = lane // 4
                    w0, w1 = int(scales[16 * j + g]), int(scales[16 * j + 8 + g])
                    if xs == 2 and not exact:
                        w0, w1 = w0 + 0x0E0E0E0E, w1 + 0x0E0E0E0E
                    s0 = e8m0((w0 >> 8 * u) & 0xFF) if exact else shift(w0, u)
                    s1 = e8m0((w1 >> 8 * u) & 0xFF) if exact else shift(w1, u)
                    acc[2 * j + tt, lane] += c[lane] * [s0, s0, s1, s1]
    out = np.zeros((rows, 32))
    for j in range(2):
        for tt in range(2):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for i in range(4):
                    out[8 * tt + 2 * t + (i % 2), 16 * j + g + 8 * (i // 2)] = acc[2 * j + tt, lane, i]
    return out


def main() -> None:
    rng = np.random.default_rng(6)
    worst = {}
    for scale_range in ((120, 130), (1, 240), (230, 254), (0, 3)):
        words = rng.integers(0, 2**32, size=(32, 4, 4), dtype=np.uint64).astype(np.uint32)
        sbytes = rng.integers(scale_range[0], scale_range[1] + 1, size=(32, 4))
        scales = (sbytes[:, 0] | (sbytes[:, 1] << 8) | (sbytes[:, 2] << 16) | (sbytes[:, 3] << 24)).astype(
            np.int64
        )
        x = rng.integers(-1000, 1001, size=(16, 128)) / 256.0  # exact in f16 (10 fraction bits at most)
        # K element order of the x words (prepare_rows' MXFP4 pair order within 8): 0, 2, 1, 3, 4, 6, 5, 7
        perm = np.array([0, 2, 1, 3, 4, 6, 5, 7])
        x16 = np.concatenate([x[:, 8 * q + perm] for q in range(16)], axis=1).astype(np.float16)
        # reference: w[k, n] = e2m1(nibble) * 2^(e - 127); element 2i low nibble of byte i of the lane's word
        w = np.zeros((128, 32))
        for n in range(32):
            for u in range(4):
                for t in range(4):
                    word = int(words[n, u, t])
                    for e in range(8):
                        nib = (word >> (4 * e)) & 0xF
                        w[32 * u + 8 * t + e, n] = E2M1[nib] * 2.0 ** (int(sbytes[n, u]) - 127)
        ref = x @ w
        for xs in (0, 1, 2):
            got = run(xs, x16, words, scales)
            err = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-300)
            worst[xs] = max(worst.get(xs, 0.0), err)
            print(f"scales {scale_range}: XS {xs} max relative error {err:.3g}")
    ok = all(v < 1e-6 for v in worst.values())
    print("all XS forms match the f64 reference" if ok else "MISMATCH")
    # the vote's bytes, exhaustively in every position
    bad = [
        (b, p) for b in range(256) for p in range(4)
        if outside_1_240(0x7A7A7A7A & ~(0xFF << 8 * p) | (b << 8 * p)) != (b == 0 or b > 240)
    ]  # fmt: skip
    print(f"gs_e8m0_outside_1_240 over 256 bytes x 4 positions: {'ok' if not bad else bad[:8]}")


if __name__ == "__main__":
    main()
