"""Faults of the runner a run must survive, each started for real through the CLI on the cpu backend: a case
that changes the process state, a build cache that cannot be written or holds a cut-short library, bad
GRAPHSAFE_* values, a case whose own code raises mid-file, and an op that leaves processes running.

Each test asserts the exit code, the verdicts and the message; each failed on the runner before these
guarantees (a leaked working directory made the next case `crash`, a read-only cache made cases
`eager_mismatch`, a truncated library killed its worker with SIGBUS, GRAPHSAFE_SEARCH_EXAMPLES=abc was a
`crash`, a raising reference stopped the run INCOMPLETE, seven `setsid sleep` processes outlived the run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from graphsafe import environment
from graphsafe.reports.results import STATUS_KEY, read_results

ROOT = Path(__file__).resolve().parent.parent

HEADER = """\
import os, subprocess, sys
import torch
import torch.nn.functional as F
from graphsafe import Case, register

def make(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, generator=g).to(device)}

def double(x):
    return x * 2
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc: Linux")


def graphsafe_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "graphsafe", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
        cwd=cwd,
    )


def case_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "cases.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def verdicts(run_dir: Path) -> dict[str, str]:
    df = read_results(run_dir)
    return dict(zip(df["case"], df["verdict"], strict=False))


def details(run_dir: Path, case: str) -> str:
    df = read_results(run_dir)
    return " ".join(d for d in df[df["case"] == case]["detail"] if isinstance(d, str) and d)


ISOLATION = [pytest.param(("--jobs", "1"), id="worker"), pytest.param(("--no-isolate",), id="no-isolate")]


# ------------------------------------------------------------------------------------ state between cases

LEAKS = """
from pathlib import Path

def reads_relative_file(seed, device):
    assert torch.is_grad_enabled(), "grad mode leaked into make_inputs"
    assert "GS_LEAKED" not in os.environ, "an environment variable leaked"
    scale = float(Path("scale.txt").read_text())  # relative to the directory the run started in
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, generator=g).to(device) * scale}

def turns_grad_off(seed, device):
    torch.set_grad_enabled(False)
    return make(seed, device)

def changes_everything(x):
    os.chdir("/")
    torch.set_default_dtype(torch.float64)
    os.environ["GS_LEAKED"] = "1"
    F.silu = lambda t: t * 0
    return x * 2

def silu_plus_zeros(x):
    return F.silu(x) + torch.zeros(8)  # float64 zeros if the default dtype leaked

register(Case(name="t.a_changes", make_inputs=turns_grad_off, op=changes_everything))
register(Case(name="t.b_after", make_inputs=reads_relative_file, op=silu_plus_zeros,
              reference=lambda x: x * torch.sigmoid(x)))
"""


@pytest.mark.parametrize("mode", ISOLATION)
def test_a_case_changing_process_state_does_not_decide_the_next(
    tmp_path: Path, mode: tuple[str, ...]
) -> None:
    """Case a changes the working directory, the default dtype, an environment variable, grad mode and
    torch.nn.functional.silu; case b then passes in the same process exactly as alone, and a's detail and
    stderr name each change."""
    cases = case_file(tmp_path, LEAKS)
    (tmp_path / "scale.txt").write_text("2.0")
    alone = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "-k", "t.b_after",
        "--report-dir", str(tmp_path / "alone"), *mode, cwd=tmp_path,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    out = tmp_path / "both"
    both = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out), *mode, cwd=tmp_path
    )
    assert both.returncode == 0, both.stderr
    assert verdicts(out) == {"t.a_changes": "pass", "t.b_after": "pass"}
    note = details(out, "t.a_changes")
    for change in (
        "working directory",
        "default dtype (torch.float32 -> torch.float64)",
        "environment variable GS_LEAKED (set by the case)",
        "grad mode (True -> False)",
        "torch.nn.functional.silu (rebound)",
    ):
        assert change in note, f"{change!r} not in {note!r}"
        assert change in both.stderr
    assert "case 't.a_changes' changed the process state" in note
    assert not details(out, "t.b_after")


