"""Environment fingerprint: what a report needs to say about the machine that produced it.

A verdict is only reproducible with the GPU, architecture, driver, runtime, torch, compilers, CPU, affinity and
commit it came from (the seed report quotes all of them), and with the libraries and settings that change
what a kernel does: cuDNN, Triton, numpy, the OS, the caching allocator's configuration (expandable segments
change which addresses a graph's pool hands out), the launch and determinism variables (CUBLAS_WORKSPACE_CONFIG
picks cuBLAS kernels), the versions of the packages the user's case files import, and a content hash of each
case file. torch.utils.collect_env (what `python -m torch.utils.collect_env` prints for torch's bug reports)
supplies the OS, libc, cuDNN, the compiled CUDA/HIP versions and torch's view of the allocator settings.
`collect` gathers them as strings and never raises: a report written on a machine without nvidia-smi, git or
a GPU is still a report, with "n/a" in those rows. `write` stores them as DIR/fingerprint.json.
"""

from __future__ import annotations

import ast
import concurrent.futures
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graphsafe.reports.atomic import write_atomic

NA = "n/a"
NOT_FOUND = "not found"

# Every fingerprint has exactly these keys, in this order (reports print them in this order).
KEYS: tuple[str, ...] = (
    "backend",
    "gpu_name",
    "gpu_arch",
    "gpu_count",
    "driver",
    "runtime",
    "torch",
    "nvcc",
    "hipcc",
    "gxx",
    "cpu_model",
    "cpu_affinity",
    "python",
    "git_commit",
    "source_digest",
    "hostname",
    "time",
    "os",
    "libc",
    "cuda_compiled",
    "cudnn",
    "triton",
    "numpy",
    "allocator_config",
    "runtime_env",
    "case_packages",
    "case_files",
)

# NOTE on timeouts: nvidia-smi can take seconds on a cold driver (persistence mode off) and hangs outright on
# a wedged GPU; a fingerprint must not turn a report into a hang, so every external tool gets a deadline.
_TOOL_TIMEOUT_S = 15.0
# The checkout (or install folder) holding the harness package: where git and the source digest look.
_REPO_ROOT = Path(__file__).resolve().parents[2]


def _safe(fn: Callable[[], str]) -> str:
    """Run one probe; any failure (missing module, tool, permission, odd output) becomes "n/a"."""
    try:
        value = fn()
    except Exception:
        return NA
    value = " ".join(str(value).split())  # one line: values go into Markdown table cells
    return value or NA


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    """stdout of a command, or raise (callers wrap in _safe)."""
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=_TOOL_TIMEOUT_S,
        cwd=cwd,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout


