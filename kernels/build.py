"""Compile kernel sources on first use and cache the result.

Role: the one place that turns ``kernels/hip/*.hip`` and ``kernels/cpu/*.cpp`` into importable pybind11
modules (or plain shared libraries for ctypes / ``CUDAPluggableAllocator``) with nvcc, hipcc or g++.
No torch headers are involved, which is why builds take seconds, not a minute (PITFALLS.md, Building:
a torch C++ extension takes about 60 s for one tiny file).

NOTE on build times, measured on the 2-core build container (load ~2-4 from other work; g++ 12.2, nvcc 13.0,
Debian hipcc 5.2), pybind11 module of kernels/hip/moe_combine.hip or kernels/cpu/moe_combine.cpp:
  g++ (cpu):              cold 6.4 s   warm 0.9 ms        (tests/test_build.py tiny module: cold 3.5-6.7 s)
  nvcc -arch=sm_90:       cold 15.7 s  warm 0.7 ms        (16 template instantiations; 29 s under heavier load)
  hipcc gfx90a:           cold 11.6 s  warm 1.2 ms
A warm call only hashes sources and headers (compiler --version is memoised per process).

Cache: ``kernels/_build/<name>-<key>/`` where ``key`` hashes the sources, every header under
kernels/hip and kernels/cpu, the compiler's ``--version``, the target architecture, flags and link
arguments. Concurrent builds (pytest-xdist workers) each build in a private temporary directory and
``os.rename`` it into place; rename of a directory is atomic on one filesystem and fails if the target
exists, in which case the loser discards its copy and uses the winner's. No lock is needed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import types

import torch

KERNELS_DIR = pathlib.Path(__file__).resolve().parent
BUILD_DIR = KERNELS_DIR / "_build"
HEADER_DIRS = (KERNELS_DIR / "hip", KERNELS_DIR / "cpu")
BACKENDS = ("cuda", "hip", "cpu")

_INSTALL_HINT = {
    "nvcc": "install the CUDA toolkit (nvcc), or set GRAPHSAFE_NVCC / CUDA_HOME",
    "hipcc": "apt-get install hipcc (Debian) or install ROCm, or set GRAPHSAFE_HIPCC / ROCM_PATH",
    "g++": "apt-get install g++, or set CXX",
}


class CompilerNotFound(RuntimeError):
    """The compiler a backend needs is not installed; the message names it and what to install."""


class BuildError(RuntimeError):
    """The compiler ran and failed; the message carries the command and its output."""


def detect_backend() -> str:
    """``cuda`` on an NVIDIA build of torch with a device, ``hip`` on a ROCm build with one, else ``cpu``."""
    if torch.cuda.is_available():
        if torch.version.hip:
            return "hip"
        if torch.version.cuda:
            return "cuda"
    return "cpu"


def device_arch(backend: str) -> str:
    """Target architecture of the current device: ``sm_90``, ``gfx942`` (features stripped), ``host``.

    ``GRAPHSAFE_ARCH`` overrides it (compile-only checks on a machine without that device).
    """
    _check_backend(backend)
    if backend == "cpu":
        return "host"
    override = os.environ.get("GRAPHSAFE_ARCH")
    if override:
        return override
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device_arch({backend!r}): no device visible; set GRAPHSAFE_ARCH to compile anyway"
        )
    index = torch.cuda.current_device()
    if backend == "cuda":
        major, minor = torch.cuda.get_device_capability(index)
        return f"sm_{major}{minor}"
    # gcnArchName looks like "gfx90a:sramecc+:xnack-"; the offload arch is the part before the features.
    return torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]


def find_compiler(backend: str) -> pathlib.Path:
    """Path of the compiler for ``backend``; raises CompilerNotFound naming it and what to install."""
    _check_backend(backend)
    if backend == "cuda":
        name, env, fallbacks = "nvcc", "GRAPHSAFE_NVCC", _tool_dirs("CUDA_HOME", "/usr/local/cuda", "nvcc")
    elif backend == "hip":
        name, env, fallbacks = "hipcc", "GRAPHSAFE_HIPCC", _tool_dirs("ROCM_PATH", "/opt/rocm", "hipcc")
    else:
        name, env, fallbacks = "g++", "CXX", []
    explicit = os.environ.get(env)
    candidates = [explicit] if explicit else [shutil.which(name), *fallbacks]
    for candidate in candidates:
        if candidate and (found := shutil.which(candidate)):
            return pathlib.Path(found)
    where = f"{env}={explicit!r}" if explicit else "PATH"
    raise CompilerNotFound(
        f"{name} not found (looked in {where}) for backend {backend!r}: {_INSTALL_HINT[name]}"
    )


def build_extension(
    name: str,
    sources: list[pathlib.Path],
    *,
    backend: str | None = None,
    extra_flags: tuple[str, ...] = (),
    link: tuple[str, ...] = (),
    arch: str | None = None,
) -> types.ModuleType:
    """Compile a pybind11 module (no torch headers) and import it.

    The sources see ``-DGS_MODULE_NAME=<name>``, so one source can be built under several names with
    ``PYBIND11_MODULE(GS_MODULE_NAME, m)``. nvcc compiles every source as CUDA (``-x cu``, ``--fmad=false``),
    hipcc as HIP (``-ffp-contract=off``), g++ as C++ (``-O2 -ffp-contract=off -fopenmp``): no contraction
    anywhere, so kernels and CPU implementations that write the same math in the same order agree bitwise.
    """
    library = _build(name, sources, backend, extra_flags, link, arch, pybind=True)
    return _import(name, library)


def build_shared_library(
    name: str,
    sources: list[pathlib.Path],
    *,
    backend: str | None = None,
    extra_flags: tuple[str, ...] = (),
    link: tuple[str, ...] = (),
    arch: str | None = None,
) -> pathlib.Path:
    """Same as build_extension but a plain shared library ``lib<name>.so``; returns its path."""
    return _build(name, sources, backend, extra_flags, link, arch, pybind=False)


# --------------------------------------------------------------------------------------------- internals


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def _tool_dirs(env: str, default_root: str, tool: str) -> list[str]:
    roots = [os.environ.get(env), default_root]
    return [str(pathlib.Path(root) / "bin" / tool) for root in roots if root]


@functools.cache
def _compiler_version(compiler: pathlib.Path, mtime_ns: int) -> str:
    del mtime_ns  # part of the memo key only: a reinstalled compiler is asked again
    result = subprocess.run([str(compiler), "--version"], capture_output=True, text=True, check=False)
    return result.stdout + result.stderr


def _flags(backend: str, arch: str, pybind: bool) -> list[str]:
    common = ["-O2", "-std=c++17", "-shared"]
    includes = [f"-I{KERNELS_DIR / 'hip'}", f"-I{KERNELS_DIR / 'cpu'}"]
    if pybind:
        import pybind11

        includes += [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}"]
    if backend == "cuda":
        # --fmad=false: no FMA contraction in device code; -ffp-contract=off for host code.
        return [
            *common,
            "-x",
            "cu",
            f"-arch={arch}",
            "--fmad=false",
            "-Xcompiler",
            "-fPIC,-ffp-contract=off",
            *includes,
        ]
    if backend == "hip":
        return [*common, "-fPIC", f"--offload-arch={arch}", "-ffp-contract=off", *includes]
    return [*common, "-fPIC", "-ffp-contract=off", "-fopenmp", *includes]


def _cache_key(
    sources: list[pathlib.Path], compiler: pathlib.Path, arch: str, flags: list[str], link: tuple[str, ...]
) -> str:
    digest = hashlib.sha256()
    headers = sorted(p for d in HEADER_DIRS if d.is_dir() for p in d.rglob("*") if p.suffix in (".h", ".hpp"))
    for path in [*sources, *headers]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    version = _compiler_version(compiler, compiler.stat().st_mtime_ns)
    for part in (str(compiler), version, arch, *flags, "--link--", *link, sys.version):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _output_name(name: str, pybind: bool) -> str:
    return name + sysconfig.get_config_var("EXT_SUFFIX") if pybind else f"lib{name}.so"


def _build(
    name: str,
    sources: list[pathlib.Path],
    backend: str | None,
    extra_flags: tuple[str, ...],
    link: tuple[str, ...],
    arch: str | None,
    pybind: bool,
) -> pathlib.Path:
    if not name.isidentifier():
        raise ValueError(f"name must be a Python identifier (it is the module's init symbol), got {name!r}")
    if not sources:
        raise ValueError("sources must name at least one file")
    backend = backend or detect_backend()
    _check_backend(backend)
    sources = [pathlib.Path(s).resolve() for s in sources]
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise FileNotFoundError(f"sources not found: {missing}")
    compiler = find_compiler(backend)
    arch = arch or device_arch(backend)
    flags = [*_flags(backend, arch, pybind), f"-DGS_MODULE_NAME={name}", *extra_flags]
    key = _cache_key(sources, compiler, arch, flags, link)
    final_dir = BUILD_DIR / f"{name}-{key}"
    output = final_dir / _output_name(name, pybind)
    if output.is_file():
        return output
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp_dir = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=BUILD_DIR))
    try:
        command = [str(compiler), *flags, *map(str, sources), "-o", str(tmp_dir / output.name), *link]
        env = dict(os.environ, HIP_PLATFORM="amd") if backend == "hip" else None  # see PITFALLS.md
        result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        (tmp_dir / "build.log").write_text(" ".join(command) + "\n" + result.stdout + result.stderr)
        if result.returncode != 0:
            raise BuildError(
                f"building {name} failed ({backend}, {arch}):\n$ {' '.join(command)}\n"
                f"{result.stdout}{result.stderr}"
            )
        try:
            os.rename(tmp_dir, final_dir)
        except OSError:
            if not output.is_file():  # not a lost race: something else is wrong
                raise
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return output


_IMPORTED: dict[pathlib.Path, types.ModuleType] = {}


def _import(name: str, library: pathlib.Path) -> types.ModuleType:
    if library in _IMPORTED:
        return _IMPORTED[library]
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _IMPORTED[library] = module
    return module
