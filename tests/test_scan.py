"""The comparison pass (harness/scan.py): the clean pass must say exactly what the exact pass says.

Method: differential. `_exact` counts element by element (NaN/Inf, poison, mismatches, indices); `scan` first
tries the clean pass with one host read. On outputs built to hit every rule (NaN, Inf of both signs, poison
values, -0.0, overflowing differences, differences on both sides of the threshold, values chunks apart),
`scan` and `_exact` must agree field by field. A clean pass that skipped a rule would disagree here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from graphsafe import scan as scan_module
from graphsafe.compare import compare, poison_values
from graphsafe.poison import BytePatternMode, deterministic_fill
from graphsafe.scan import CPU_CHUNK_ELEMENTS, _exact, count_unwritten, scan

FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.float8_e4m3fnuz)
SPECIALS = (float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 3.0e38, -3.0e38, 240.0, 1e-3)


def _poison_bits(dtype: torch.dtype, byte: int, n: int) -> torch.Tensor:
    return torch.full((n * dtype.itemsize,), byte, dtype=torch.uint8).view(dtype)


@st.composite
def _pairs(draw: Any) -> tuple[torch.Tensor, torch.Tensor, float]:
    dtype = draw(st.sampled_from(FLOATS))
    n = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    out = ref.clone()
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, n - 1))
        kind = draw(st.sampled_from(("special_out", "special_ref", "nudge", "poison", "same")))
        if kind == "special_out":
            out[i] = draw(st.sampled_from(SPECIALS))
        elif kind == "special_ref":
            ref[i] = draw(st.sampled_from(SPECIALS))
        elif kind == "nudge":
            out[i] = (out[i].double() * (1 + draw(st.sampled_from((1e-6, 1e-4, 1e-2, 0.5))))).to(dtype)
        elif kind == "poison":
            out[i] = _poison_bits(dtype, draw(st.sampled_from((0xFF, 0x7F))), 1)[0]
        else:
            value = draw(st.sampled_from(SPECIALS))
            out[i] = value
            ref[i] = value
    threshold = draw(st.sampled_from((0.0, 1e-5, 1e-3, 2e-2, 0.25)))
    return out, ref, threshold


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_pairs())
def test_clean_pass_agrees_with_exact_pass(pair: tuple[torch.Tensor, torch.Tensor, float]) -> None:
    out, ref, threshold = pair
    poison = poison_values(out.dtype)
    fast = scan(out, ref, threshold, poison)
    exact = _exact(out, ref, threshold, poison)
    assert (fast.nonfinite, fast.poisoned, fast.mismatches) == (
        exact.nonfinite,
        exact.poisoned,
        exact.mismatches,
    )
    assert fast.first_indices == exact.first_indices
    if math.isinf(exact.error):
        assert math.isinf(fast.error)
    else:
        # float32 arithmetic in the clean pass: the difference rounds to 2^-24 of itself.
        assert fast.error == pytest.approx(exact.error, rel=1e-6, abs=1e-30)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.int16])
def test_integers_clean_and_exact_agree(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    ref = torch.randint(0, 2 if dtype == torch.bool else 100, (50,), generator=g).to(dtype)
    assert scan(ref.clone(), ref, 0.0, poison_values(dtype)).mismatches == 0
    out = ref.clone()
    out[7] = 1 if dtype == torch.bool and not bool(ref[7]) else 0 if dtype == torch.bool else 101
    fast, exact = scan(out, ref, 0.0, poison_values(dtype)), _exact(out, ref, 0.0, poison_values(dtype))
    assert replace(fast, host_syncs=0) == replace(exact, host_syncs=0)
    assert fast.mismatches == 1 and fast.first_indices == [(7,)]


def test_clean_comparison_reads_the_host_once_and_skips_the_exact_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def exact_called(*args: Any) -> None:
        raise AssertionError("the exact pass ran on a clean comparison")

    monkeypatch.setattr(scan_module, "_exact", exact_called)
    ref = torch.randn(4096)
    assert scan(ref * (1 + 1e-7), ref, 1e-5, poison_values(ref.dtype)).host_syncs == 1
    assert scan(ref.clone(), ref, 0.0, poison_values(ref.dtype)).host_syncs == 1


@pytest.mark.parametrize("where", [0, CPU_CHUNK_ELEMENTS - 1, CPU_CHUNK_ELEMENTS, 3 * CPU_CHUNK_ELEMENTS + 5])
def test_one_bad_element_in_any_chunk_is_found(where: int) -> None:
    """Chunked on the CPU: a NaN, a poison value or a mismatch in any chunk decides the whole comparison."""
    ref = torch.randn(3 * CPU_CHUNK_ELEMENTS + 17, generator=torch.Generator().manual_seed(1))
    for value, field in ((float("nan"), "nonfinite"), (_poison_bits(torch.float32, 0x7F, 1)[0], "poisoned")):
        out = ref.clone()
        out[where] = value
        c = compare(out, ref, 1e-5)
        assert getattr(c, field) == 1 and not c.ok and c.first_indices == [(where,)]
    out = ref.clone()
    out[where] += 1.0
    c = compare(out, ref, 1e-5)
    assert c.mismatches == 1 and not c.ok and c.first_indices == [(where,)]


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_scan_runs_outside_the_poisoning_modes() -> None:
    """Under the cpu backend's byte-pattern mode every temporary would cost a Python call and a fill."""
    ref = torch.randn(1000)
    out = ref.clone()
    out[3] = float("nan")
    counter = _Count()
    with deterministic_fill(), BytePatternMode(0xFF), counter:
        clean = scan(ref.clone(), ref, 1e-5, poison_values(ref.dtype))
        dirty = scan(out, ref, 1e-5, poison_values(ref.dtype))
        assert torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    assert counter.calls == 1  # the clone of ref above; nothing from the scans
    assert clean.mismatches == 0 and dirty.nonfinite == 1


