"""The MoE GEMM's prefill on the H100 / H200: the sm_90a build holds warpgroup MMAs (wgmma).

Method: nvcc compiles kernels/moe_gemm/moe_gemm.prefill.hip (the translation unit holding the prefill launcher
and its kernels) to PTX for sm_90a with -DGS_SM90A=1, as harness/native/build.py builds it on compute
capability 9.0, and the test counts wgmma.mma_async instructions per kernel entry. Expected: every
instantiation the launcher makes of gs_moe_gemm_wgmma_kernel (bf16: 128- and 64-row forms) and
gs_moe_gemm_wgmma_q_kernel (MXFP8 and MXFP4: the fast, the rest and the one-launch form at 128 and 64 rows
of x; block-FP8: its one form at both) holds them, and the launcher instantiates no mma.sync tile kernel
(gs_moe_gemm_prefill_kernel).
Negative control: the same source for plain sm_90 (no arch-specific features) instantiates the wgmma kernels
with trapping bodies, and the same detector reports no wgmma there.
Whether the kernel computes the right numbers is checked on the H200 (tests/test_moe_gemm_ops.py, GPU tests).
Skipped without nvcc.
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
SOURCE = REPO / "kernels" / "moe_gemm" / "moe_gemm.prefill.hip"

# bf16 2 forms; MXFP8 and MXFP4 a fast, a rest and a one-launch form at 128 and 64 rows of x each (12);
# block-FP8 2 forms.
LAUNCHED_WGMMA_KERNELS = 16

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed"),
]


@functools.cache
def ptx(arch: str) -> str:
    """PTX of the prefill unit for `arch` with GS_SM90A defined, the include path of .ci/compile_hip.sh."""
    import pybind11

    cmd = [
        "nvcc", "-x", "cu", "-std=c++17", "-O2", f"-arch={arch}", "-DGS_SM90A=1", "--fmad=false", "-ptx",
        "-I", str(REPO / "kernels" / "common"), "-I", str(SOURCE.parent), "-isystem", pybind11.get_include(),
        "-isystem", sysconfig.get_paths()["include"], "-DGS_MODULE_NAME=test_moe_gemm_prefill", str(SOURCE),
        "-o", "-",
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def wgmma_per_kernel(text: str) -> dict[str, int]:
    """wgmma.mma_async instructions per kernel entry (mangled name -> count), from each .entry to the next."""
    entries = list(re.finditer(r"^\.visible \.entry (\w+)\(", text, re.M))
    counts: dict[str, int] = {}
    for i, match in enumerate(entries):
        end = entries[i + 1].start() if i + 1 < len(entries) else len(text)
        counts[match.group(1)] = text.count("wgmma.mma_async", match.end(), end)
    return counts


def _by_kernel(counts: dict[str, int], name: str) -> dict[str, int]:
    return {k: v for k, v in counts.items() if name in k}


def test_sm90a_prefill_kernels_use_warpgroup_mma() -> None:
    counts = wgmma_per_kernel(ptx("sm_90a"))
    wgmma = _by_kernel(counts, "gs_moe_gemm_wgmma_")
    assert len(wgmma) == LAUNCHED_WGMMA_KERNELS, (
        f"expected the launcher's bf16 forms, MXFP8 and MXFP4 forms (fast, rest, one-launch) and block-FP8 "
        f"forms at 128 and 64 rows, got {sorted(wgmma)}"
    )
    assert all(n > 0 for n in wgmma.values()), wgmma
    assert not _by_kernel(counts, "gs_moe_gemm_prefill_kernel"), (
        "the sm_90a launcher takes no mma.sync tile kernel"
    )


def test_negative_control_sm90_without_arch_features_is_caught() -> None:
    """Plain sm_90 lacks wgmma: the kernels are still instantiated (their bodies trap); the detector reports 0."""
    wgmma = _by_kernel(wgmma_per_kernel(ptx("sm_90")), "gs_moe_gemm_wgmma_")
    assert len(wgmma) == LAUNCHED_WGMMA_KERNELS, f"the kernels are still instantiated, got {sorted(wgmma)}"
    assert not any(wgmma.values()), wgmma
