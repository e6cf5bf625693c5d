"""One comparison function: the seeds' relative error with explicit NaN/Inf and poison accounting.

error = max|out - ref| / (max|ref| + 1e-6), the formula of FreeToken issue #350 (which adds 1e-6
to the denominator). NaN is never a wildcard: `max` over a NaN is NaN and `NaN > threshold` is False, which is how a
checker passes a kernel that writes nothing (gpu-mode/pygpubench#7). So non-finite values and poison bit
patterns in `out` where `ref` holds a finite, non-poison value are counted first, and any such element makes
the comparison fail with error = inf.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from graphsafe.scan import scan_and_differ

# Default relative-error thresholds per output dtype (max-norm, like the seeds).
# bf16 0.02: FreeToken issue #350's acceptance threshold (its test_cpu_moe.py). f16 1e-3 and f32 1e-5: one order
# looser than torch.testing.assert_close's rtol (1e-3 and 1.3e-6) because ours is normalised by max|ref|,
# not per element. fp8: half an ulp of the format's mantissa (e4m3: 3 bits -> 2^-4; e5m2: 2 bits -> 2^-3).
DEFAULT_THRESHOLDS: dict[torch.dtype, float] = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 1e-3,
    torch.bfloat16: 2e-2,
    torch.float8_e4m3fn: 6.25e-2,
    torch.float8_e4m3fnuz: 6.25e-2,
    torch.float8_e5m2: 1.25e-1,
    torch.float8_e5m2fnuz: 1.25e-1,
    # Complex outputs are compared component-wise (real and imaginary parts), at their parts' thresholds.
    torch.complex64: 1e-5,
    torch.complex128: 1e-12,
}
# Integers, booleans and anything without a table entry compare bit-exact.


def default_threshold(dtype: torch.dtype) -> float:
    """0.0 means bit-exact."""
    return DEFAULT_THRESHOLDS.get(dtype, 0.0)


@functools.cache
def poison_values(dtype: torch.dtype) -> tuple[float | int, ...]:
    """Values an unwritten element holds under the harness's poisoning, for this dtype.

    0xFF and 0x7F byte fills (the poisoning allocators) and torch's fill_uninitialized_memory (NaN for
    floats, the dtype's max for integers). Float NaNs are caught as non-finite; this lists the finite ones.
    """
    if dtype.is_complex:
        # Compared as their real parts' dtype (`compare`), whose poison values are the ones that matter.
        return poison_values(dtype.to_real())
    if dtype == torch.bool or (not dtype.is_floating_point and dtype.itemsize == 1):
        # One-byte integers (packed fp4, quantized codes) hit 0x7F/0xFF once in 128 random values: too
        # common to call poison. Their stale or unwritten values still show as mismatches.
        return ()
    values: set[float | int] = set()
    for byte in (0xFF, 0x7F):
        raw = torch.full((dtype.itemsize,), byte, dtype=torch.uint8).view(dtype)
        value = raw.item()
        if isinstance(value, float) and not math.isfinite(value):
            continue
        values.add(value)
    if not dtype.is_floating_point and not dtype.is_complex:
        values.add(torch.iinfo(dtype).max)
    return tuple(sorted(values))


@dataclass
class Comparison:
    """The record of comparing one output with its reference (never a bare bool)."""

    error: float  # max|out-ref| / (max|ref| + eps); inf when any non-finite/poison element was found
    threshold: float  # 0.0 = bit-exact
    nonfinite: int  # NaN/Inf in out where ref is finite
    poisoned: int  # poison bit patterns in out where ref is not that value
    mismatches: int  # elements that differ beyond the threshold's share (bit-exact: that differ at all)
    first_indices: list[tuple[int, ...]] = field(default_factory=list)
    shape_ok: bool = True
    detail: str = ""

    @property
    def ok(self) -> bool:
        if not self.shape_ok or self.nonfinite or self.poisoned:
            return False
        if self.threshold == 0.0:
            return self.mismatches == 0
        return self.error <= self.threshold

    @property
    def uninitialized(self) -> bool:
        return bool(self.nonfinite or self.poisoned)


def compare(out: torch.Tensor, ref: torch.Tensor, threshold: float) -> Comparison:
    """Compare `out` with `ref`; threshold 0.0 demands bitwise equality."""
    return compare_many([(out, ref, threshold)])[0]


def compare_many(pairs: Sequence[tuple[torch.Tensor, torch.Tensor, float]]) -> list[Comparison]:
    """`compare` of each (out, ref, threshold), all clean passes read with one host synchronization: the
    protocol compares a replay's outputs with eager, the reference and the fresh probe at once."""
    return compare_and_differ(pairs, ())[0]


def compare_and_differ(
    pairs: Sequence[tuple[torch.Tensor, torch.Tensor, float]],
    byte_pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[list[Comparison], list[bool]]:
    """`compare_many(pairs)`, and whether any byte differs in each of `byte_pairs` (graphsafe.scan
    bytes_differ_many), with one host synchronization for both."""
    results: dict[int, Comparison] = {}
    scans: list[tuple[int, torch.Tensor, torch.Tensor, float]] = []
    complex_parts: set[int] = set()
    for index, (out, ref, threshold) in enumerate(pairs):
        if out.shape != ref.shape or out.dtype != ref.dtype:
            results[index] = Comparison(
                error=math.inf,
                threshold=threshold,
                nonfinite=0,
                poisoned=0,
                mismatches=out.numel(),
                shape_ok=False,
                detail=f"shape/dtype {tuple(out.shape)}/{out.dtype} != reference {tuple(ref.shape)}/{ref.dtype}",
            )
            continue
        out_c, ref_c = out, ref
        if ref_c.device != out_c.device:  # a reference may come back on the host
            ref_c = ref_c.detach().to(out_c.device)
        if out_c.dtype.is_complex:
            # Real and imaginary parts as a trailing dimension of size 2: each part is checked for NaN and
            # poison like a float, and the error is normalised by the largest part of the reference.
            out_c = torch.view_as_real(out_c.detach().resolve_conj())
            ref_c = torch.view_as_real(ref_c.detach().resolve_conj())
            complex_parts.add(index)
        scans.append((index, out_c, ref_c, threshold))
    # One pass on the outputs' device with one host read when clean (harness/scan.py says why it is exact).
    found, differ = scan_and_differ([(o, r, th, poison_values(o.dtype)) for _, o, r, th in scans], byte_pairs)
    for (index, _, _, threshold), f in zip(scans, found, strict=True):
        indices = f.first_indices
        if index in complex_parts:
            indices = list(dict.fromkeys(i[:-1] for i in indices))
        results[index] = Comparison(
            error=f.error,
            threshold=threshold,
            nonfinite=f.nonfinite,
            poisoned=f.poisoned,
            mismatches=f.mismatches,
            first_indices=indices,
        )
    return [results[i] for i in range(len(pairs))], differ