def test_count_unwritten() -> None:
    x = torch.randn(300)
    assert count_unwritten(x, poison_values(x.dtype)) == (0, 0)
    x[5] = float("inf")
    x[9] = _poison_bits(torch.float32, 0x7F, 1)[0]
    assert count_unwritten(x, poison_values(x.dtype)) == (1, 1)
    assert count_unwritten(torch.arange(5), poison_values(torch.int64)) == (0, 0)


# ---------------------------------------------------- native passes (scan.hip on a GPU, scan_host.cpp on CPU)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _pairs(dtype: torch.dtype, device: str) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Pairs where the clean pass must decide each way: equal, within and beyond a threshold, one NaN, one Inf,
    a poison value (in out, in ref, in both), an overflowing difference, sizes around the kernels' strides and the host's chunks."""
    g = torch.Generator().manual_seed(7)
    pairs = []
    for n in (1, 7, 4096, 4097, (1 << 20) + 3):
        ref = torch.randn(n, generator=g).to(dtype)
        pairs.append((f"equal{n}", ref.clone(), ref))
        pairs.append((f"near{n}", (ref.float() * 1.001).to(dtype), ref))
        pairs.append((f"far{n}", (ref.float() + 1).to(dtype), ref))
        finite_poison = [
            ("poison", p) for p in poison_values(dtype)[:1]
        ]  # float16 has none: both fills are NaN
        for name, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), *finite_poison):
            bad = ref.clone()
            bad[n // 2] = value
            pairs.append((f"{name}{n}", bad, ref))
            # The native pass infers every non-finite case from |out - ref| alone (scan.hip, kInfBits): a
            # non-finite value in the reference only, and the same one in both (inf - inf is NaN), too.
            pairs.append((f"ref_{name}{n}", ref, bad))
            pairs.append((f"both_{name}{n}", bad, bad.clone()))
    big = torch.full((33,), torch.finfo(dtype).max, dtype=dtype)
    pairs.append(("overflow", big, -big))
    return [(name, out.to(device), ref.to(device)) for name, out, ref in pairs]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("threshold", [0.0, 2e-2])
def test_native_pass_agrees_with_the_torch_pass(
    device: str, dtype: torch.dtype, threshold: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Method: the same pairs scanned with the native pass and with the torch path (native switched off) give
    identical Scans; views one element in (unaligned) and strided views (torch path) agree too."""
    from graphsafe.native import gpu_library, host_library

    loaded = gpu_library() if device == "cuda" else host_library()
    assert "lib" in loaded, loaded.get("error")
    poison = poison_values(dtype)
    pairs = _pairs(dtype, device)
    # Views one element in: not 16-byte aligned, so the GPU kernel's element-wise loop runs instead of its words.
    pairs += [(f"{name}_unaligned", out[1:], ref[1:]) for name, out, ref in pairs if out.numel() > 1]
    native = [scan(out, ref, threshold, poison) for _, out, ref in pairs]
    counts = [count_unwritten(out, poison) for _, out, _ in pairs]
    monkeypatch.setattr(scan_module, "_native_library", lambda *tensors: None)
    torch_path = [scan(out, ref, threshold, poison) for _, out, ref in pairs]
    assert [count_unwritten(out, poison) for _, out, _ in pairs] == counts
    for (name, _, _), a, b in zip(pairs, native, torch_path, strict=True):
        assert (a.error, a.nonfinite, a.poisoned, a.mismatches, a.first_indices) == (
            b.error,
            b.nonfinite,
            b.poisoned,
            b.mismatches,
            b.first_indices,
        ), name
    monkeypatch.undo()
    ref = torch.randn(4097, generator=torch.Generator().manual_seed(1)).to(dtype).to(device)
    out = ref.clone()
    out[4000] += 1
    found = scan(out[::2], ref[::2], threshold, poison)
    assert found.mismatches == 1 or (threshold and found.error > threshold)


@pytest.mark.parametrize("device", DEVICES)
def test_native_pass_reads_the_host_once_when_clean(device: str) -> None:
    ref = torch.randn(1 << 16, device=device)
    assert scan(ref.clone(), ref, 1e-5).host_syncs == 1
    assert scan(ref.clone(), ref, 0.0).host_syncs == 1


