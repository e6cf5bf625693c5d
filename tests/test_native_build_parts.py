"""A module built from several translation units (harness/native/build.py, "Sources"; kernels/common/native.py).

Method: a tiny family with a pybind11 layer ``<stem>.bind.cpp`` and two device parts (``<stem>.hip``,
``<stem>.extra.hip``) that each define one function the layer calls. Built with g++ (the parts as C++), and
with nvcc and hipcc where installed (no device needed: the module is linked, and the nvcc one imported).
Failure scenarios: the parts are compiled one after another (a fake compiler that waits for its sibling
times out), a part is left out of the link (the import fails on an undefined symbol), an edit of one part
serves the old module (the key misses it), a broken part's error names another command or none.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
import torch

from graphsafe.kernels.common import native
from graphsafe.native import build

REPO = pathlib.Path(__file__).resolve().parents[1]

BIND = r"""
#include <pybind11/pybind11.h>
int tiny_main_value();
int tiny_extra_value();
const char* tiny_backend();
PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.def("values", [] { return tiny_main_value() * 100 + tiny_extra_value(); });
  m.def("device_backend", [] { return tiny_backend(); });
}
"""
MAIN = r"""
#include "hip_compat.h"
int tiny_main_value() { return 1; }
const char* tiny_backend() { return GS_BACKEND_NAME; }
"""
EXTRA = r"""
#include "hip_compat.h"
__global__ void tiny_kernel(float* x) { x[threadIdx.x] = 0.0f; }
int tiny_extra_value() { return 2; }
"""
EXTRA_HOST = r"""
int tiny_extra_value() { return 2; }
"""


@pytest.fixture
def family(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path / "_build"))
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "tiny.bind.cpp").write_text(BIND)
    (folder / "tiny.hip").write_text(MAIN)
    (folder / "tiny.extra.hip").write_text(EXTRA)
    return folder


def test_sources_name_every_translation_unit(family: pathlib.Path) -> None:
    names = [p.name for p in native.sources(family, "tiny", "gpu")]
    assert names == ["tiny.hip", "tiny.extra.hip", "tiny.bind.cpp"]
    assert [p.name for p in native.sources(family, "tiny", "cpu")] == names  # no .cpp twin: the .hip as C++
    (family / "tiny.cpp").write_text(MAIN)
    assert [p.name for p in native.sources(family, "tiny", "cpu")] == ["tiny.cpp", "tiny.bind.cpp"]
    (family / "tiny.torch.cpp").write_text("")  # a dispatcher unit goes into both modules, after the binding
    assert [p.name for p in native.sources(family, "tiny", "cpu")] == [
        "tiny.cpp",
        "tiny.bind.cpp",
        "tiny.torch.cpp",
    ]
    assert [p.name for p in native.sources(family, "tiny", "gpu")][-2:] == ["tiny.bind.cpp", "tiny.torch.cpp"]


def test_dispatcher_unit_flags_name_torch_and_the_key() -> None:
    """A dispatcher unit compiles against the imported torch's headers and ABI, registers at CPU or CUDA, and
    its flags carry torch's version, so that the build cache (which hashes flags, not torch's headers) builds
    the module again for another torch."""
    cpu, cuda = native.torch_unit_flags("cpu"), native.torch_unit_flags("cuda")
    assert "-DGS_TORCH_DISPATCH_KEY=CPU" in cpu and "-DGS_TORCH_DISPATCH_KEY=CUDA" in cuda
    assert f"-I{native.TORCH_DIR / 'include'}" in cpu
    assert any(f.startswith("-DGS_TORCH_VERSION=" + torch.__version__) for f in cpu)
    assert f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}" in cpu
    assert "-lc10" in native.torch_link_flags("cpu") and "-ltorch_cpu" in native.torch_link_flags("hip")


def _cpu_family(family: pathlib.Path) -> None:
    (family / "tiny.extra.hip").write_text(EXTRA_HOST)  # no kernel: g++ compiles the parts as plain C++


def _values_in_a_fresh_process(family: pathlib.Path) -> int:
    """One process per build: a process that imported gs_tiny_cpu keeps it (CPython imports an extension
    module's name once), so each edit is read back by its own interpreter."""
    code = f"from graphsafe.kernels.common import native; print(native.build({str(family)!r}, 'tiny', 'cpu').values())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout)


def test_parts_link_into_one_module_and_each_edit_rebuilds(family: pathlib.Path) -> None:
    _cpu_family(family)
    module = native.build(family, "tiny", "cpu")
    assert module.values() == 102 and module.device_backend() == "host"
    (family / "tiny.extra.hip").write_text(EXTRA_HOST.replace("return 2", "return 3"))
    assert _values_in_a_fresh_process(family) == 103
    (family / "tiny.bind.cpp").write_text(BIND.replace("* 100", "* 10"))
    assert _values_in_a_fresh_process(family) == 13
    entries = [p for p in (family.parent / "_build").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(entries) == 3


def test_a_broken_part_names_its_own_command(family: pathlib.Path) -> None:
    _cpu_family(family)
    (family / "tiny.extra.hip").write_text("int tiny_extra_value() { return }\n")
    with pytest.raises(build.BuildError) as error:
        native.build(family, "tiny", "cpu")
    message = str(error.value)
    command = next(line for line in message.splitlines() if line.startswith("$ "))
    assert f"-c {family / 'tiny.extra.hip'} " in command
    assert "tiny.bind.cpp" not in command and "expected" in message  # g++: "expected primary-expression"
    assert not [p for p in (family.parent / "_build").iterdir() if not p.name.startswith(".")]


def test_a_failed_link_is_a_build_error(family: pathlib.Path) -> None:
    _cpu_family(family)
    (family / "tiny.extra.hip").write_text(EXTRA_HOST + "int tiny_main_value() { return 5; }\n")
    with pytest.raises(build.BuildError, match=r"multiple definition of .tiny_main_value"):
        native.build(family, "tiny", "cpu")


def test_the_parts_compile_at_the_same_time(family: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper around g++ that, for a compile, waits until all three compiles have started (20 s at most)."""
    _cpu_family(family)
    gxx = shutil.which("g++")
    assert gxx is not None
    started = family.parent / "started"
    started.mkdir()
    wrapper = family.parent / "g++-barrier"
    wrapper.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        case " $* " in *" -c "*)
          touch {started}/$$
          for _ in $(seq 200); do [ "$(ls {started} | wc -l)" -ge 3 ] && exec {gxx} "$@"; sleep 0.1; done
          echo "the other compiles never started" >&2; exit 1;;
        esac
        exec {gxx} "$@"
        """)
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CXX", str(wrapper))
    assert native.build(family, "tiny", "cpu").values() == 102


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_parts_and_a_gxx_binding_layer_import(family: pathlib.Path) -> None:
    """nvcc compiles the two .hip parts, g++ the .bind.cpp; the module imports (cudart is linked statically,
    no device is touched) and its device units saw the CUDA branch of hip_compat.h."""
    module = native.build(family, "tiny", "cuda", arch="sm_90")
    assert module.values() == 102 and module.device_backend() == "cuda"
    log = next((family.parent / "_build").glob("gs_tiny_cuda-*/build.log")).read_text()
    compilers = [line.split()[1] for line in log.splitlines() if line.startswith("$ ")]
    assert [pathlib.Path(c).name for c in compilers] == ["nvcc", "nvcc", "g++", "nvcc"]  # 3 compiles, 1 link


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
def test_hipcc_parts_and_a_gxx_binding_layer_link(family: pathlib.Path) -> None:
    library = build.build_shared_library(
        "gs_tiny_hip",
        native.sources(family, "tiny", "gpu"),
        [native.COMMON_DIR, *_pybind_includes()],
        backend="hip",
        arch="gfx90a",
    )
    assert library.is_file()


def _pybind_includes() -> list[pathlib.Path]:
    import sysconfig

    import pybind11

    return [pathlib.Path(pybind11.get_include()), pathlib.Path(sysconfig.get_paths()["include"])]


def _commands(cache: pathlib.Path) -> dict[str, list[str]]:
    """Compile commands of the one build in `cache`, by source file name, from its build.log."""
    commands = {}
    for line in next(cache.glob("*/build.log")).read_text().splitlines():
        words = line[2:].split() if line.startswith("$ ") else []
        if "-c" in words:
            commands[pathlib.Path(words[words.index("-c") + 1]).name] = words
    return commands


def test_the_binding_unit_alone_compiles_at_O1(family: pathlib.Path) -> None:
    """The family's -O3 reaches every unit; native.BIND_FLAGS come after it on the .bind.cpp only."""
    _cpu_family(family)
    native.build(family, "tiny", "cpu", extra_flags=("-O3",))
    levels = {
        name: [w for w in words if w.startswith("-O")][-1]
        for name, words in _commands(family.parent / "_build").items()
    }
    assert levels == {"tiny.hip": "-O3", "tiny.extra.hip": "-O3", "tiny.bind.cpp": "-O1"}


def test_unit_flags_must_name_a_source(family: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="unit_flags name sources that are not built"):
        build.build_shared_library(
            "gs_tiny_flags",
            [family / "tiny.hip"],
            unit_flags={family / "tiny.bind.cpp": ("-O1",)},
            backend="cpu",
        )


def test_a_part_that_includes_the_main_source_takes_its_share(family: pathlib.Path) -> None:
    """moe_gemm's layout: a part includes the main source and compiles one function of it; the main source,
    built with native.SPLIT_FLAGS beside its parts, leaves that function out. Without the flag the module
    would define it twice; with it applied to the part too, nowhere (both fail to link or import)."""
    (family / "tiny.hip").write_text(
        "#if !defined(TINY_PART_EXTRA)\nint tiny_main_value() { return 1; }\n"
        'const char* tiny_backend() { return "host"; }\n#endif\n'
        "#if defined(TINY_PART_EXTRA) || !defined(GS_SPLIT_UNITS)\nint tiny_extra_value() { return 2; }\n#endif\n"
    )
    (family / "tiny.extra.hip").write_text('#define TINY_PART_EXTRA 1\n#include "tiny.hip"\n')
    assert _values_in_a_fresh_process(family) == 102
    flagged = {
        name for name, words in _commands(family.parent / "_build").items() if "-DGS_SPLIT_UNITS" in words
    }
    assert flagged == {"tiny.hip"}


def _unkeyed_includes(family: pathlib.Path) -> list[str]:
    """Files the family's units include with quotes, transitively, that a module build's cache key does not read:
    the key hashes the headers of the include folders (harness/native/build.py, "Cache key"; kernels/common and
    the family folder) and, through native.py's define, every source file of the family folder."""
    keyed = set(build._headers([native.COMMON_DIR, family.resolve()]))
    keyed |= {p.resolve() for p in family.iterdir() if p.suffix in native.SOURCE_SUFFIXES}
    todo = [p.resolve() for p in family.iterdir() if p.suffix in (".hip", ".cpp")]
    seen: set[pathlib.Path] = set()
    unkeyed = []
    while todo:
        path = todo.pop()
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M):
            places = (path.parent, family.resolve(), native.COMMON_DIR)
            found = next((d / name for d in places if (d / name).is_file()), None)
            if found is None or found.resolve() not in keyed:
                unkeyed.append(f"{path.name}: {name}")
            elif found.resolve() not in seen:
                seen.add(found.resolve())
                todo.append(found.resolve())
    return sorted(unkeyed)


NATIVE_FAMILIES = sorted(
    p.name for p in (REPO / "kernels").iterdir() if p.is_dir() and any([*p.glob("*.hip"), *p.glob("*.cpp")])
)


@pytest.mark.parametrize("name", NATIVE_FAMILIES)
def test_every_file_a_family_includes_is_in_its_build_key(name: str) -> None:
    """moe_gemm's kernels live in headers its units include (moe_gemm.hip's file note): an edit of any of them
    must build the module anew, as an edit of every family's included files must."""
    assert "moe_gemm" in NATIVE_FAMILIES
    assert _unkeyed_includes(REPO / "kernels" / name) == []


def test_an_include_outside_the_key_is_reported(family: pathlib.Path) -> None:
    """Control: a part kept in a .inc file (no header suffix the key reads) and a missing file are reported; a
    header beside the sources is not."""
    (family / "tiny.hip").write_text(MAIN + '#include "tiny.kernels.h"\n')
    (family / "tiny.kernels.h").write_text('#include "tiny.kernels.inc"\n#include "tiny.absent.h"\n')
    (family / "tiny.kernels.inc").write_text("")
    assert _unkeyed_includes(family) == ["tiny.kernels.h: tiny.absent.h", "tiny.kernels.h: tiny.kernels.inc"]
