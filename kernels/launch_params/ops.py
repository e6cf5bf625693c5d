"""Launchers over launch_params.hip, a host plan that feeds them, and the sampling op with frozen-seed form.

Role: the native side of the launch diff's controls (cases/launch_params.py) and of the frozen-sampler
counterexample (cases/counterexamples/sglang_omni_419_frozen_sampler_seed.py).

- `HostPlan` is an engine's host-side plan() (FlashInfer's, vLLM's attention metadata): before every call it
  reads the batch on the host (`n_valid`, the valid-row count) and writes what the kernels read on the device
  into buffers it owns, at fixed addresses, as a graph needs them. Its plain fields (`n_valid`, `work_items`,
  `needs_fixup`, `position`) are the same facts as host values: a launcher that takes one of those as a
  kernel argument, a grid or a decision to launch freezes it into a captured graph.
- The launchers take raw pointers and the current stream; GPU only (the cases declare `requires=("gpu",)`).
- `sample_rows` is a torch custom op on CPU and CUDA: inverse-CDF sampling with uniforms from a tensor, or,
  without one, from Philox4x32-10 keyed on plain (seed, offset) arguments. `HostPhilox.advance` is FlashInfer's
  get_seed_and_offset (flashinfer/sampling.py): read the generator's (seed, offset) on the host and advance the
  offset by the draws the call makes, rounded up to 4.
"""

from __future__ import annotations

import pathlib
import threading
import types
from dataclasses import dataclass, field

import torch

from graphsafe.kernels.common import native

FAMILY_DIR = pathlib.Path(__file__).resolve().parent
native.declare(FAMILY_DIR, "launch_params", "gpu")


def lib() -> types.ModuleType:
    """Build (cached by content) and import launch_params.hip for the visible device."""
    return native.load(FAMILY_DIR, "launch_params", "gpu")


def rows_per_block() -> int:
    """Rows one block of scale_valid_rows handles (launch_params.h kRowsPerBlock)."""
    return int(lib().ROWS_PER_BLOCK)


def _stream() -> int:
    return int(torch.cuda.current_stream().cuda_stream)


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else int(t.data_ptr())


def _check(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dtype != dtype or not t.is_contiguous() or t.device.type != "cuda":
        raise TypeError(
            f"{name}: expected a contiguous {dtype} cuda tensor, got {t.dtype}, "
            f"contiguous={t.is_contiguous()}, device={t.device}"
        )


# ------------------------------------------------------------------------------------------- host plan


@dataclass
class HostPlan:
    """A host-side plan of the next call (module note). `plan(inputs)` is a case's `prepare` hook."""

    capacity: int  # rows of the batch buffers
    fixup_from: int  # a batch of at least this many valid rows needs the fix-up pass
    n_valid: int = 0
    position: int = 0  # where kv_append writes: the last valid row
    work_items: int = 0
    needs_fixup: bool = False
    # Device copies at fixed addresses, written in place by every plan().
    device: dict[str, torch.Tensor] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def plan(self, inputs: dict[str, torch.Tensor]) -> None:
        n = int(inputs["n_valid"].reshape(-1)[0].item())  # the host read a plan() makes: outside capture
        if not 0 < n <= self.capacity:
            raise ValueError(f"n_valid must be in 1..{self.capacity}, got {n}")
        rows = list(range(n - 1, -1, -1))  # the work list: valid rows, last first
        self.n_valid, self.position, self.work_items = n, n - 1, len(rows)
        self.needs_fixup = n >= self.fixup_from
        table = rows + [0] * (self.capacity - n)
        values = {
            "rows": table,
            "count": [len(rows)],
            "position": [n - 1],
            "needs_fixup": [int(self.needs_fixup)],
        }
        device = inputs["n_valid"].device
        with self.lock, torch.no_grad():
            for name, value in values.items():
                host = torch.tensor(value, dtype=torch.int32)
                kept = self.device.get(name)
                if kept is None or kept.device != device:
                    # Made outside any capture (a plan runs before the first call) and kept for the process:
                    # a captured graph reads these addresses on every replay.
                    kept = self.device[name] = host.to(device)
                else:
                    kept.copy_(host)


# ------------------------------------------------------------------------------------------ launchers


def kv_append(
    cache: torch.Tensor, new_row: torch.Tensor, *, pos: int, pos_dev: torch.Tensor | None
) -> torch.Tensor:
    """out = cache with row `pos` replaced by new_row; with `pos_dev` the position is read on the device."""
    _check("kv_append", cache, torch.float32)
    _check("kv_append", new_row, torch.float32)
    out = torch.empty_like(cache)
    rows, dim = cache.shape
    lib().kv_append(_ptr(cache), _ptr(new_row), _ptr(out), rows, dim, pos, _ptr(pos_dev), _stream())
    return out


def scale_valid_rows(x: torch.Tensor, n_valid_dev: torch.Tensor, *, grid: int) -> torch.Tensor:
    """out[r] = 2 x[r] for the valid rows (count read on the device), 0 elsewhere; `grid` blocks of
    rows_per_block() rows each, so only the first grid * rows_per_block() rows can be written."""
    _check("scale_valid_rows", x, torch.float32)
    out = torch.zeros_like(x)
    lib().scale_valid_rows(_ptr(x), _ptr(out), x.shape[1], _ptr(n_valid_dev), grid, _stream())
    return out


def run_plan(
    x: torch.Tensor, plan_rows: torch.Tensor, *, work_items: int, work_items_dev: torch.Tensor | None
) -> torch.Tensor:
    """out[r] = 3 x[r] for the rows the plan's work list names, 0 elsewhere; the list's length is
    `work_items`, or read on the device from `work_items_dev`. One block per possible item."""
    _check("run_plan", x, torch.float32)
    out = torch.zeros_like(x)
    lib().run_plan(
        _ptr(x),
        _ptr(out),
        x.shape[1],
        _ptr(plan_rows),
        work_items,
        _ptr(work_items_dev),
        x.shape[0],
        _stream(),
    )
    return out


def apply_fixup(out: torch.Tensor, *, needed_dev: torch.Tensor | None) -> None:
    """out += 1 in place, unless `needed_dev` holds 0 (read on the device)."""
    _check("apply_fixup", out, torch.float32)
    lib().apply_fixup(_ptr(out), out.shape[0], out.shape[1], _ptr(needed_dev), _stream())


# ------------------------------------------------------------------------------------------- sampling

_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF


def philox_uniform(seed: int, offset: int, row: int) -> float:
    """The uniform sample_rows draws for (seed, offset, row) without a uniforms tensor: Philox4x32-10 with
    counter (offset, row) and key seed, the first word's top 24 bits over 2^24 (launch_params.hip)."""
    c = [offset & _MASK, (offset >> 32) & _MASK, row & _MASK, 0]
    k = [seed & _MASK, (seed >> 32) & _MASK]
    for _ in range(10):
        p0, p1 = _M0 * c[0], _M1 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & _MASK, p1 & _MASK, ((p0 >> 32) ^ c[3] ^ k[1]) & _MASK, p0 & _MASK]
        k = [(k[0] + _W0) & _MASK, (k[1] + _W1) & _MASK]
    return (c[0] >> 8) / 16777216.0


