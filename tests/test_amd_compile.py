"""The MoE GEMM's matrix-core path on AMD: its gfx90a/gfx942 assembly uses MFMA instructions.

Method: clang-19 compiles kernels/moe_gemm/moe_gemm.hip to device assembly (as .ci/compile_hip.sh does) and
the test counts v_mfma instructions per kernel function. Expected: every instantiation of
gs_moe_gemm_mfma_kernel (bf16, mxfp8, block_fp8) holds MFMA instructions on gfx90a and gfx942, and the
bit-exact CUDA-core kernel holds none. Negative control: the same source for gfx1100 (RDNA3, no MFMA) gives
an MFMA kernel body without them, and the same detector says so. Nothing here runs the code: no AMD GPU is
available, so correctness on AMD rests on the shared CPU twin (tests/test_moe_gemm_ops.py) and this check
that the matrix-core instructions are there. Skipped without clang-19 (apt-get install clang-19).
"""

from __future__ import annotations

import functools
import pathlib
import re
import shutil
import subprocess
import sysconfig

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SOURCE = REPO / "kernels" / "moe_gemm" / "moe_gemm.hip"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 not installed"),
]


@functools.cache
def device_assembly(arch: str) -> str:
    """The device assembly of moe_gemm.hip for `arch`, with the flags and include path of .ci/compile_hip.sh."""
    import pybind11

    cmd = [
        "clang-19", "-x", "hip", "-std=c++17", "-O2", "-ffp-contract=off", f"--offload-arch={arch}",
        "-nogpulib", "--cuda-device-only", "-S", "-I", str(REPO / "kernels" / "common"),
        "-I", str(SOURCE.parent), "-isystem", pybind11.get_include(), "-isystem", sysconfig.get_paths()["include"],
        "-DGS_MODULE_NAME=test_moe_gemm", str(SOURCE), "-o", "-",
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def mfma_per_kernel(assembly: str) -> dict[str, int]:
    """v_mfma instructions per kernel function (mangled name -> count), from each function's label to its
    .Lfunc_end marker."""
    counts: dict[str, int] = {}
    for match in re.finditer(r"^(_Z\w+):[^\n]*$(.*?)^\.Lfunc_end", assembly, re.M | re.S):
        counts[match.group(1)] = len(re.findall(r"^\s*v_mfma\w*", match.group(2), re.M))
    return counts


def _by_kernel(counts: dict[str, int], name: str) -> dict[str, int]:
    return {k: v for k, v in counts.items() if name in k}


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_mfma_kernels_use_matrix_cores(arch: str) -> None:
    counts = mfma_per_kernel(device_assembly(arch))
    mfma = _by_kernel(counts, "gs_moe_gemm_mfma_kernel")
    assert len(mfma) == 3, f"expected the bf16, mxfp8 and block_fp8 instantiations, got {sorted(mfma)}"
    assert all(n > 0 for n in mfma.values()), mfma
    cuda_core = _by_kernel(counts, "gs_moe_gemm_kernel")
    assert cuda_core and not any(cuda_core.values()), (
        "the bit-exact CUDA-core kernel must stay on vector units"
    )


def test_negative_control_target_without_mfma_is_caught() -> None:
    """gfx1100 has no MFMA: the MFMA kernel's body there holds none, and the detector above reports it."""
    counts = mfma_per_kernel(device_assembly("gfx1100"))
    mfma = _by_kernel(counts, "gs_moe_gemm_mfma_kernel")
    assert len(mfma) == 3, f"the kernel is still instantiated (it traps), got {sorted(mfma)}"
    assert not any(mfma.values()), mfma
