"""Environment fingerprint: what a report needs to say about the machine that produced it.

A verdict is only reproducible with the GPU, architecture, driver, runtime, torch, compilers, CPU, affinity and
commit it came from (the seed report quotes all of them). `collect` gathers them as strings and never raises:
a report written on a machine without nvidia-smi, git or a GPU is still a report, with "n/a" in those rows.
`write` stores them as DIR/fingerprint.json next to results.csv.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

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


def collect(backend: str) -> dict[str, str]:
    """The fingerprint of this process's environment, every value a one-line string; never raises."""
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
    }
    return {key: _safe(probes[key]) for key in KEYS}


def write(run_dir: Path | str, fp: dict[str, str]) -> Path:
    """Write DIR/fingerprint.json (sorted as KEYS, extra keys after) and return its path."""
    path = Path(run_dir) / "fingerprint.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = {key: fp[key] for key in KEYS if key in fp} | {k: v for k, v in fp.items() if k not in KEYS}
    path.write_text(json.dumps(ordered, indent=2) + "\n")
    return path


def read(run_dir: Path | str) -> dict[str, str]:
    """DIR/fingerprint.json as a dict; an empty dict when the run has none (older or killed runs)."""
    path = Path(run_dir) / "fingerprint.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