@dataclass
class HostPhilox:
    """A sampler's generator state read and advanced on the host, as flashinfer's get_seed_and_offset does
    with the torch generator (`state = generator.get_state(); offset += (increment + 3) // 4 * 4`). The state
    lives here rather than in a torch generator because current torch refuses some generator reads under
    capture; what matters is the same: two plain integers computed on the host at call time."""

    seed: int
    offset: int

    def advance(self, increment: int) -> tuple[int, int]:
        self.offset += (increment + 3) // 4 * 4
        return self.seed, self.offset


@torch.library.custom_op("graphsafe_launch_params::sample_rows", mutates_args=())
def sample_rows(probs: torch.Tensor, uniforms: torch.Tensor | None, seed: int, offset: int) -> torch.Tensor:
    """One token per row of `probs` (rows, vocab; need not be normalized) by inverse CDF: the first token whose
    running mass exceeds u times the row's mass, u from `uniforms` or, when it is None, philox_uniform(seed,
    offset, row)."""
    raise NotImplementedError("sample_rows has CPU and CUDA kernels only")  # registered below


@sample_rows.register_kernel("cpu")
def _sample_rows_cpu(
    probs: torch.Tensor, uniforms: torch.Tensor | None, seed: int, offset: int
) -> torch.Tensor:
    rows = probs.shape[0]
    if uniforms is None:
        u = torch.tensor([philox_uniform(seed, offset, r) for r in range(rows)], dtype=torch.float32)
    else:
        u = uniforms.to(torch.float32)
    cum = torch.cumsum(probs.to(torch.float32), dim=-1)
    target = (u * cum[:, -1]).unsqueeze(-1)
    positive = probs > 0
    past = (cum > target) & positive
    first = torch.where(past.any(-1), past.to(torch.int8).argmax(-1), -1)
    # As the kernel: rounding can leave u past the row's mass; then the last token with mass.
    last = positive.shape[-1] - 1 - positive.flip(-1).to(torch.int8).argmax(-1)
    return torch.where(first >= 0, first, last).to(torch.int64)


@sample_rows.register_kernel("cuda")
def _sample_rows_cuda(
    probs: torch.Tensor, uniforms: torch.Tensor | None, seed: int, offset: int
) -> torch.Tensor:
    _check("sample_rows", probs, torch.float32)
    if uniforms is not None:
        _check("sample_rows", uniforms, torch.float32)
    out = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    lib().sample_rows(
        _ptr(probs), _ptr(out), probs.shape[0], probs.shape[1], _ptr(uniforms), seed, offset, _stream()
    )
    return out


@sample_rows.register_fake
def _sample_rows_fake(
    probs: torch.Tensor, uniforms: torch.Tensor | None, seed: int, offset: int
) -> torch.Tensor:
    return probs.new_empty(probs.shape[0], dtype=torch.int64)


__all__ = [
    "HostPhilox",
    "HostPlan",
    "apply_fixup",
    "kv_append",
    "lib",
    "philox_uniform",
    "rows_per_block",
    "run_plan",
    "sample_rows",
    "scale_valid_rows",
]
