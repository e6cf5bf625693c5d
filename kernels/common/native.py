"""Build an op family's native module: the one place kernels turn their sources into importable modules.

Role: every op family keeps its sources side by side in its folder, named by one stem: ``<stem>.hip`` for
CUDA/ROCm devices (nvcc compiles it as CUDA, hipcc as HIP) and ``<stem>.cpp``, its CPU twin, for g++. A family
whose host code fits in the ``.hip`` (under ``GS_BACKEND_HOST``, which hip_compat.h defines for a plain C++
compiler) needs no ``.cpp``: g++ then compiles the ``.hip`` as C++. ``load(family_dir, stem, "cpu")`` builds
the CPU sources, ``load(family_dir, stem, "gpu")`` the device sources for the visible device; both go through
graphsafe's content-keyed build cache (``graphsafe.toolkit.build_extension``) with this folder (hip_compat.h,
gs_checks.h, gs_formats.h) on the include path.

Translation units (``sources``): a family may split its module, for build speed, into
  * ``<stem>.bind.cpp``: the pybind11 layer, host C++ only, in both the CPU and the device module: g++
    compiles it beside the kernels (nvcc's cudafe++ and host pass never see pybind11's headers), at -O1
    (``BIND_FLAGS``), and the CPU twin and the kernels share one set of entry points and argument checks;
  * ``<stem>.torch.cpp``: the dispatcher layer, host C++ only, in both modules: the family's ops as C++ kernels
    at torch's device key (``CPU`` in the CPU module, ``CUDA`` in the device one; ROCm builds of torch route HIP
    tensors through ``CUDA`` too), so that an eager call goes from torch's dispatcher to the launch without
    Python (kernels/common/gs_torch.h says how). g++ compiles it against torch's headers (``torch_unit_flags``)
    and the module links libc10 and libtorch_cpu, which the imported torch has loaded already;
  * ``<stem>.<part>.hip``: more device code, each its own compiler process, linked into the same module; a
    part may include ``<stem>.hip`` and compile a share of its kernels, which the main source then leaves out
    (it is compiled with ``SPLIT_FLAGS``; moe_gemm.prefill.hip takes the prefill kernels).
All of them compile at the same time and link into one module ``gs_<stem>_<backend>``. Per-family cold build
times: reports/performance.md (``bench/build_times.py``; 6.4-11.2 s a family on the H200).

The cache key covers the sources and the headers of the include folders. A family's ``.cpp`` or header may
include its ``.hip`` (moe_gemm.entry.h, in moe_gemm's binding units, takes the entry points' declarations
that way), which is no header, so every source file of the family folder is hashed into a define: editing any
of them rebuilds the family's modules.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib
import sys
import types

import torch

from graphsafe import toolkit

COMMON_DIR = pathlib.Path(__file__).resolve().parent
SOURCE_SUFFIXES = (".hip", ".cpp", ".h", ".hpp")
DEVICES = ("cpu", "gpu")
BIND_SUFFIX = ".bind.cpp"
TORCH_SUFFIX = ".torch.cpp"
TORCH_DIR = pathlib.Path(torch.__file__).resolve().parent
# A binding unit is argument conversion around one call: -O1 (after the family's own flags, so cpu_moe's -O3
# stays on its math) takes a large share off the compiler CPU of moe_gemm.bind.cpp (at -O2 the critical unit
# of both moe_gemm builds), and a 19-argument moe_combine call costs the same at -O1 and -O2.
BIND_FLAGS = ("-O1",)
# The main ``<stem>.hip`` of a family that has parts: a part that includes the main source to share its code
# (moe_gemm.prefill.hip) compiles some kernels itself, and the main source, seeing this define, leaves them out.
# Compiled alone (a bench, .ci/compile_hip.sh) the main source holds everything.
SPLIT_FLAGS = ("-DGS_SPLIT_UNITS",)


def gpu_backend() -> str:
    """``cuda`` or ``hip`` for the visible device; RuntimeError when torch sees no CUDA/ROCm device."""
    backend = toolkit.detect_backend()
    if backend == "cpu":
        raise RuntimeError("no CUDA/ROCm device is visible to torch (torch.cuda.is_available() is False)")
    return backend


def sources(family_dir: pathlib.Path, stem: str, device: str) -> list[pathlib.Path]:
    """The translation units ``load`` builds (module note): for the GPU ``<stem>.hip`` and its parts
    ``<stem>.<part>.hip``; for the CPU ``<stem>.cpp``, or without one the same ``.hip`` files as C++; and in
    both ``<stem>.bind.cpp`` when the family has one. Sorted by name after the main source."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    family_dir = pathlib.Path(family_dir)
    main = family_dir / f"{stem}.hip"
    if device == "cpu" and (family_dir / f"{stem}.cpp").is_file():
        found = [family_dir / f"{stem}.cpp"]
    elif main.is_file():
        found = [main, *sorted(p for p in family_dir.glob(f"{stem}.*.hip") if p.is_file())]
    else:
        looked = [f"{stem}.cpp", f"{stem}.hip"] if device == "cpu" else [f"{stem}.hip"]
        raise FileNotFoundError(
            f"op family {family_dir.name!r} has no {device} source: looked for {looked} in {family_dir}"
        )
    layers = [family_dir / f"{stem}{suffix}" for suffix in (BIND_SUFFIX, TORCH_SUFFIX)]
    return [*found, *(p for p in layers if p.is_file())]


