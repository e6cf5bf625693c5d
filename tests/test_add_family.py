"""CONTRIBUTING.md's "Adding an op family" steps, followed for a tiny new family: a scaled copy, out = scale * x.

Method: the three files the steps ask for are written into a temporary folder that stands for the checkout's
kernels/ and cases/ (family folder ``my_kernels/scaled_copy/`` with ``scaled_copy.hip`` and ``ops.py``, case
file ``my_cases/scaled_copy.py``; namespace packages, so no ``__init__.py``). Then the family's CPU source
builds with g++ through graphsafe.kernels.common.native (the .hip's host branch: no separate .cpp), and
``graphsafe verify --backend cpu --case my_cases/scaled_copy.py`` runs its cases in a fresh process.
Expected: exactly 3 new files; the case passes; its negative control (the kernel writes only half of the
output, the rest stays as torch.empty left it) comes out ``uninitialized``, so the run can fail. With nvcc
present, the same .hip also compiles for sm_90 (slow: marked).
"""

from __future__ import annotations

import csv
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# Step 2 of CONTRIBUTING.md: the device kernel and its CPU twin in one source (the twin under GS_BACKEND_HOST).
KERNEL = r"""
// scaled_copy.hip -- out[i] = scale * x[i] (f32): the smallest op family.
#include "hip_compat.h"

#include <pybind11/pybind11.h>

#include "gs_checks.h"

GS_HD inline float gs_scaled(float x, float s) { return x * s; }

#if defined(GS_BACKEND_HOST)
static void scaled_copy_launch(const float* x, float* out, int64_t n, float s, uintptr_t) {
  for (int64_t i = 0; i < n; ++i) out[i] = gs_scaled(x[i], s);
}
#else
__global__ void scaled_copy_kernel(const float* x, float* out, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gs_scaled(x[i], s);
}
static void scaled_copy_launch(const float* x, float* out, int64_t n, float s, uintptr_t stream) {
  if (n == 0) return;
  hipLaunchKernelGGL(scaled_copy_kernel, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0,
                     reinterpret_cast<hipStream_t>(stream), x, out, n, s);
}
#endif

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  // written < n only for the negative control: the tail keeps whatever the allocator left there.
  m.def("scaled_copy", [](uintptr_t x, uintptr_t out, int64_t n, int64_t written, float s, uintptr_t stream) {
    gs_require(n >= 0 && written >= 0 && written <= n, "scaled_copy", "need 0 <= written <= n");
    gs_require_ptr("scaled_copy", "x", x, n);
    gs_require_ptr("scaled_copy", "out", out, n);
    scaled_copy_launch(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(out), written, s, stream);
  });
}
"""

# Step 3: the torch op over it (one custom op, its fake, its refusals) and the oracle.
OPS = '''
"""The scaled_copy family's torch op (graphsafe_example::scaled_copy) and its oracle."""

import pathlib

import torch

from graphsafe.kernels.common import native

FAMILY_DIR = pathlib.Path(__file__).resolve().parent


@torch.library.custom_op("graphsafe_example::scaled_copy", mutates_args=())
def scaled_copy(x: torch.Tensor, scale: float, defect: int = 0) -> torch.Tensor:
    """out = scale * x for a contiguous float32 x; defect=1 (negative control) writes only the first half."""
    if x.dtype != torch.float32 or not x.is_contiguous():
        raise ValueError(f"scaled_copy: x must be a contiguous torch.float32 tensor, got {x.dtype}")
    if defect not in (0, 1):
        raise ValueError(f"scaled_copy: defect must be 0 or 1, got {defect!r}")
    out = torch.empty_like(x)
    device = "cpu" if x.device.type == "cpu" else "gpu"
    stream = 0 if device == "cpu" else torch.cuda.current_stream(x.device).cuda_stream
    written = x.numel() // 2 if defect else x.numel()
    module = native.load(FAMILY_DIR, "scaled_copy", device)
    module.scaled_copy(x.data_ptr(), out.data_ptr(), x.numel(), written, float(scale), stream)
    return out


@scaled_copy.register_fake
def _(x, scale, defect=0):
    return torch.empty_like(x)


def reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    """float64 math, rounded once."""
    return (x.double() * scale).to(x.dtype)
'''

