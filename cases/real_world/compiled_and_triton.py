"""Code that generates its own kernels: a hand-written Triton kernel and torch.compile'd functions.

- `compile_default_*`: torch.compile with inductor's default mode runs on both backends. On a GPU its Triton
  kernels are launched on the capturing stream and land in the graph; on the CPU backend the function
  really compiles (inductor's C++ kernels) and each compiled graph is one node of the record
  (harness/backends/cpu.py). Expected `pass`.
- `compile_reduce_overhead_gpu`: mode="reduce-overhead" wraps the compiled graph in inductor's own CUDA graph
  trees, which record their graph on the second call after a torch.cuda.synchronize()
  (torch/_inductor/cudagraph_trees.py, _allocate_and_copy_recording_inputs). The harness's warm-up is the
  first call, its capture the second: the synchronize lands inside the harness's capture. Expected
  `capture_sync` (nesting a reduce-overhead function inside another graph is not supported; call it
  directly). GPU only (`requires=("gpu",)`, skipped with that reason elsewhere): on CPU tensors inductor
  builds no CUDA graph.
- `triton_*`: a Triton kernel launched with a grid fixed on the host (`pass`) and its negative control whose
  grid is sized by a host read of device data (`capture_sync`). GPU only (Triton targets CUDA and ROCm).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from graphsafe import Case, register

ROWS, COLS = 64, 128


def _matrices(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(ROWS, COLS, generator=g).to(device),
        "y": torch.randn(ROWS, COLS, generator=g).to(device),
    }


def _gelu_residual(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x) * 0.5 + y.softmax(dim=-1)


@functools.cache
def _compiled(mode: str) -> Callable[..., Any]:
    return torch.compile(_gelu_residual, mode=mode, dynamic=False)


def compile_default(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _compiled("default")(x, y)


def compile_reduce_overhead(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _compiled("reduce-overhead")(x, y)


@functools.cache
def _triton_scale_add() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def scale_add(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x * scale + y, mask=mask)

    return scale_add


BLOCK = 256


def triton_scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    _triton_scale_add()[(triton_cdiv(n, BLOCK),)](x, y, out, n, 0.5, BLOCK=BLOCK)
    return out


def triton_scale_add_host_sized(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Negative control: launches only as many blocks as there are positive x, counted on the host."""
    out = torch.zeros_like(x)
    n = int((x > 0).sum())  # a device-to-host read: illegal under capture
    _triton_scale_add()[(max(triton_cdiv(n, BLOCK), 1),)](x, y, out, x.numel(), 0.5, BLOCK=BLOCK)
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


register(
    Case(
        name="compile_default_gelu_softmax",
        make_inputs=_matrices,
        op=compile_default,
        note="expected pass: inductor's generated kernels read their inputs from the static buffers on every "
        "call (Triton on a GPU, C++ on the CPU backend, where the compiled graph is one recorded node)",
    )
)


register(
    Case(
        name="compile_reduce_overhead_gpu",
        make_inputs=_matrices,
        op=compile_reduce_overhead,
        expect="capture_sync",
        requires=("gpu",),
        note="expected capture_sync: cudagraph trees record their own CUDA graph on the second call after "
        "torch.cuda.synchronize() (torch/_inductor/cudagraph_trees.py, _allocate_and_copy_recording_inputs), "
        "which is the harness's capture",
    )
)
register(
    Case(
        name="triton_scale_add",
        make_inputs=_matrices,
        op=triton_scale_add,
        requires=("gpu", "import:triton"),
        note="expected pass: the grid comes from the tensor's shape (host metadata); the kernel reads x and y "
        "from the static buffers and writes every element of out",
    )
)
register(
    Case(
        name="triton_scale_add_host_sized_grid",
        make_inputs=_matrices,
        op=triton_scale_add_host_sized,
        expect="capture_sync",
        requires=("gpu", "import:triton"),
        note="expected capture_sync: int((x > 0).sum()) copies a device value to the host to size the grid",
    )
)