def torch_unit_flags(backend: str) -> tuple[str, ...]:
    """The compile flags of a ``<stem>.torch.cpp``: torch's include folder (ATen, c10, torch/library.h; not
    torch.utils.cpp_extension's list, whose import needs setuptools), its C++ ABI, its version (so that another
    torch rebuilds the module: its headers are not hashed, 10,000 of them), C++20 (torch 2.13's headers use
    C++20 bit-field initializers) at -O1 like a binding unit, and the dispatch key the unit registers at."""
    key = "CPU" if backend == "cpu" else "CUDA"
    return (
        "-std=c++20",
        *BIND_FLAGS,
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DGS_TORCH_VERSION={torch.__version__}-{torch.version.git_version}",
        f"-DGS_TORCH_DISPATCH_KEY={key}",
        f"-I{TORCH_DIR / 'include'}",
    )


def torch_link_flags(backend: str) -> tuple[str, ...]:
    """Link arguments of a module with a dispatcher unit: torch's libc10 and libtorch_cpu, found at run time by
    soname among the libraries the imported torch loaded, and by rpath otherwise."""
    lib = TORCH_DIR / "lib"
    rpath = f"-Xlinker=-rpath={lib}" if backend == "cuda" else f"-Wl,-rpath,{lib}"
    return (f"-L{lib}", "-lc10", "-ltorch_cpu", rpath)


def declare(family_dir: pathlib.Path, stem: str, device: str, extra_flags: tuple[str, ...] = ()) -> None:
    """Tell the harness that ``load(family_dir, stem, device, extra_flags)`` will be needed, so a run can build
    it before its first case, at the same time as the other families (graphsafe.toolkit.plan_build). Called at
    import by the module that loads it; ``load`` is still how the module is obtained."""
    owner = sys._getframe(1).f_globals.get("__name__", "")
    flags = tuple(extra_flags)
    toolkit.plan_build(
        f"{pathlib.Path(family_dir).name}/{stem} {device}",
        functools.partial(load, pathlib.Path(family_dir), stem, device, flags),
        device=device,
        owner=owner,
    )


@functools.cache
def load(
    family_dir: pathlib.Path, stem: str, device: str, extra_flags: tuple[str, ...] = ()
) -> types.ModuleType:
    """Build (once per content, cached on disk) and import ``<stem>`` of ``family_dir`` for ``device``
    (``cpu``: the CPU source, built with g++; ``gpu``: the device source for the visible device)."""
    backend = "cpu" if device == "cpu" else gpu_backend()
    return build(family_dir, stem, backend, extra_flags=extra_flags)


def build(
    family_dir: pathlib.Path,
    stem: str,
    backend: str,
    *,
    arch: str | None = None,
    extra_flags: tuple[str, ...] = (),
) -> types.ModuleType:
    """``load`` for an explicit backend (cpu, cuda, hip) and target architecture: a compile check for a device
    this machine lacks (e.g. ``build(dir, stem, "cuda", arch="sm_90")`` with nvcc and no GPU).

    The module's name is ``gs_<stem>_<backend>``, its sources see ``-DGS_MODULE_NAME=<name>``; ``extra_flags``
    go to every compile after the build cache's own.
    """
    family_dir = pathlib.Path(family_dir).resolve()
    paths = sources(family_dir, stem, "cpu" if backend == "cpu" else "gpu")
    flags = (f"-DGS_FAMILY_SOURCES_SHA={_family_digest(family_dir)}", *extra_flags)
    unit_flags = {p: BIND_FLAGS for p in paths if p.name.endswith(BIND_SUFFIX)}
    dispatcher = [p for p in paths if p.name.endswith(TORCH_SUFFIX)]
    unit_flags.update({p: torch_unit_flags(backend) for p in dispatcher})
    main = family_dir / f"{stem}.hip"
    if any(p.name.endswith(".hip") and p != main for p in paths):
        unit_flags[main] = SPLIT_FLAGS  # the main source leaves its parts' code to them
    return toolkit.build_extension(
        f"gs_{stem}_{backend}",
        paths,
        [COMMON_DIR, family_dir],
        unit_flags=unit_flags,
        backend=backend,
        arch=arch,
        extra_flags=flags,
        link=torch_link_flags(backend) if dispatcher else (),
    )


def _family_digest(family_dir: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in family_dir.iterdir() if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
