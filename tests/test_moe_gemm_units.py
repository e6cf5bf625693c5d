"""The moe_gemm module's translation units (moe_gemm.hip's unit note): each CUDA-core kernel instantiation is
compiled in exactly one part, and the parts define every launcher the main unit leaves to them.

Method: nvcc compiles every unit for sm_90 as harness/native/build.py builds the module (the main source with
-DGS_SPLIT_UNITS, each moe_gemm.<part>.hip as it is). (1) PTX: the gs_moe_gemm_kernel<FMT, MR, ...> entries of
each unit; together the parts must hold the 7 formats x the 1-, 4- and 16-row tiles once each, and the main
unit none. (2) Objects and nm: every gs_ function the main unit calls but does not define is defined by exactly
one part. Control: the main source compiled alone (every unit in one, as .ci/compile_hip.sh and the variants
bench build it) holds all 21 instantiations, so the detector sees them where they are. Skipped without nvcc.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import re
import shutil
import subprocess

import pytest

FAMILY = pathlib.Path(__file__).resolve().parent.parent / "kernels" / "moe_gemm"
MAIN = FAMILY / "moe_gemm.hip"
PARTS = sorted(
    p for p in FAMILY.glob("moe_gemm.*.hip")
)  # the files kernels/common/native.py adds to the main one
FORMATS = range(7)  # kernels/common/gs_formats.h: GS_FMT_BF16 (0) .. GS_FMT_Q4_0 (6)
TILE_ROWS = (1, 4, 16)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed"),
]


def _nvcc(source: pathlib.Path, out: pathlib.Path, *extra: str) -> pathlib.Path:
    cmd = [
        "nvcc", "-x", "cu", "-std=c++17", "-O2", "-arch=sm_90", "--fmad=false", "-I", str(FAMILY.parent / "common"),
        "-I", str(FAMILY), *extra, str(source), "-o", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    return out


def _built(tmp: pathlib.Path) -> dict[str, tuple[str, str]]:
    """Per unit name: (PTX, nm output of its object), all units compiled at once."""
    units = {"main": (MAIN, ("-DGS_SPLIT_UNITS",)), "alone": (MAIN, ())}
    units.update({p.name: (p, ()) for p in PARTS})
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for name, (src, flags) in units.items():
            jobs[name] = (
                pool.submit(_nvcc, src, tmp / f"{name}.ptx", "-ptx", *flags),
                pool.submit(_nvcc, src, tmp / f"{name}.o", "-c", *flags) if name != "alone" else None,
            )
        built = {}
        for name, (ptx, obj) in jobs.items():
            nm = (
                ""
                if obj is None
                else subprocess.run(["nm", str(obj.result())], capture_output=True, text=True).stdout
            )
            built[name] = (ptx.result().read_text(), nm)
    return built


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    return _built(tmp_path_factory.mktemp("moe_gemm_units"))


def cuda_core_instantiations(ptx: str) -> set[tuple[int, int]]:
    """(format, tile rows) of every gs_moe_gemm_kernel entry in the PTX."""
    return {(int(f), int(r)) for f, r in re.findall(r"\.entry _Z18gs_moe_gemm_kernelILi(\d+)ELi(\d+)E", ptx)}


def gs_symbols(nm: str, kind: str) -> set[str]:
    """Mangled gs_ function symbols of one nm kind: "T" defined here, "U" used and defined elsewhere."""
    return {m.group(1) for m in re.finditer(rf"^\s*[0-9a-f]*\s+{kind} (_Z\d+gs_\w+)$", nm, re.M)}


def test_every_cuda_core_instantiation_is_in_exactly_one_part(units):
    every = {(f, r) for f in FORMATS for r in TILE_ROWS}
    assert cuda_core_instantiations(units["alone"][0]) == every  # the control: the detector sees all 21
    assert cuda_core_instantiations(units["main"][0]) == set()  # the main unit leaves them to the parts
    seen: dict[tuple[int, int], list[str]] = {}
    for part in PARTS:
        for key in cuda_core_instantiations(units[part.name][0]):
            seen.setdefault(key, []).append(part.name)
    assert set(seen) == every, sorted(every - set(seen))
    assert all(len(names) == 1 for names in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}


def test_every_launcher_the_main_unit_calls_is_defined_by_one_part(units):
    needed = gs_symbols(units["main"][1], "U")
    assert any("gs_moe_gemm_launch_cuda_core" in s for s in needed)  # the control: the main unit calls them
    for symbol in needed:
        owners = [p.name for p in PARTS if symbol in gs_symbols(units[p.name][1], "T")]
        assert len(owners) == 1, (symbol, owners)