def test_pytest_plugin_puts_process_state_back_between_items(tmp_path: Path) -> None:
    """The plugin runs cases in the pytest process: case b passes after case a there too."""
    cases = case_file(tmp_path, LEAKS)
    (tmp_path / "scale.txt").write_text("2.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--graph-backend", "cpu",
         "--graphsafe-case", str(cases), "-q"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_state_that_cannot_be_put_back_replaces_the_worker(tmp_path: Path) -> None:
    """A torch function mode left on the mode stack cannot be taken off from outside: the worker is replaced
    after the case, and the next case runs in a fresh one."""
    cases = case_file(
        tmp_path,
        """
        class DoublesTorchAdd(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                return out * 2 if func is torch.add else out

        def leaves_a_mode(x):
            DoublesTorchAdd().__enter__()  # never left
            return x * 2

        register(Case(name="t.mode_left", make_inputs=make, op=leaves_a_mode))
        register(Case(name="t.adds", make_inputs=make, op=lambda x: torch.add(x, 1), reference=lambda x: x + 1))
        """,
    )
    out = tmp_path / "run"
    proc = graphsafe_cli(
        "verify",
        "--backend",
        "cpu",
        "--case",
        str(cases),
        "--report-dir",
        str(out),
        "--jobs",
        "1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert verdicts(out) == {"t.mode_left": "pass", "t.adds": "pass"}
    note = details(out, "t.mode_left")
    assert "could not be put back: torch function mode stack depth" in note
    assert "this worker is replaced before the next case" in note


# ------------------------------------------------------------------------------------------ build cache

BUILDS_A_LIBRARY = """
import ctypes
from pathlib import Path
from graphsafe.toolkit import build_shared_library

SOURCE = Path(__file__).with_name("twice.cpp")

def twice_native(x):
    lib = ctypes.CDLL(str(build_shared_library("gs_fault_twice", [SOURCE], backend="cpu")))
    lib.twice.restype = ctypes.c_double
    lib.twice.argtypes = [ctypes.c_double]
    assert lib.twice(1.5) == 3.0
    return x * 2

register(Case(name="t.native", make_inputs=make, op=twice_native, reference=lambda x: x * 2))
"""


TWICE_SOURCE = 'extern "C" double twice(double v) { return 2 * v; }\n'


def test_build_cache_that_cannot_be_made_is_a_usage_error(tmp_path: Path) -> None:
    cases = case_file(tmp_path, 'register(Case(name="t.one", make_inputs=make, op=double))\n')
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    cache = a_file / "cache"
    out = tmp_path / "run"
    proc = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out),
        cwd=tmp_path, env={"GRAPHSAFE_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"GRAPHSAFE_CACHE_DIR={str(cache)!r} cannot be written" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "results.csv").exists()


def _read_only_mount_command() -> list[str] | None:
    """A command prefix that runs its rest with `$RO` a read-only tmpfs: `unshare` into user and mount
    namespaces (root may mount there), or None where that is not allowed."""
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            "d=$(mktemp -d) && mount -t tmpfs -o ro,size=64k none $d && ! touch $d/x",
        ],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return None
    return ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o ro,size=64k none "$RO" && exec "$@"', "sh"]


@linux_only
def test_read_only_build_cache_is_a_usage_error_before_any_case(tmp_path: Path) -> None:
    """A read-only GRAPHSAFE_CACHE_DIR: exit 2 naming it, no case run (before: every case that built a
    library was `eager_mismatch`, "Read-only file system")."""
    prefix = _read_only_mount_command()
    read_only = tmp_path / "ro-cache"
    read_only.mkdir()
    if prefix is None:
        if os.geteuid() == 0:
            pytest.skip(
                "needs a read-only folder: root writes through file modes, and unshare is not allowed"
            )
        read_only.chmod(0o555)
        prefix = []
    (tmp_path / "twice.cpp").write_text(TWICE_SOURCE)
    cases = case_file(tmp_path, BUILDS_A_LIBRARY)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(GRAPHSAFE_CACHE_DIR=str(read_only), RO=str(read_only))
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "graphsafe", "verify", "--backend", "cpu", "--case", str(cases),
         "--report-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"GRAPHSAFE_CACHE_DIR={str(read_only)!r} cannot be written" in proc.stderr
    assert "Read-only file system" in proc.stderr or "Permission denied" in proc.stderr
    assert not (out / "results.csv").exists()


@linux_only
def test_truncated_cached_library_is_rebuilt(tmp_path: Path) -> None:
    """Every library in the build cache cut to half its size between two runs (the case's own and
    graphsafe's comparison pass): the second run finds them, rebuilds them and the case passes (before: the
    worker died of SIGBUS loading one, and the case was a `crash`)."""
    (tmp_path / "twice.cpp").write_text(TWICE_SOURCE)
    cases = case_file(tmp_path, BUILDS_A_LIBRARY)
    cache = tmp_path / "cache"
    env = {"GRAPHSAFE_CACHE_DIR": str(cache)}
    first = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(tmp_path / "first"),
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    libraries = sorted(cache.glob("*/*.so"))
    assert any("gs_fault_twice" in str(p) for p in libraries), libraries
    for library in libraries:
        size = library.stat().st_size
        with library.open("r+b") as f:
            f.truncate(size // 2)
    out = tmp_path / "second"
    second = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out), "--jobs", "1",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert verdicts(out) == {"t.native": "pass"}
    for library in libraries:
        assert library.stat().st_size > 0
        digest = library.with_name(library.name + ".sha256").read_text().strip()
        import hashlib

        assert hashlib.sha256(library.read_bytes()).hexdigest() == digest, library


# ------------------------------------------------------------------------------------ GRAPHSAFE_* values


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GRAPHSAFE_SEARCH_EXAMPLES", "abc"),
        ("GRAPHSAFE_SEARCH_SECONDS", "-1"),
        ("GRAPHSAFE_SPIN_LIMIT_S", "nan"),
        ("GRAPHSAFE_ARCH", "sm-90"),
        ("GRAPHSAFE_NVCC", "/nonexistent/bin/nvcc"),
        ("GRAPHSAFE_REQUIRE_BROWSER", "yes"),
    ],
)
def test_bad_graphsafe_value_is_exit_2_naming_it(tmp_path: Path, name: str, value: str) -> None:
    """Found before anything runs, with the allowed values (before: GRAPHSAFE_SEARCH_EXAMPLES=abc made a
    searched case `crash`, exit 1; the others were read, if at all, only where they are used)."""
    cases = case_file(tmp_path, 'register(Case(name="t.one", make_inputs=make, op=double))\n')
    out = tmp_path / "run"
    proc = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out),
        cwd=tmp_path, env={name: value},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    allowed = environment.BY_NAME[name].allowed
    assert (
        f"graphsafe: error: {name}={value!r}: " in proc.stderr and f"allowed values: {allowed}" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert not (out / "results.csv").exists()


def test_every_graphsafe_variable_read_is_in_the_table() -> None:
    """The table in graphsafe.environment is the one list (docs and validation): every GRAPHSAFE_* name the
    package, its Makefile, CI script and tests read is in it."""
    used: set[str] = set()
    for folder in ("harness", "kernels", "cases", "bench", "tests", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", "") and path.name != Path(__file__).name:
                used |= set(re.findall(r"GRAPHSAFE_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    used |= set(re.findall(r"GRAPHSAFE_[A-Z0-9_]*[A-Z0-9]", (ROOT / "Makefile").read_text()))
    assert used - set(environment.BY_NAME) == set()


def test_unknown_graphsafe_name_is_a_warning_and_empty_values_count_as_unset() -> None:
    assert environment.unknown_variables({"GRAPHSAFE_CACHEDIR": "/x", "GRAPHSAFE_CACHE_DIR": "/y"}) == [
        "GRAPHSAFE_CACHEDIR"
    ]
    assert environment.environment_problems({"GRAPHSAFE_SEARCH_EXAMPLES": ""}) == []
    assert environment.environment_problems({"GRAPHSAFE_SEARCH_EXAMPLES": "12"}) == []


# ------------------------------------------------------------------------- one broken case, the rest run

BROKEN_MID_FILE = """
def bad_reference(x):
    raise RuntimeError("reference broke")

def late_make(seed, device):
    if seed >= 3:  # A and the first B pass the definition check; a later replay's B fails
        raise OSError("weights.bin vanished")
    return make(seed, device)

for i in range(3):
    register(Case(name=f"t.before{i}", make_inputs=make, op=double, reference=double))
register(Case(name="t.bad_reference", make_inputs=make, op=double, reference=bad_reference))
register(Case(name="t.late_inputs", make_inputs=late_make, op=double))
register(Case(name="t.returns_none", make_inputs=make, op=lambda x: None))
for i in range(3):
    register(Case(name=f"t.after{i}", make_inputs=make, op=double, reference=double))
"""


@pytest.mark.parametrize("mode", ISOLATION)
def test_case_whose_own_code_raises_is_its_verdict_and_the_run_goes_on(
    tmp_path: Path, mode: tuple[str, ...]
) -> None:
    """A reference that raises in the 4th of 9 cases, make_inputs that raises at a later seed, an op that
    returns None: each is that case's `broken_case` with the field and the user's line; every other case
    runs, the reports are complete, exit 1 (before: the run stopped INCOMPLETE at the reference)."""
    cases = case_file(tmp_path, BROKEN_MID_FILE)
    out = tmp_path / "run"
    proc = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out), *mode, cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stderr
    got = verdicts(out)
    broken = {"t.bad_reference", "t.late_inputs", "t.returns_none"}
    assert got == {name: ("broken_case" if name in broken else "pass") for name in got}
    assert len(got) == 9
    text = cases.read_text().splitlines()
    line = next(i for i, s in enumerate(text, 1) if 'raise RuntimeError("reference broke")' in s)
    assert (
        "case 't.bad_reference': field 'reference': raised RuntimeError: reference broke "
        f"(at cases.py:{line} in bad_reference)" in details(out, "t.bad_reference")
    )
    late = details(out, "t.late_inputs")
    assert (
        "field 'make_inputs'" in late and "OSError: weights.bin vanished" in late and "in late_make" in late
    )
    assert "field 'op'" in details(out, "t.returns_none")
    status = read_results(out).attrs[STATUS_KEY]
    assert not status or status.get("state") != "INCOMPLETE"
    assert "INCOMPLETE" not in (out / "summary.md").read_text().split("\n", 1)[0]
    assert "broken_case" in (out / "summary.md").read_text()


# ----------------------------------------------------------------------------- processes an op leaves

LEAVES_PROCESSES = """
PIDS = {pids!r}

def record(pid):
    with open(PIDS, "a") as f:
        f.write(f"{{pid}}\\n")

def starts_processes(x):
    record(subprocess.Popen(["setsid", "sleep", "300"]).pid)  # a session of its own
    record(subprocess.Popen(["sleep", "301"]).pid)  # an ordinary child
    shell = subprocess.run(  # an orphan: the shell exits, its background job lives on
        ["sh", "-c", "setsid sleep 302 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
    )
    record(int(shell.stdout))
    return x * 2

register(Case(name="t.spawner", make_inputs=make, op=starts_processes))
register(Case(name="t.next", make_inputs=make, op=double))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@linux_only
@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid (util-linux)")
@pytest.mark.parametrize(
    "mode", [*ISOLATION, pytest.param(("--jobs", "1", "--deadline", "15"), id="timeout")]
)
def test_processes_an_op_starts_do_not_outlive_the_run(tmp_path: Path, mode: tuple[str, ...]) -> None:
    """The op starts `setsid sleep`, a plain `sleep` and a shell's orphaned `setsid sleep` on each call:
    none is left when verify returns (before: 7 were left per case). The timeout variant kills the worker
    mid-case (a hang after the processes started), so the harness itself must end what the worker left."""
    pids = tmp_path / "pids.txt"
    body = LEAVES_PROCESSES.format(pids=str(pids))
    if "--deadline" in mode:
        body = body.replace(
            "    return x * 2\n\nregister", "    __import__('time').sleep(3600)\n\nregister", 1
        )
    cases = case_file(tmp_path, body)
    out = tmp_path / "run"
    proc = graphsafe_cli(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out), *mode, cwd=tmp_path
    )
    started = [int(p) for p in pids.read_text().split()]
    left = [p for p in started if _alive(p)]
    for pid in left:  # never leave them to the machine, whatever the outcome
        os.kill(pid, 9)
    expected = "timeout" if "--deadline" in mode else "pass"
    assert proc.returncode == (1 if expected == "timeout" else 0), proc.stderr
    assert verdicts(out) == {"t.spawner": expected, "t.next": "pass"}
    assert len(started) >= 3
    assert left == [], f"{len(left)} of {len(started)} processes outlived the run"
    if expected == "pass" and "--no-isolate" not in mode:
        assert "ended" in details(out, "t.spawner") and "outside its process group" in details(
            out, "t.spawner"
        )


def test_processes_ended_by_pid_and_start_time_only(tmp_path: Path) -> None:
    """`processes.end` never kills a pid that now names another process."""
    from graphsafe import processes

    child = subprocess.Popen(["sleep", "30"])
    try:
        (entry,) = [p for p in processes.descendants() if p[0] == child.pid]
        assert processes.end([(child.pid, entry[1] + 1)]) == []
        assert child.poll() is None
        assert processes.end([entry]) == [child.pid]
        deadline = time.monotonic() + 10
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.returncode is not None
    finally:
        if child.poll() is None:
            child.kill()