# Step 4: the case file: the family's case and its negative control.
CASES = '''
"""Cases of the scaled_copy family: the op, and a negative control that leaves half its output unwritten."""

import torch

from graphsafe import Case, register
from my_kernels.scaled_copy import ops

SCALE = 0.5


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(1000, generator=g).to(device)}


def reference(x: torch.Tensor) -> torch.Tensor:
    return ops.reference(x, SCALE)


register(Case(name="scaled_copy", make_inputs=make_inputs, op=lambda x: ops.scaled_copy(x, SCALE),
              reference=reference))
register(Case(name="scaled_copy_half_written_control", make_inputs=make_inputs,
              op=lambda x: ops.scaled_copy(x, SCALE, 1), reference=reference, expect="uninitialized",
              note="negative control: the kernel writes only the first half; the tail is the allocator's poison"))
'''


def _write_family(root: pathlib.Path) -> list[pathlib.Path]:
    """CONTRIBUTING.md's steps 1-4 under `root`; returns every file created."""
    family = root / "my_kernels" / "scaled_copy"
    family.mkdir(parents=True)
    (root / "my_cases").mkdir()
    files = {
        family / "scaled_copy.hip": KERNEL,
        family / "ops.py": OPS,
        root / "my_cases" / "scaled_copy.py": CASES,
    }
    for path, text in files.items():
        path.write_text(textwrap.dedent(text).lstrip())
    return sorted(p for p in root.rglob("*") if p.is_file())


def _env(root: pathlib.Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


@pytest.fixture(scope="module")
def family_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("new_family")


def test_the_steps_touch_three_files_and_the_case_passes_on_cpu(family_root: pathlib.Path) -> None:
    files = _write_family(family_root)
    assert len(files) == 3, files
    build = (
        "from graphsafe.kernels.common import native; from my_kernels.scaled_copy import ops; "
        "print(*[p.name for p in native.sources(ops.FAMILY_DIR, 'scaled_copy', 'cpu')], "
        "native.load(ops.FAMILY_DIR, 'scaled_copy', 'cpu').__name__)"
    )
    built = subprocess.run(
        [sys.executable, "-c", build], env=_env(family_root), capture_output=True, text=True, cwd=REPO
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.split() == ["scaled_copy.hip", "gs_scaled_copy_cpu"]

    report_dir = family_root / "report"
    command = [sys.executable, "-m", "graphsafe", "verify", "--backend", "cpu", "--case"]
    command += [str(family_root / "my_cases" / "scaled_copy.py"), "--report-dir", str(report_dir)]
    run = subprocess.run(command, env=_env(family_root), capture_output=True, text=True, cwd=REPO)
    with open(report_dir / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    verdicts = {row["case"]: (row["verdict"], row["expected"]) for row in rows}
    assert verdicts == {
        "scaled_copy": ("pass", "pass"),
        "scaled_copy_half_written_control": ("uninitialized", "uninitialized"),
    }, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_same_source_compiles_for_a_gpu(tmp_path: pathlib.Path) -> None:
    """The family's one .hip is also its device source: nvcc builds and imports it for sm_90 (no device)."""
    _write_family(tmp_path)
    build = (
        "from graphsafe.kernels.common import native; from my_kernels.scaled_copy import ops; "
        "print(native.build(ops.FAMILY_DIR, 'scaled_copy', 'cuda', arch='sm_90').__name__)"
    )
    built = subprocess.run(
        [sys.executable, "-c", build], env=_env(tmp_path), capture_output=True, text=True, cwd=REPO
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.split() == ["gs_scaled_copy_cuda"]