def _version_line(text: str) -> str:
    """The line of a `--version` banner that carries the version.

    NOTE on nvcc: its first line is "nvcc: NVIDIA (R) Cuda compiler driver" with no version; the version is on
    "Cuda compilation tools, release 13.0, V13.0.88". g++ and hipcc put it on the first line. So: the first line
    with a dotted number, else the first non-empty line.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\d+\.\d+", line):
            return line
    return lines[0] if lines else NA


def _compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        return NOT_FOUND
    return _safe(lambda: _version_line(_run([path, "--version"])))


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _runtime() -> str:
    import torch

    if getattr(torch.version, "hip", None):
        return f"HIP {torch.version.hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return "none (CPU build of torch)"


def _cudnn_version() -> str:
    """The cuDNN (or MIOpen) torch loaded, as torch reports it; "n/a" when it has none."""
    import torch

    if not torch.backends.cudnn.is_available():
        return NA
    version = torch.backends.cudnn.version()
    return f"{'MIOpen' if getattr(torch.version, 'hip', None) else 'cuDNN'} {version}" if version else NA


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _gpu_name() -> str:
    import torch

    if not _cuda_available():
        return NA
    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).name)


def _gpu_count() -> str:
    import torch

    return str(torch.cuda.device_count()) if _cuda_available() else "0"


def _gpu_arch() -> str:
    """sm_XX on NVIDIA; the full gcnArchName on AMD (e.g. "gfx942:sramecc+:xnack-").

    The feature suffix matters for code objects (xnack- objects do not load on xnack+), so it is kept here;
    `baseline.platform_slug` keeps only the gfx part.
    """
    import torch

    if not _cuda_available():
        return NA
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    gcn = getattr(props, "gcnArchName", "")
    if getattr(torch.version, "hip", None) and gcn:
        return str(gcn)
    return f"sm_{props.major}{props.minor}"


def _driver() -> str:
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        return out.splitlines()[0].strip()
    if shutil.which("rocm-smi"):
        out = _run(["rocm-smi", "--showdriverversion"])
        for line in out.splitlines():
            if "version" in line.lower():
                return line.split(":", 1)[-1].strip()
    return NA


def _cpu_model() -> str:
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    # x86 says "model name" (its "model" is a bare family number such as "17"); arm64 kernels say "Model" or
    # "Hardware" where they say anything.
    for key in ("model name", "hardware", "model"):
        if fields.get(key):
            return fields[key]
    return platform.processor() or NA


def format_cpu_set(cpus: set[int] | frozenset[int]) -> str:
    """{0,1,2,3,8} -> "0-3,8 (5 CPUs)": the form taskset -c takes, so a reader can pin the same way."""
    ordered = sorted(cpus)
    ranges: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return f"{','.join(ranges)} ({len(ordered)} CPUs)"


def _cpu_affinity() -> str:
    return format_cpu_set(os.sched_getaffinity(0))


def _git_commit() -> str:
    commit = _run(["git", "rev-parse", "HEAD"], cwd=_REPO_ROOT).strip()
    # NOTE on "dirty": untracked files (run directories, scratch scripts) do not change what ran, so only
    # modified tracked files mark the tree dirty, as `git describe --dirty` does.
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_REPO_ROOT)
    return commit + ("-dirty" if status.strip() else "")


# What a run executes: the tester, the kernels and the built-in cases (sources only; build outputs and
# caches are not what ran, they are made from these).
SOURCE_DIRS = ("harness", "kernels", "cases")
SOURCE_SUFFIXES = frozenset({".py", ".hip", ".cpp", ".cu", ".h", ".hpp"})


def source_digest(root: Path | None = None) -> str:
    """sha256 (first 16 hex digits) over the relative path and bytes of every source file under
    SOURCE_DIRS. NOTE on why, besides git_commit: a copied work tree (what a lent GPU machine runs) can carry
    a stale .git or none, so git may name a commit that is not what ran; two runs with equal digests ran the
    same sources whatever git says."""
    root = _REPO_ROOT if root is None else root
    digest = hashlib.sha256()
    files = sorted(
        path
        for top in SOURCE_DIRS
        for path in (root / top).rglob("*")
        if path.suffix in SOURCE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts
    )
    if not files:
        return NA
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).astimezone().isoformat(timespec="seconds")


# torch's collect_env runs nvidia-smi, pip and ldconfig without deadlines; a wedged driver must not hang a report.
_COLLECT_ENV_TIMEOUT_S = 60.0
_ENV_INFO: dict[str, Any] = {}


def _env_info() -> Any:
    """torch.utils.collect_env.get_env_info(), once per process, in a thread with a deadline."""
    if "info" not in _ENV_INFO:
        from torch.utils import collect_env

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            _ENV_INFO["info"] = pool.submit(collect_env.get_env_info).result(timeout=_COLLECT_ENV_TIMEOUT_S)
        except Exception:
            _ENV_INFO["info"] = None
        finally:
            pool.shutdown(wait=False)
    return _ENV_INFO["info"]


def _env_field(name: str) -> Callable[[], str]:
    def read() -> str:
        info = _env_info()
        value = getattr(info, name, None) if info is not None else None
        return NA if value in (None, "", "None", "N/A", "{}") else str(value)

    return read


def _or(first: Callable[[], str], fallback: Callable[[], str]) -> Callable[[], str]:
    """`first`'s value, else `fallback`'s: collect_env gives nothing when it fails or passes its deadline
    (its pip and ldconfig runs under a loaded test run), and the platform module still names the OS and libc."""

    def read() -> str:
        value = first()
        return value if value != NA else fallback()

    return read


def _distribution_version(*names: str) -> str:
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return NOT_FOUND


# Variables that change what the allocator hands out, or how kernels are launched and chosen.
ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                       "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NO_HIP_MEMORY_CACHING")  # fmt: skip
RUNTIME_VARIABLES = ("CUDA_LAUNCH_BLOCKING", "HIP_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
                     "CUBLAS_WORKSPACE_CONFIG", "TORCH_CUDNN_V8_API_DISABLED", "NVIDIA_TF32_OVERRIDE",
                     "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS")  # fmt: skip


def _variables(names: Sequence[str]) -> str:
    found = [f"{n}={os.environ[n]}" for n in names if n in os.environ]
    return "; ".join(found) if found else "default (none set)"


def _allocator_config() -> str:
    text = _variables(ALLOCATOR_VARIABLES)
    torch_view = _env_field("caching_allocator_config")()
    return text if torch_view == NA else f"{text}; torch reads: {torch_view}"


def case_file_paths(case_sources: Sequence[str]) -> list[Path]:
    """The files behind --case arguments: a path as given, a module through its import spec."""
    paths = []
    for source in case_sources:
        path = Path(source)
        if source.endswith(".py") or os.sep in source or path.exists():
            if path.is_file():
                paths.append(path)
            continue
        spec = importlib.util.find_spec(source) if source not in sys.modules else sys.modules[source].__spec__
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            paths.append(Path(spec.origin))
    return paths


def case_files_digest(case_sources: Sequence[str]) -> str:
    """ "my_cases.py sha256:0123456789abcdef; ..." (first 16 hex digits of each file's bytes); "none" without.

    The bytes as this process loaded them (graphsafe.case.loaded_file_digests), so a case file edited while
    the run goes is recorded as the version that ran; a file not loaded here is hashed as it is now."""
    from graphsafe.case import loaded_file_digests

    loaded = loaded_file_digests()
    parts = []
    for path in case_file_paths(case_sources):
        digest = loaded.get(str(path.resolve())) or hashlib.sha256(path.read_bytes()).hexdigest()
        parts.append(f"{path} sha256:{digest[:16]}")
    return "; ".join(parts) if parts else "none"


def case_file_digest_list(case_files: str) -> list[tuple[str, str]]:
    """A fingerprint's case_files value as (file name, digest) pairs, sorted: what two runs must share to
    have run the same case files, wherever each machine keeps them."""
    pairs = []
    for part in case_files.split("; "):
        path, _, digest = part.rpartition(" sha256:")
        if path:
            pairs.append((Path(path).name, digest))
    return sorted(pairs)


# What a run was asked to do, besides its environment: the graphsafe version and the run options that change
# what a case checks. `report merge` refuses shards that differ in any of them (graphsafe.reports.merge).
RUN_SETTING_KEYS: tuple[str, ...] = ("graphsafe_version", "seed", "replays", "rebuilds", "live_graphs")


def run_settings(seed: int, replays: int, rebuilds: int, live_graphs: int) -> dict[str, str]:
    """The RUN_SETTING_KEYS of one run, as fingerprint strings (the CLI adds them after KEYS)."""
    import graphsafe

    return {
        "graphsafe_version": str(graphsafe.__version__),
        "seed": str(seed),
        "replays": str(replays),
        "rebuilds": str(rebuilds),
        "live_graphs": str(live_graphs),
    }


def imported_top_level(path: Path) -> list[str]:
    """Top-level module names a Python file imports (absolute imports only), in first-seen order."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(dict.fromkeys(alias.name.split(".")[0] for alias in node.names))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names[node.module.split(".")[0]] = None
    return list(names)


def case_packages(case_sources: Sequence[str]) -> str:
    """ "torch 2.13.0, flashinfer-python 0.2.1, mylib (no distribution)": the distributions behind the
    case files' imports (importlib.metadata.packages_distributions), the standard library left out."""
    modules: dict[str, None] = {}
    for path in case_file_paths(case_sources):
        modules.update(dict.fromkeys(imported_top_level(path)))
    if not modules:
        return "none"
    owners = importlib.metadata.packages_distributions()
    parts: dict[str, None] = {}
    for module in modules:
        if module in sys.stdlib_module_names or module == "__future__":
            continue
        distributions = owners.get(module, [])
        if not distributions:
            parts[f"{module} (no distribution)"] = None
        for dist in distributions:
            parts[_distribution_version(dist)] = None
    return ", ".join(parts) if parts else "none"


def collect(backend: str, case_sources: Sequence[str] = ()) -> dict[str, str]:
    """The fingerprint of this process's environment, every value a one-line string; never raises.

    `case_sources`: the run's --case files and modules (their imports' versions and their content hashes)."""
    probes: dict[str, Callable[[], str]] = {
        "backend": lambda: str(backend),
        "gpu_name": _gpu_name,
        "gpu_arch": _gpu_arch,
        "gpu_count": _gpu_count,
        "driver": _driver,
        "runtime": _runtime,
        "torch": _torch_version,
        "nvcc": lambda: _compiler("nvcc"),
        "hipcc": lambda: _compiler("hipcc"),
        "gxx": lambda: _compiler("g++"),
        "cpu_model": _cpu_model,
        "cpu_affinity": _cpu_affinity,
        "python": lambda: f"{platform.python_implementation()} {platform.python_version()}",
        "git_commit": _git_commit,
        "source_digest": source_digest,
        "hostname": socket.gethostname,
        "time": _now,
        "os": _or(_env_field("os"), lambda: f"{platform.system()} {platform.release()} ({platform.machine()})"),
        "libc": _or(_env_field("libc_version"), lambda: "-".join(platform.libc_ver()) or NA),
        "cuda_compiled": lambda: (
            " / ".join(
                v
                for v in (_env_field("cuda_compiled_version")(), _env_field("hip_compiled_version")())
                if v != NA
            )
            or NA
        ),
        "cudnn": lambda: _env_field("cudnn_version")() if _cudnn_version() == NA else _cudnn_version(),
        "triton": lambda: _distribution_version("triton", "pytorch-triton-rocm", "pytorch-triton"),
        "numpy": lambda: _distribution_version("numpy"),
        "allocator_config": _allocator_config,
        "runtime_env": lambda: _variables(RUNTIME_VARIABLES),
        "case_packages": lambda: case_packages(case_sources),
        "case_files": lambda: case_files_digest(case_sources),
    }
    return {key: _safe(probes[key]) for key in KEYS}


def write(run_dir: Path | str, fp: dict[str, str]) -> Path:
    """Write DIR/fingerprint.json (sorted as KEYS, extra keys after) and return its path."""
    path = Path(run_dir) / "fingerprint.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = {key: fp[key] for key in KEYS if key in fp} | {k: v for k, v in fp.items() if k not in KEYS}
    write_atomic(path, json.dumps(ordered, indent=2) + "\n")
    return path


def read(run_dir: Path | str) -> dict[str, str]:
    """DIR/fingerprint.json as a dict; an empty dict when the run has none (older or killed runs)."""
    path = Path(run_dir) / "fingerprint.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
