"""The comparison pass behind `graphsafe.compare.compare`: one scan of an output against its reference.

Role: make the cheap case cheap. A clean comparison (the outputs agree, nothing non-finite, no poison) is a
few reductions over the data on the tensors' own device, stacked into one small tensor and read with ONE
host synchronization; only a comparison that is not clean pays for an exact second pass that counts NaN/Inf,
poison values and mismatches one by one and finds the first mismatching indices.

Why the clean pass is exact, not a shortcut (the rules are `compare`'s, module note of harness/compare.py):
- float outputs with a threshold: d = max|out - ref| and m = max|ref|. Both reductions propagate NaN and
  Inf, so finite d and m mean every element of out and ref is finite (inf - x is inf, NaN - x is NaN; an
  overflow of out - ref gives inf too and goes to the exact pass). Then error = d / (m + eps), exactly
  compare's formula; no element exceeds the threshold's share when d does not; and no element of out can be
  a poison value when |out| <= m + d stays below the smallest poison magnitude of the dtype.
- everything else (integers, booleans, bit-exact floats): equal bit patterns leave nothing to count.

The arithmetic is float32 for 8-, 16- and 32-bit floats (float64 for float64): out - ref rounds to 2^-24 of
the difference, three orders below the tightest default threshold (float32, 1e-5), and it keeps the pass at
the inputs' own width instead of doubling the bytes moved.

The clean pass of float32, float16 and bfloat16 outputs and the bit comparison are one native pass that
computes the same two maxima and a non-finite flag: on a GPU one kernel launch for a whole batch of them
and one stream synchronization (harness/native/scan.hip; `scan_and_differ`: a replay's comparisons with
eager, the reference and the fresh probe, and its input checks), on the CPU one loop over the data (harness/native/
scan_host.cpp, all cores for more than one chunk of 2^20 elements). Other dtypes, non-contiguous views, and
machines where the library cannot be built take the torch path below, which gives the same answer.

The torch path and the exact pass run unpoisoned: on the cpu backend every allocation inside a check can be
filled with a byte pattern by a Python dispatch mode (harness/poison.py), which costs one fill and one
Python call per temporary; their temporaries are the harness's own, never the op's, so the modes and torch's
fill_uninitialized_memory are switched off for their duration. The native passes allocate no tensor and make
no dispatcher call, so they need no such switch. On the CPU the torch path's data go through in chunks that
fit the L2 cache (a temporary per chunk instead of one per tensor): the comparison then reads each input once
from memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from graphsafe.native import gpu_library, host_library

DENOMINATOR_EPS = 1e-6
MAX_REPORTED_INDICES = 5
# Elements per chunk on the CPU: 2^16 float32 values are 256 KiB per input and per temporary, so a chunk's
# three tensors stay in L2: on a 2-core Xeon (one thread, 64 MiB float32) larger chunks were slower, and
# whole tensors slowest.
CPU_CHUNK_ELEMENTS = 1 << 16


@dataclass
class Scan:
    """What one comparison found; graphsafe.compare turns it into a Comparison."""

    error: float
    nonfinite: int
    poisoned: int
    mismatches: int
    first_indices: list[tuple[int, ...]] = field(default_factory=list)
    host_syncs: int = 1  # device-to-host reads the scan made (1 when clean)


@contextlib.contextmanager
def unpoisoned() -> Iterator[None]:
    """No dispatch modes and no fill of uninitialized memory for the harness's own temporaries."""
    previous_fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        with _disable_current_modes(), torch.no_grad():
            yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = previous_fill  # type: ignore[attr-defined]


def scan(
    out: torch.Tensor, ref: torch.Tensor, threshold: float, poison: tuple[float | int, ...] = ()
) -> Scan:
    """Compare `out` with `ref` (same shape and real dtype); threshold 0.0 demands equal bits.

    `poison`: the finite values an unwritten element of this dtype holds (graphsafe.compare.poison_values).
    """
    return scan_many([(out, ref, threshold, poison)])[0]


