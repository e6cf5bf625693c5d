"""Compile native sources on first use and cache the result by content.

Role: the one build path for graphsafe's native code: the harness's own pieces (the poisoning allocator,
graph node inspection) and any kernel library that builds on it. It turns ``.hip``, ``.cu`` and ``.cpp``
sources into importable pybind11 modules (``build_extension``) or plain shared libraries for ctypes and
``CUDAPluggableAllocator`` (``build_shared_library``) with nvcc, hipcc or g++. No torch headers are involved:
a torch C++ extension takes many times as long for one tiny file.

Cold build times per op family (reports/performance.md, `bench/build_times.py`): on the H200 host (16 cores,
nvcc 13.0 for sm_90a, g++ 13.3) 6.4-11.2 s per family and 12.8 s for all seven builds at once; the longest
unit is moe_gemm's and moe_combine's dispatcher unit (`<stem>.torch.cpp`), the pybind11 unit elsewhere. On
the busy 2-core test box moe_gemm's nvcc build takes about 20 s (its units contend for two cores). A warm call
only hashes sources and headers (the compiler's ``--version`` is asked once per process): under 1.5 ms for a
tiny module, whose cold and warm figures tests/test_build.py prints (reports/performance.md).

Sources: each source is one translation unit, compiled to an object by its own compiler process, all at once,
then linked into the module by the backend's compiler. ``.hip`` and ``.cu`` sources go to nvcc or hipcc; ``.cpp``
sources, and every source on the cpu backend, to g++ as host C++. A family's pybind11 layer as a ``.cpp`` so
compiles beside its kernels instead of after them, and without nvcc's device pass and cudafe++ over pybind11's
headers; kernels split over several ``.hip`` files compile in parallel. On moe_combine the whole .hip with its
pybind11 layer took several times as long as the kernels alone, and a source that only includes pybind11.h is a
long unit by itself, because pybind11 3 emits its dispatcher and internals in every translation unit that
includes it (112 KB of code). A precompiled pybind11.h cost more to build than it saved a module's binding
compile: no gain on a cold cache, so not used.

Cache key: the sources, every header (``.h``, ``.hpp``, ``.cuh``) under the given include directories and the
sources' own directories (a quoted ``#include`` finds headers there), the compiler path and ``--version``,
the target architecture, the flags, the link arguments and the Python version. A change to any of them builds
anew; nothing is ever rebuilt in place.

Cache location (``cache_dir()``): ``$GRAPHSAFE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/graphsafe/build``,
else ``~/.cache/graphsafe/build``. A user cache, never the package directory: an installed package may sit in
a read-only site-packages, and one cache serves every checkout and install of the same sources.

Integrity: each library's sha256 is recorded beside it when it is built and checked before it is first loaded
in a process; an entry that fails the check (a truncated or overwritten .so) is discarded and built again.

Concurrency: parallel builds (pytest-xdist workers, one worker per GPU) each compile in a private temporary
directory and ``os.rename`` it into place. Renaming a directory is atomic on one filesystem and fails when the
target exists; the loser then discards its copy and uses the winner's. No lock is needed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch

BACKENDS = ("cuda", "hip", "cpu")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh")
DEVICE_SUFFIXES = (".hip", ".cu")
LOG_SECONDS = "# "  # build.log: the line after a command's output, "# <wall seconds> s"

_INSTALL_HINT = {
    "nvcc": "install the CUDA toolkit (nvcc), or set GRAPHSAFE_NVCC / CUDA_HOME",
    "hipcc": "apt-get install hipcc (Debian) or install ROCm, or set GRAPHSAFE_HIPCC / ROCM_PATH",
    "g++": "apt-get install g++, or set CXX",
}


class CompilerNotFound(RuntimeError):
    """The compiler a backend needs is not installed; the message names it and what to install."""


class BuildError(RuntimeError):
    """The compiler ran and failed; the message carries the command and its output."""


def cache_dir() -> pathlib.Path:
    """Where built libraries live (module note, "Cache location"); read from the environment on every call."""
    explicit = os.environ.get("GRAPHSAFE_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return root / "graphsafe" / "build"


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
        # 9.0 (H100 / H200): the arch-specific target, whose warpgroup MMA (wgmma) the MoE GEMM's prefill uses;
        # its code runs on compute capability 9.0 only, which is the device it is built for here.
        return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
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
    sources: Sequence[pathlib.Path | str],
    include_dirs: Iterable[pathlib.Path | str] = (),
    *,
    backend: str | None = None,
    extra_flags: tuple[str, ...] = (),
    unit_flags: Mapping[pathlib.Path | str, tuple[str, ...]] | None = None,
    link: tuple[str, ...] = (),
    arch: str | None = None,
) -> types.ModuleType:
    """Compile a pybind11 module (no torch headers) and import it.

    The sources see ``-DGS_MODULE_NAME=<name>``, so one source can be built under several names with
    ``PYBIND11_MODULE(GS_MODULE_NAME, m)``. nvcc compiles ``.hip``/``.cu`` sources as CUDA (``-x cu``,
    ``--fmad=false``), hipcc as HIP (``-ffp-contract=off``), g++ every other source, and every source of the cpu
    backend, as C++ (``-O2 -ffp-contract=off -fopenmp``): no contraction anywhere, so kernels and CPU
    implementations that write the same math in the same order agree bitwise. Each source is its own
    translation unit, compiled at the same time as the others (module note, "Sources"). ``include_dirs``
    become ``-I`` flags and their headers part of the cache key; ``extra_flags`` go to every compile,
    ``unit_flags[source]`` to that source's compile after them (the last ``-O`` wins).
    """
    library = _build(name, sources, include_dirs, backend, extra_flags, unit_flags, link, arch, pybind=True)
    return _import(name, library)


def build_shared_library(
    name: str,
    sources: Sequence[pathlib.Path | str],
    include_dirs: Iterable[pathlib.Path | str] = (),
    *,
    backend: str | None = None,
    extra_flags: tuple[str, ...] = (),
    unit_flags: Mapping[pathlib.Path | str, tuple[str, ...]] | None = None,
    link: tuple[str, ...] = (),
    arch: str | None = None,
) -> pathlib.Path:
    """Same as build_extension but a plain shared library ``lib<name>.so``; returns its path."""
    return _build(name, sources, include_dirs, backend, extra_flags, unit_flags, link, arch, pybind=False)


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


def _compile_flags(
    language: str, backend: str, arch: str, pybind: bool, include_dirs: list[pathlib.Path]
) -> list[str]:
    """Flags that turn one source into an object (``-c``): ``language`` is ``device`` (nvcc ``-x cu``, hipcc)
    or ``host`` (g++ as C++: every source of the cpu backend, and ``.cpp`` sources of the cuda and hip backends,
    such as a family's pybind11 layer)."""
    common = ["-O2", "-std=c++17"]
    includes = [f"-I{d}" for d in include_dirs]
    if pybind:
        import pybind11

        includes += [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}"]
    if language == "host":
        # -x c++: g++ does not know the .hip suffix; a .hip built for the CPU takes hip_compat.h's host branch.
        return [*common, "-fPIC", "-ffp-contract=off", "-fopenmp", "-x", "c++", *includes]
    if backend == "cuda":
        # --fmad=false: no FMA contraction in device code; -ffp-contract=off for host code.
        # -split-compile=0: cicc and ptxas optimize the kernels on as many threads as there are CPUs ("minimal
        # (if any) impact on performance of the compiled binary", nvcc 13.0 --help). moe_gemm's kernels
        # alone on 2 busy cores took much less wall time for the same compiler CPU.
        return [
            *common,
            "-x",
            "cu",
            f"-arch={arch}",
            *(["-DGS_SM90A=1"] if arch == "sm_90a" else []),  # host code's sign of the wgmma kernels' build
            "-split-compile=0",
            "--fmad=false",
            "-Xcompiler",
            "-fPIC,-ffp-contract=off",
            *includes,
        ]
    return [*common, "-fPIC", f"--offload-arch={arch}", "-ffp-contract=off", *includes]


def _link_flags(backend: str, arch: str) -> list[str]:
    if backend == "cuda":
        return ["-shared", f"-arch={arch}"]
    if backend == "hip":
        return ["-shared", "-fPIC", f"--offload-arch={arch}"]
    return ["-shared", "-fPIC", "-fopenmp"]


def _language(source: pathlib.Path, backend: str) -> str:
    """``device`` for .hip/.cu sources on the cuda and hip backends, else ``host`` (module note, "Sources")."""
    return "device" if backend != "cpu" and source.suffix in DEVICE_SUFFIXES else "host"


def _headers(directories: Iterable[pathlib.Path]) -> list[pathlib.Path]:
    found: set[pathlib.Path] = set()
    for directory in directories:
        if directory.is_dir():
            found.update(p for p in directory.rglob("*") if p.suffix in HEADER_SUFFIXES and p.is_file())
    return sorted(found)


def _cache_key(
    sources: list[pathlib.Path],
    header_dirs: list[pathlib.Path],
    compilers: Iterable[pathlib.Path],
    arch: str,
    steps: list[_Step],
    link: list[str],
) -> str:
    digest = hashlib.sha256()
    for path in [*sources, *_headers(header_dirs)]:
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    for compiler in compilers:
        version = _compiler_version(compiler, compiler.stat().st_mtime_ns)
        digest.update(str(compiler).encode() + b"\0" + version.encode() + b"\0")
    for step in steps:
        for part in ("--compile--", str(step.compiler), str(step.source), *step.flags):
            digest.update(part.encode() + b"\0")
    for part in (arch, "--link--", *link, sys.version):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _output_name(name: str, pybind: bool) -> str:
    return name + sysconfig.get_config_var("EXT_SUFFIX") if pybind else f"lib{name}.so"


@dataclasses.dataclass(frozen=True)
class _Step:
    """One source's compile to an object: ``compiler flags -c source -o object``."""

    compiler: pathlib.Path
    flags: tuple[str, ...]
    source: pathlib.Path
    env: dict[str, str] | None

    def command(self, obj: pathlib.Path) -> list[str]:
        return [str(self.compiler), *self.flags, "-c", str(self.source), "-o", str(obj)]


@dataclasses.dataclass(frozen=True)
class _Ran:
    command: list[str]
    result: subprocess.CompletedProcess[str]
    seconds: float


def _run(command: list[str], env: dict[str, str] | None) -> _Ran:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    return _Ran(command, result, time.perf_counter() - start)


def _build(
    name: str,
    sources: Sequence[pathlib.Path | str],
    include_dirs: Iterable[pathlib.Path | str],
    backend: str | None,
    extra_flags: tuple[str, ...],
    unit_flags: Mapping[pathlib.Path | str, tuple[str, ...]] | None,
    link: tuple[str, ...],
    arch: str | None,
    pybind: bool,
) -> pathlib.Path:
    if not name.isidentifier():
        raise ValueError(f"name must be a Python identifier (it is the module's init symbol), got {name!r}")
    if isinstance(include_dirs, str | pathlib.Path):
        raise TypeError(f"include_dirs must be a list of directories, got the single path {include_dirs!r}")
    resolved = [pathlib.Path(s).resolve() for s in sources]
    if not resolved:
        raise ValueError("sources must name at least one file")
    missing = [str(s) for s in resolved if not s.is_file()]
    if missing:
        raise FileNotFoundError(f"sources not found: {missing}")
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"a source is listed twice: {[str(s) for s in resolved]}")
    per_unit = {pathlib.Path(k).resolve(): tuple(v) for k, v in (unit_flags or {}).items()}
    strangers = [str(k) for k in per_unit if k not in resolved]
    if strangers:
        raise ValueError(f"unit_flags name sources that are not built: {strangers}")
    includes = [pathlib.Path(d).resolve() for d in include_dirs]
    absent = [str(d) for d in includes if not d.is_dir()]
    if absent:
        raise FileNotFoundError(f"include_dirs not found: {absent}")
    backend = backend or detect_backend()
    _check_backend(backend)
    compiler = find_compiler(backend)  # the backend's compiler links, even when every source is host C++
    arch = arch or device_arch(backend)
    languages = [_language(s, backend) for s in resolved]
    host_compiler = find_compiler("cpu") if "host" in languages else compiler
    # Debian's hipcc picks the NVIDIA platform when nvcc is on PATH unless HIP_PLATFORM says otherwise.
    env = dict(os.environ, HIP_PLATFORM="amd") if backend == "hip" else None
    defines = [f"-DGS_MODULE_NAME={name}", *extra_flags]
    steps = [
        _Step(
            compiler if language == "device" else host_compiler,
            (*_compile_flags(language, backend, arch, pybind, includes), *defines, *per_unit.get(source, ())),
            source,
            env if language == "device" else None,
        )
        for source, language in zip(resolved, languages, strict=True)
    ]
    link_flags = [*_link_flags(backend, arch), *link]
    header_dirs = list(dict.fromkeys([*includes, *(s.parent for s in resolved)]))
    key = _cache_key(resolved, header_dirs, dict.fromkeys([compiler, host_compiler]), arch, steps, link_flags)
    root = cache_dir()
    final_dir = root / f"{name}-{key}"
    output = final_dir / _output_name(name, pybind)
    if output.is_file() and _intact(output):
        return output
    if final_dir.exists():  # cut short or changed since it was built: loading it could crash (SIGBUS)
        _discard(final_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp_dir = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
    try:
        _compile_and_link(name, backend, arch, compiler, steps, link_flags, tmp_dir / output.name, env)
        _record_digest(tmp_dir / output.name)
        try:
            os.rename(tmp_dir, final_dir)
        except OSError:
            if not output.is_file():  # not a lost race: something else is wrong
                raise
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return output


# Beside each built library: the sha256 of its bytes, written before the build's folder is renamed into place.
# A library is loaded only when its bytes still have that digest: a truncated .so (a full disk, a copy cut
# short) made dlopen die with SIGBUS, which a run reported as the case's own make_inputs dying.
DIGEST_SUFFIX = ".sha256"
# Libraries found intact in this process, by path, with the (inode, size, mtime) they had: each is hashed once
# per process (a few ms for the largest, moe_gemm's), and again only when its file changes.
_VERIFIED: dict[pathlib.Path, tuple[int, int, int]] = {}


def _file_digest(path: pathlib.Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _record_digest(library: pathlib.Path) -> None:
    library.with_name(library.name + DIGEST_SUFFIX).write_text(_file_digest(library) + "\n")


def _intact(library: pathlib.Path) -> bool:
    """Whether the cached `library` has the digest recorded when it was built (an entry without one, from
    before digests were recorded, counts as not intact and is built again once)."""
    try:
        stat = library.stat()
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if _VERIFIED.get(library) == identity:
            return True
        recorded = library.with_name(library.name + DIGEST_SUFFIX).read_text().strip()
        intact = recorded == _file_digest(library)
    except OSError:
        return False
    if intact:
        _VERIFIED[library] = identity
    return intact


def _discard(entry: pathlib.Path) -> None:
    """Move a bad cache entry aside (one rename: a process that races to rebuild it finds no half-deleted
    folder), then delete it."""
    aside = entry.with_name(f".bad-{entry.name}-{os.getpid()}-{threading.get_ident()}")
    try:
        os.rename(entry, aside)
    except OSError:
        return  # another process moved it first, or the cache is read-only: the rebuild below says which
    shutil.rmtree(aside, ignore_errors=True)


def _compile_and_link(
    name: str,
    backend: str,
    arch: str,
    compiler: pathlib.Path,
    steps: list[_Step],
    link_flags: list[str],
    output: pathlib.Path,
    env: dict[str, str] | None,
) -> None:
    """Every source to an object at once (one compiler process each), then one link; the first failing
    command, in source order, is the BuildError. build.log in the output folder keeps every command, its
    output and its wall seconds (``# 5.21 s``; bench/build_times.py reads them)."""
    work = output.parent
    objects = [work / f"{i}-{step.source.stem}.o" for i, step in enumerate(steps)]
    commands = [step.command(obj) for step, obj in zip(steps, objects, strict=True)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="gs-cc") as pool:
        log = list(pool.map(_run, commands, [step.env for step in steps]))
    failed = [ran for ran in log if ran.result.returncode != 0]
    if not failed:
        log.append(_run([str(compiler), *map(str, objects), "-o", str(output), *link_flags], env))
        failed = [log[-1]] if log[-1].result.returncode != 0 else []
    (work / "build.log").write_text(
        "".join(
            f"$ {' '.join(r.command)}\n{r.result.stdout}{r.result.stderr}{LOG_SECONDS}{r.seconds:.2f} s\n"
            for r in log
        )
    )
    if failed:
        ran = failed[0]
        raise BuildError(
            f"building {name} failed ({backend}, {arch}):\n$ {' '.join(ran.command)}\n"
            f"{ran.result.stdout}{ran.result.stderr}"
        )


# ------------------------------------------------------------------------------------- planned builds
# Kernel libraries build on first use, inside the first case that calls them: one case then waits for every
# compiler in turn (a cold CPU suite's first case waited for all), and a run with several families compiles
# them one after another. A library declares its builds at import (`plan`); before the first case the runner
# runs the ones the selected cases can reach (`planned`) at once in a thread pool (`prebuild`): each compiler
# is its own process, so the threads overlap them and a cold run waits for the slowest family, not the sum.
# The cases then find every library in the cache (a warm build call is a hash of the sources).


@dataclasses.dataclass(frozen=True)
class PlannedBuild:
    """One build a library will need: `run()` builds (or finds cached) and imports it."""

    label: str  # for progress lines: "moe_gemm cuda"
    device: str  # "cpu": needed on every run; "gpu": only on runs with a GPU backend
    owner: str  # the module that declared it
    run: Callable[[], object]


_PLANNED: dict[str, PlannedBuild] = {}
# Expected seconds of a cold build per compiler until this machine has timed one (build_seconds.json): the
# slowest family's wall time with its units compiled at once (reports/performance.md: the H200 host g++
# 7.4-11.2 s, nvcc sm_90a 6.4-11.2 s; the busy 2-core box g++ 8-12 s, nvcc 7-24 s; hipcc taken as g++).
_DEFAULT_SECONDS = {"cpu": 12.0, "cuda": 20.0, "hip": 12.0}


def plan(label: str, run: Callable[[], object], *, device: str, owner: str) -> None:
    """Declare a build that `prebuild` may run ahead of the first case (same label: replaced)."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    _PLANNED[label] = PlannedBuild(label, device, owner, run)


def planned(roots: Iterable[str], devices: Iterable[str]) -> list[PlannedBuild]:
    """The planned builds of `devices` whose owner module the modules `roots` reach through their globals
    (module objects, and the modules of functions and classes they hold), in declaration order."""
    wanted = set(devices)
    owners = {b.owner for b in _PLANNED.values() if b.device in wanted}
    if not owners:
        return []
    packages = {o.split(".", 1)[0] for o in owners}
    seen: set[str] = set()
    stack = [r for r in roots if r in sys.modules]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for value in list(vars(sys.modules[name]).values()):
            target = (
                value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            )
            if (
                isinstance(target, str)
                and target not in seen
                and target in sys.modules
                and target.split(".", 1)[0] in packages | {r.split(".", 1)[0] for r in roots}
            ):
                stack.append(target)
    return [b for b in _PLANNED.values() if b.device in wanted and b.owner in seen]


def expected_seconds(build: PlannedBuild) -> float:
    """How long a cold build of `build` took here last time (build_seconds.json), else its compiler's default."""
    backend = "cpu" if build.device == "cpu" else detect_backend()
    return float(_history().get(build.label, _DEFAULT_SECONDS.get(backend, 12.0)))


def prebuild(
    builds: Sequence[PlannedBuild],
    *,
    jobs: int | None = None,
    on_event: Callable[[str, PlannedBuild, float, BaseException | None], None] | None = None,
) -> dict[str, BaseException]:
    """Run `builds` in a thread pool (default: one thread per build, at most the cores); returns the
    failures by label, without raising: the case that needs a failed build meets the same error when it
    loads the library, and gets its verdict from it. `on_event(kind, build, seconds, error)` with kind
    "start" or "done" (error set when it failed) drives the progress lines."""
    failures: dict[str, BaseException] = {}
    if not builds:
        return failures
    workers = jobs or max(1, min(len(builds), os.cpu_count() or 1))

    def one(build: PlannedBuild) -> None:
        if on_event:
            on_event("start", build, 0.0, None)
        start = time.perf_counter()
        error: BaseException | None = None
        try:
            build.run()
        except Exception as exc:  # reported per build, raised again where a case loads the library
            error = exc
            failures[build.label] = exc
        seconds = time.perf_counter() - start
        if error is None and seconds > _CACHE_HIT_SECONDS:
            _remember(build.label, seconds)
        if on_event:
            on_event("done", build, seconds, error)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gs-build") as pool:
        list(pool.map(one, builds))
    return failures


# A build call that returns faster than this found its library in the cache: not a compile time to remember.
_CACHE_HIT_SECONDS = 0.5
_HISTORY_LOCK = threading.Lock()


def _history_path() -> pathlib.Path:
    return cache_dir() / "build_seconds.json"


def _history() -> dict[str, float]:
    try:
        data = json.loads(_history_path().read_text())
    except (OSError, ValueError):
        return {}
    return (
        {k: float(v) for k, v in data.items() if isinstance(v, int | float)} if isinstance(data, dict) else {}
    )


def _remember(label: str, seconds: float) -> None:
    with _HISTORY_LOCK:
        data = _history()
        data[label] = round(seconds, 2)
        path = _history_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError:  # a read-only cache still builds; it only forgets the timing
            pass


_IMPORTED: dict[pathlib.Path, types.ModuleType] = {}


def compile_seconds(cache: pathlib.Path) -> list[tuple[str, float]]:
    """(translation unit, wall seconds) of each compiler command of the builds under `cache` (a cache
    folder), from their build.log files ("link" for the link step): which unit is a build's critical path."""
    found = []
    for log in sorted(cache.glob("*/build.log")):
        command: list[str] = []
        for line in log.read_text().splitlines():
            if line.startswith("$ "):
                command = line[2:].split()
            elif line.startswith(LOG_SECONDS) and line.endswith(" s") and command:
                unit = pathlib.Path(command[command.index("-c") + 1]).name if "-c" in command else "link"
                found.append((unit, float(line[len(LOG_SECONDS) : -2])))
    return found


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


__all__ = [
    "BACKENDS",
    "BuildError",
    "CompilerNotFound",
    "PlannedBuild",
    "build_extension",
    "build_shared_library",
    "cache_dir",
    "detect_backend",
    "device_arch",
    "expected_seconds",
    "find_compiler",
    "plan",
    "planned",
    "prebuild",
]