def test_host_native_pass_is_used_on_the_cpu() -> None:
    """The CPU's clean comparison goes through scan_host.cpp (not silently through the torch fallback)."""
    from graphsafe.native import host_library

    ref = torch.randn(100)
    assert scan_module._native_library(ref, ref) is host_library()["lib"]
    batch = scan_module._NativeBatch()
    key = batch.floats(ref, ref)
    assert batch.run()[key] == (0.0, float(ref.abs().max()), False)


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_of_scans_agrees_with_scans_one_at_a_time(device: str) -> None:
    """Method: every pair of `_pairs` (all three float dtypes, both thresholds, aligned and unaligned views)
    scanned in one `scan_many` call, and again past the GPU's slot count (the small pairs repeated), gives the
    Scan each gives alone: a slot that kept another comparison's maxima, or a result read before its kernel
    finished, would show as a difference."""
    items = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        pairs = _pairs(dtype, device)
        pairs += [(f"{name}_unaligned", out[1:], ref[1:]) for name, out, ref in pairs if out.numel() > 1]
        # Large pairs only where the clean pass decides (many blocks per kernel); the exact pass of a large
        # failing pair costs seconds on a CPU and tests nothing about batching.
        items += [
            (out, ref, th, poison_values(dtype))
            for name, out, ref in pairs
            for th in (0.0, 2e-2)
            if out.numel() <= 4097 or name.startswith("equal") or (name.startswith("near") and th > 0)
        ]
    alone = [scan(*item) for item in items]
    fields = [(s.error, s.nonfinite, s.poisoned, s.mismatches, s.first_indices) for s in alone]
    together = scan_module.scan_many(items)
    assert [(s.error, s.nonfinite, s.poisoned, s.mismatches, s.first_indices) for s in together] == fields
    # Past the slot count with the pairs the clean pass decides (the exact pass never touches a slot).
    small = [
        (item, f)
        for item, f, one in zip(items, fields, alone, strict=True)
        if item[0].numel() <= 7 and one.host_syncs == 1
    ]
    rounds = 1024 // len(small) + 1  # scan.hip has 1024 slots: the batch runs in more than one round
    repeated = scan_module.scan_many([item for item, _ in small] * rounds)
    assert len(repeated) > 1024
    got = [(s.error, s.nonfinite, s.poisoned, s.mismatches, s.first_indices) for s in repeated]
    assert got == [f for _, f in small] * rounds


@pytest.mark.parametrize("device", DEVICES)
def test_bytes_differ_many_agrees_with_torch_equal_on_bits(device: str) -> None:
    """Method: differential against torch.equal on byte views, for pairs that agree and pairs that differ in
    one byte (first, middle, last), in several dtypes, aligned and one element in (not 16-byte aligned),
    non-contiguous, empty; one call for all of them."""
    g = torch.Generator().manual_seed(3)
    pairs = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int64, torch.bool):
        for n in (1, 15, 16, 17, 4099):
            a = (torch.randn(n, generator=g) * 50).to(dtype).to(device)
            pairs.append((a, a.clone()))
            for at in {0, n // 2, n - 1}:
                b = a.clone()
                b.view(torch.uint8)[at * a.element_size()] ^= 1
                pairs.append((a, b))
            if n > 1:
                pairs.append((a[1:], a.clone()[1:]))
    m = torch.randn(64, 64, generator=g).to(device)
    pairs += [(m.t(), m.clone().t()), (m.t(), (m + 1).t()), (m[:0], m[:0].clone())]
    expected = [
        not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)) for a, b in pairs
    ]
    assert scan_module.bytes_differ_many(pairs) == expected
    assert any(expected) and not all(expected)


@pytest.mark.gpu
def test_run_refuses_a_batch_whose_comparison_never_ran() -> None:
    """Method: a run whose second comparison is invalid (0 elements) fails at its launch after the first one's
    slot was taken, so nothing runs; the run must fail, not hand back the record of the slot's last use as a
    result. Then a valid run through the same slot is read again."""
    import ctypes
    import struct

    from graphsafe.native import gpu_library

    lib = gpu_library()["lib"]
    x = torch.ones(16, device="cuda")
    stream = scan_module._raw_stream(x.device)

    def jobs(*sizes: int) -> bytes:
        words = [w for n in sizes for w in (x.data_ptr(), x.data_ptr(), n, 0)]
        return struct.pack(f"<{len(words)}q", *words)

    records = (ctypes.c_uint * 8)()
    with scan_module._NativeBatch._LOCK:  # slot 0 is the process's; no other batch may use it meanwhile
        assert lib.graphsafe_scan_run(2, jobs(16, 0), stream, records) != 0
        assert lib.graphsafe_scan_run(1, jobs(16), stream, records) == 0
    assert (records[0], records[2], records[3]) == (0, 0, 1)  # max|x - x| = 0, all finite, published