def scan_many(
    items: Sequence[tuple[torch.Tensor, torch.Tensor, float, tuple[float | int, ...]]],
) -> list[Scan]:
    """`scan` of each (out, ref, threshold, poison), with the clean passes of all of them launched together
    and read with one host synchronization per device: a replay's comparisons cost one wait, not one each."""
    return scan_and_differ(items, ())[0]


def bytes_differ_many(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[bool]:
    """For each (a, b) of the same shape and dtype: whether any byte differs. One batch (one host
    synchronization on a GPU); unlike `scan` there is no exact pass to count and place a difference, so
    pairs that are meant to differ (A and B inputs) cost no more than pairs that are meant to agree."""
    return scan_and_differ((), pairs)[1]


def scan_and_differ(
    items: Sequence[tuple[torch.Tensor, torch.Tensor, float, tuple[float | int, ...]]],
    byte_pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[list[Scan], list[bool]]:
    """`scan_many(items)` and `bytes_differ_many(byte_pairs)` in one native batch: a replay's comparisons and
    its check that no undeclared input changed share one host synchronization."""
    for a, b in byte_pairs:
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(
                f"bytes_differ_many needs equal shapes and dtypes, got {a.shape}/{a.dtype} "
                f"and {b.shape}/{b.dtype}"
            )
    results: dict[int, Scan] = {}
    batch = _NativeBatch()
    planned = []
    # The native passes allocate no tensor, so they run as they are; only the torch path and the exact pass
    # make temporaries, and those run unpoisoned (module note).
    for index, (out, ref, threshold, poison) in enumerate(items):
        if out.numel() == 0:
            results[index] = Scan(error=0.0, nonfinite=0, poisoned=0, mismatches=0, host_syncs=0)
            continue
        within = out.dtype.is_floating_point and threshold > 0.0
        key = batch.floats(out, ref) if within else batch.bytes_differ(out, ref)
        planned.append((index, out, ref, threshold, poison, within, key))
    # A contiguous pair goes to the native pass as it is (pointers and a byte count); any other pair takes
    # torch's comparison of flat byte copies below.
    byte_planned = [(a, b, batch.bytes_differ(a, b) if a.numel() else None) for a, b in byte_pairs]
    native = batch.run()
    undecided = []
    for index, out, ref, threshold, poison, within, key in planned:
        answer = native.get(key) if key is not None else None
        found = None
        if answer is not None:  # the native pass's numbers decide a clean comparison without a tensor
            found = (
                _clean_within_threshold(out, ref, threshold, poison, answer)
                if within
                else _clean_bit_equal(out, ref, answer)
            )
        if found is None:
            undecided.append((index, out, ref, threshold, poison, within, answer))
        else:
            results[index] = found
    torch_path = bool(undecided) or any(key is None for _, _, key in byte_planned)
    with unpoisoned() if torch_path else contextlib.nullcontext():
        for index, out, ref, threshold, poison, within, answer in undecided:
            out, ref = out.detach(), ref.detach()
            clean = None
            if answer is None:  # no native pass for this pair: torch's clean pass first
                clean = (
                    _clean_within_threshold(out, ref, threshold, poison)
                    if within
                    else _clean_bit_equal(out, ref)
                )
            if clean is None:
                clean = _exact(out, ref, threshold, poison)
                clean.host_syncs += 1
            results[index] = clean
        differ = [
            bool(native[key])
            if key is not None
            else bool(a.numel()) and not torch.equal(_flat_bytes(a), _flat_bytes(b))
            for a, b, key in byte_planned
        ]
    return [results[i] for i in range(len(items))], differ  # every item has its Scan: a KeyError is a bug


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's values as a flat byte array (a copy for a non-contiguous view)."""
    return t.detach().reshape(-1).view(torch.uint8)


def count_unwritten(out: torch.Tensor, poison: tuple[float | int, ...]) -> tuple[int, int]:
    """(NaN/Inf count, poison-value count) of a float output, with one host read when there are none."""
    if out.numel() == 0 or not out.dtype.is_floating_point:
        return 0, 0
    with unpoisoned():
        flat = out.detach().reshape(-1)
        peak = _max_abs(flat, _compute_dtype(flat.dtype))
        if math.isfinite(peak) and peak < _smallest_poison(poison):
            return 0, 0
        nonfinite = int((~torch.isfinite(flat)).sum())
        poisoned = 0
        for value in poison:
            poisoned += int((flat == value).sum())
        return nonfinite, poisoned


# ----------------------------------------------------------------------------------------- clean pass


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


@functools.cache
def _smallest_poison(poison: tuple[float | int, ...]) -> float:
    return min((abs(float(p)) for p in poison), default=math.inf)


def _chunks(n: int, device: torch.device) -> list[tuple[int, int]]:
    if device.type != "cpu":
        return [(0, n)]  # one launch per reduction; a GPU reads at bandwidth without chunking
    return [(start, min(n, start + CPU_CHUNK_ELEMENTS)) for start in range(0, n, CPU_CHUNK_ELEMENTS)]


def _extremes(t: torch.Tensor) -> torch.Tensor:
    """[min, max] of a chunk. aminmax is one pass and propagates NaN; on the CPU it is several times faster than
    vector_norm(ord=inf) (16M float32 on one core: 38 ms against 315 ms, reports/performance.md)."""
    low, high = torch.aminmax(t)
    return torch.stack([low, high])


def _max_abs_of(extremes: torch.Tensor) -> torch.Tensor:
    """max|x| from stacked [min, max] rows (NaN stays NaN: amax propagates it)."""
    return torch.stack([-extremes[..., 0], extremes[..., 1]], dim=-1).amax(dim=-1)


def _max_abs(flat: torch.Tensor, dtype: torch.dtype) -> float:
    batch = _NativeBatch()
    key = batch.floats(flat, None)
    native = batch.run().get(key) if key is not None else None
    if native is not None:
        peak, _, nonfinite = native
        return math.inf if nonfinite else peak
    parts = [_extremes(flat[a:b].to(dtype)) for a, b in _chunks(flat.numel(), flat.device)]
    return abs(float(_max_abs_of(torch.stack(parts)).amax()))


def _clean_within_threshold(
    out: torch.Tensor,
    ref: torch.Tensor,
    threshold: float,
    poison: tuple[float | int, ...],
    native: Any = None,
) -> Scan | None:
    """`native`: the native pass's (max|out - ref|, max|ref|, non-finite) for this pair, None where it did not
    apply (then torch's reductions compute the same two maxima)."""
    if native is not None:
        max_diff, max_ref, nonfinite = native
        if nonfinite:
            return None
        return _clean_verdict(max_diff, max_ref, threshold, poison)
    dtype = _compute_dtype(out.dtype)
    o, r = out.reshape(-1), ref.reshape(-1)
    partial = []
    for a, b in _chunks(o.numel(), o.device):
        rc = r[a:b].to(dtype)
        partial.append(torch.stack([_extremes(torch.sub(o[a:b].to(dtype), rc)), _extremes(rc)]))
    # One row per chunk of [[min diff, max diff], [min ref, max ref]] -> [max|diff|, max|ref|].
    stats = _max_abs_of(torch.stack(partial)).amax(dim=0)
    # abs(): max(-min, max) of an all-zero chunk is -0.0, which would print as an error of "-0".
    max_diff, max_ref = (abs(v) for v in stats.tolist())  # the one host read of a clean comparison
    if not (math.isfinite(max_diff) and math.isfinite(max_ref)):
        return None
    return _clean_verdict(max_diff, max_ref, threshold, poison)


def _clean_verdict(
    max_diff: float, max_ref: float, threshold: float, poison: tuple[float | int, ...]
) -> Scan | None:
    """The clean Scan from finite max|out - ref| and max|ref|, or None when the exact pass must decide."""
    bound = threshold * (max_ref + DENOMINATOR_EPS)
    # |out| <= |ref| + |out - ref|; the factor covers the float32 rounding of out - ref (2^-24).
    if max_diff > bound or (max_ref + max_diff) * (1 + 1e-6) >= _smallest_poison(poison):
        return None
    return Scan(error=max_diff / (max_ref + DENOMINATOR_EPS), nonfinite=0, poisoned=0, mismatches=0)


def _clean_bit_equal(out: torch.Tensor, ref: torch.Tensor, differ: Any = None) -> Scan | None:
    """`differ`: the native pass's answer for this pair, None where it did not apply."""
    if differ is not None:
        return None if differ else Scan(error=0.0, nonfinite=0, poisoned=0, mismatches=0)
    # torch.equal is one reduction and one host read; on bit views NaN equals the same NaN.
    if torch.equal(_bits(out), _bits(ref)):
        return Scan(error=0.0, nonfinite=0, poisoned=0, mismatches=0)
    return None


# ---------------------------------------------------------------------- native passes (GPU and CPU)

_NATIVE_FLOAT_KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # scan.hip's `kind`


def _native_library(out: torch.Tensor, ref: torch.Tensor | None = None) -> Any:
    """The loaded native library for the tensors' device (scan.hip on a GPU, scan_host.cpp on the CPU) when
    both are contiguous arrays on that one device, else None. Asked once per comparison, so it reads the
    tensors' flags (`is_cuda`, `is_cpu`) rather than `device.type`, which costs several times as much
    (0.45-0.72 us against 0.08-0.1 us on the 2-core build box, torch 2.13: reports/performance.md)."""
    if not out.is_contiguous():
        return None
    if ref is not None and (not ref.is_contiguous() or ref.device != out.device):
        return None
    if out.is_cuda:
        return gpu_library().get("lib")
    if out.is_cpu:
        return host_library().get("lib")
    return None


def comparison_pass(t: torch.Tensor) -> str:
    """Which pass compares contiguous float32 tensors on t's device: the native library, or torch's and why
    (for reports and benchmarks)."""
    if _native_library(t) is not None:
        return "native (harness/native/" + ("scan.hip)" if t.device.type == "cuda" else "scan_host.cpp)")
    loaded = gpu_library() if t.device.type == "cuda" else host_library()
    return f"torch ({loaded.get('error', 'no native pass for this device or this tensor')})"


# torch._C._cuda_getCurrentRawStream(index) is the one C call Triton and Inductor use for the current stream's
# runtime handle; torch.cuda.current_stream builds a Stream object first (about 10 us a call on the H200,
# reports/performance.md). Looked up once.
_CURRENT_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream_of(index: int) -> int:
    """Device `index`'s current stream as a runtime handle."""
    if _CURRENT_RAW_STREAM is not None:
        return int(_CURRENT_RAW_STREAM(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def _raw_stream(device: torch.device) -> int:
    """The device's current stream as a runtime handle."""
    return _raw_stream_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _records_type(words: int) -> Any:
    """The ctypes array type of `words` record words (a type is built once per size, not per batch)."""
    return ctypes.c_uint * words


class _NativeBatch:
    """Native clean passes queued, then run together: on a GPU the batch is one kernel launch (32 passes per
    launch), each pass into its own result slot (harness/native/scan.hip), and one stream synchronization
    reads them all; on the CPU each runs in turn
    (scan_host.cpp is synchronous). `floats`/`bytes_differ` return a key, or None where the native pass does not
    apply (dtype, layout, alignment, no library): the caller then takes the torch path."""

    _LOCK = threading.Lock()  # slots are per device and process: one batch uses them at a time

    def __init__(self) -> None:
        # (what, lib, args, device index: -1 for the CPU, else the GPU's)
        self._queued: list[tuple[str, Any, tuple[Any, ...], int]] = []

    def floats(self, out: torch.Tensor, ref: torch.Tensor | None) -> int | None:
        """(max|out - ref|, max|ref|, any non-finite) for float32/float16/bfloat16 (ref None: max|out|)."""
        kind = _NATIVE_FLOAT_KINDS.get(out.dtype)
        if kind is None or (ref is not None and ref.dtype != out.dtype):
            return None
        lib = _native_library(out, ref)
        if lib is None:
            return None
        ref_ptr = None if ref is None else ref.data_ptr()
        return self._queue("floats", lib, (out.data_ptr(), ref_ptr, out.numel(), kind), out)

    def bytes_differ(self, out: torch.Tensor, ref: torch.Tensor) -> int | None:
        """Whether any byte of out and ref differs."""
        lib = _native_library(out, ref)
        if lib is None:
            return None
        if out.is_cuda and (out.data_ptr() | ref.data_ptr()) % 16:  # scan.hip reads 16-byte words
            return None
        nbytes = out.numel() * out.element_size()
        return self._queue("bytes", lib, (out.data_ptr(), ref.data_ptr(), nbytes), out)

    def _queue(self, what: str, lib: Any, args: tuple[Any, ...], out: torch.Tensor) -> int:
        self._queued.append((what, lib, args, out.get_device() if out.is_cuda else -1))
        return len(self._queued) - 1

    def run(self) -> dict[int, Any]:
        """Each key's result: a (max_diff, max_ref, nonfinite) tuple for `floats`, a bool for `bytes_differ`."""
        results: dict[int, Any] = {}
        on_gpu: dict[int, list[int]] = {}
        for key, (what, lib, args, index) in enumerate(self._queued):
            if index < 0:
                results[key] = _run_host(what, lib, args)
            else:
                on_gpu.setdefault(index, []).append(key)
        for index, keys in on_gpu.items():
            lib = self._queued[keys[0]][1]
            slots = _gpu_slots(lib)
            for start in range(0, len(keys), slots):
                chunk = keys[start : start + slots]
                records = self._run_gpu(index, lib, [self._queued[k] for k in chunk])
                for key, record in zip(chunk, records, strict=True):
                    results[key] = record
        self._queued = []
        return results

    @classmethod
    def _run_gpu(cls, index: int, lib: Any, queued: list[tuple[str, Any, tuple[Any, ...], int]]) -> list[Any]:
        count = len(queued)
        # The batch as scan.hip's jobs, 4 words each: a, b (0: none), n, kind (0-2 a float scan, 3 bytes).
        words: list[int] = []
        for what, _, args, _ in queued:
            words += (args[0], args[1] or 0, args[2], args[3] if what == "floats" else 3)
        jobs = struct.pack(f"<{4 * count}q", *words)
        records = _records_type(4 * count)()
        # torch._C._cuda_getDevice is what torch.cuda.current_device returns, without its Python.
        switch = torch._C._cuda_getDevice() != index
        with torch.cuda.device(index) if switch else contextlib.nullcontext(), cls._LOCK:
            code = lib.graphsafe_scan_run(count, jobs, _raw_stream_of(index), records)
        if code:
            _raise_runtime_error("graphsafe_scan_run", code)
        # Words 0 and 1 of a float scan are the bits of the maxima of non-negative floats (fabsf in the kernel).
        as_floats = struct.unpack_from(f"<{4 * count}f", records)
        return [
            (as_floats[4 * j], as_floats[4 * j + 1], bool(records[4 * j + 2]))
            if what == "floats"
            else bool(records[4 * j])
            for j, (what, _, _, _) in enumerate(queued)
        ]


@functools.cache
def _gpu_slots(lib: Any) -> int:
    """Comparisons one graphsafe_scan_run takes (asked once per library)."""
    return int(lib.graphsafe_scan_slots())


def _raise_runtime_error(call: str, code: int) -> None:
    """A failed launch or wait: a sticky device fault (an illegal address in the op, whose eager call the
    protocol does not wait for on its own) is raised as torch raises it (AcceleratorError), so that the
    protocol names it a device fault; anything else as a RuntimeError with the runtime's code."""
    torch.cuda.synchronize()
    raise RuntimeError(f"{call} failed with GPU runtime error {code}")


def _run_host(what: str, lib: Any, args: tuple[Any, ...]) -> Any:
    if what == "floats":
        result = (ctypes.c_float * 3)()
        code = lib.graphsafe_scan_floats_host(*args, result)
        if code:
            raise RuntimeError(f"graphsafe_scan_floats_host refused its arguments ({code})")
        return float(result[0]), float(result[1]), bool(result[2])
    differ = ctypes.c_int(0)
    code = lib.graphsafe_scan_bytes_differ_host(*args, ctypes.byref(differ))
    if code:
        raise RuntimeError(f"graphsafe_scan_bytes_differ_host refused its arguments ({code})")
    return bool(differ.value)


@functools.cache
def _int_view(dtype: torch.dtype) -> torch.dtype:
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == _int_view(t.dtype) else t.view(_int_view(t.dtype))


# ----------------------------------------------------------------------------------------- exact pass


def _exact(out: torch.Tensor, ref: torch.Tensor, threshold: float, poison: tuple[float | int, ...]) -> Scan:
    """Element by element: NaN/Inf where ref is finite, poison values where ref is not that value, the
    mismatches and where they are. Runs only when the clean pass could not decide."""
    bits_out, bits_ref = _bits(out), _bits(ref)
    if out.dtype.is_floating_point and out.dtype.itemsize == 1:
        # torch implements neither isfinite nor == for the fp8 dtypes; float32 holds each fp8 value exactly.
        out, ref = out.float(), ref.float()
    if out.dtype.is_floating_point:
        nonfinite_mask = ~torch.isfinite(out) & torch.isfinite(ref)
    else:
        nonfinite_mask = torch.zeros(out.shape, dtype=torch.bool, device=out.device)
    poison_mask = torch.zeros(out.shape, dtype=torch.bool, device=out.device)
    for value in poison:
        poison_mask |= (out == value) & (ref != value)
    poison_mask &= ~nonfinite_mask
    bad = nonfinite_mask | poison_mask

    if out.dtype.is_floating_point:
        out64, ref64 = out.double(), ref.double()
        ref_finite = torch.isfinite(ref64)
        both_finite = torch.isfinite(out64) & ref_finite
        diff = torch.where(both_finite, (out64 - ref64).abs(), torch.zeros_like(out64))
        # Non-finite in both at the same place with the same value (an op whose true result is inf) matches;
        # non-finite in ref only is a mismatch the error must show.
        same_nonfinite = ~both_finite & ((out64 == ref64) | (torch.isnan(out64) & torch.isnan(ref64)))
        ref_only = ~both_finite & ~same_nonfinite & ~bad
        denom_t = torch.where(ref_finite, ref64.abs(), torch.zeros_like(ref64)).amax()
        if threshold == 0.0:
            differs = (bits_out != bits_ref) | bad
        else:
            differs = (diff > threshold * (denom_t + DENOMINATOR_EPS)) | ref_only | bad
        summary = torch.stack(
            [
                diff.amax(),
                denom_t,
                (bad | ref_only).any().double(),
                nonfinite_mask.sum().double(),
                poison_mask.sum().double(),
                differs.sum().double(),
            ]
        ).tolist()
        max_diff, denom, infinite, nonfinite, poisoned, mismatches = summary
        error = math.inf if infinite else max_diff / (denom + DENOMINATOR_EPS)
    else:
        differs = out != ref
        summary = torch.stack(
            [
                differs.sum(),
                nonfinite_mask.sum(),
                poison_mask.sum(),
                bad.any().long(),
                (out.long() - ref.long()).abs().amax(),
                ref.long().abs().amax(),
            ]
        ).tolist()
        mismatches, nonfinite, poisoned, infinite, int_diff, int_ref = summary
        # Integers carry no magnitude semantics (ids, counts): report the normalised max difference.
        error = 0.0 if not mismatches else math.inf if infinite else int_diff / (int_ref + DENOMINATOR_EPS)
    indices: list[tuple[int, ...]] = []
    if mismatches:
        indices = [tuple(int(i) for i in idx) for idx in differs.nonzero()[:MAX_REPORTED_INDICES].tolist()]
    return Scan(
        error=float(error),
        nonfinite=int(nonfinite),
        poisoned=int(poisoned),
        mismatches=int(mismatches),
        first_indices=indices,
        host_syncs=2 if mismatches else 1,
    )
