"""The command line: `graphsafe verify | list | repro | report compare`.

Exit codes (public contract): verify exits 0 iff every verdict equals its expectation (or every selected case
was skipped by its `requires`), 1 otherwise (a run that stopped early included, -x or --maxfail too), 2 for a
usage error or a case file that cannot be loaded (the message names the file or case and the reason), 3 for an
internal error, 5 when no case was selected (-k matching none, an empty shard: pytest's "no tests ran"), 74
when a report could not be written completely (disk full, a file-size limit, an I/O error: EX_IOERR of
sysexits.h; the message names the file), 130 when interrupted (SIGINT or SIGTERM, also while the reports are
written: the writes finish first). A run that stops early still writes its reports, each saying so in its
first line.

What verify prints, pytest's way: progress on stderr while it runs, then one block per case not as expected
(its finding: graphsafe.findings) and one summary line; -v lists every case as it finishes, -q prints the
summary line alone.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import graphsafe
from graphsafe import config, environment, findings, profiles, requirements, sanitizer
from graphsafe.backends import BACKEND_NAMES, resolve_backend_name
from graphsafe.case import REGISTRY, Case, CaseFileError, load_case_source
from graphsafe.errors import BackendUnavailable, CaseError
from graphsafe.progress import BuildProgress, Progress, format_eta
from graphsafe.protocol import DEFAULT_REPLAYS
from graphsafe.records import Result
from graphsafe.reports import fingerprint as fp_module
from graphsafe.reports import skipped as skipped_report
from graphsafe.reports.atomic import ReportWriteError, write_atomic
from graphsafe.reports.merge import MergeError, Shard, merge_runs, parse_shard
from graphsafe.reports.render import write_reports
from graphsafe.reports.results import (
    ResultsWriter,
    RunDirError,
    check_written,
    claim_run_dir,
    read_results,
)
from graphsafe.reports.tables import repro_command, searched_sizes
from graphsafe.runner import (
    DEFAULT_DEADLINE_S,
    BoundsError,
    RunOptions,
    StartedWorkers,
    Validated,
    case_seconds_history,
    check_bounds,
    remember_case_seconds,
    run_in_process,
    run_isolated,
    slot_seconds,
    start_workers,
    stop_workers,
)
from graphsafe.sanitizer import TOOLS
from graphsafe.selection import compile_selector
from graphsafe.suites import default_suites, load_default_suites


class UsageError(Exception):
    pass


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a run: the reports are written, marked incomplete, then exit 130."""


class NothingSelected(Exception):
    """No case was selected (-k matching none, an empty shard): exit 5, pytest's "no tests ran"."""


class ReportsNotWritten(Exception):
    """A report file could not be written completely: exit 74; the message names each file and why."""


class CaseExited(Exception):
    """A case's code raised SystemExit in this process (--no-isolate): the run stopped there, exit 1."""


# Where a run's time went (graphsafe.cli.RunClock): from this module's import (the interpreter and torch are
# already loaded by then) to the reports.
_IMPORTED_AT = time.monotonic()
SLOWEST_SHOWN = 5

EXIT_NOT_AS_EXPECTED = 1
EXIT_USAGE = 2
EXIT_INTERNAL_ERROR = 3
EXIT_NOTHING_SELECTED = 5  # pytest's ExitCode.NO_TESTS_COLLECTED
EXIT_REPORTS_NOT_WRITTEN = 74  # EX_IOERR (sysexits.h): pytest has no such code
EXIT_INTERRUPTED = 130  # 128 + SIGINT, for SIGTERM too (pytest says 2 for an interrupted session)
# A stress count above this is a typo or a probe, never a plan: --rebuilds 10**6 is a million captures,
# already longer than the default deadline. Memory bounds below it come from `runner.check_bounds`.
MAX_REPEATS = config.MAX_REPEATS


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{value} must be <= {maximum}")
        return value

    return parse


_positive_int = _int_at_least(1)
JOBS_AUTO = "auto"


def _jobs(text: str) -> int | str:
    """--jobs: a whole number >= 1, or 'auto'."""
    return JOBS_AUTO if text == JOBS_AUTO else _positive_int(text)


_non_negative_int = _int_at_least(0)
_replay_count = _int_at_least(1, MAX_REPEATS)
_stress_count = _int_at_least(0, MAX_REPEATS)


def _positive_seconds(text: str) -> float:
    """A deadline: finite and > 0. NaN would never expire (`elapsed > nan` is False) and 0 or less would time
    out every case, so both are usage errors."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of seconds > 0")
    return value


_CASE_HELP = "case file or module (default: [tool.graphsafe] cases, else the built-in suite)"


def _add_run_arguments(p: argparse.ArgumentParser, settings: config.Settings) -> None:
    p.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default=settings.backend or "auto",
        help="auto: the GPU when present, else cpu",
    )
    p.add_argument("--case", action="append", default=[], metavar="FILE_OR_MODULE", help=_CASE_HELP)
    p.add_argument(
        "--replays",
        type=_replay_count,
        default=settings.replays or DEFAULT_REPLAYS,
        help="fresh-input replays per pattern",
    )
    p.add_argument(
        "--seed",
        type=_non_negative_int,
        default=settings.seed or 0,
        help="seed of input A (B_i use seed+1+i)",
    )
    p.add_argument("--rebuilds", type=_stress_count, default=0, help="recapture R times after the replays")
    p.add_argument(
        "--live-graphs", type=_stress_count, default=0, help="keep G graphs live, replay interleaved"
    )
    p.add_argument(
        "--report-dir",
        type=Path,
        default=None,
        help="a new or empty dir (one holding a run's reports is refused); default <runs-dir>/<time>-<host>/, "
        f"runs-dir from [tool.graphsafe] (here: {_shown(settings.runs_dir)})",
    )
    p.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        help="worker processes, or 'auto': as many as the cap (default: one per GPU, else 1; at most 8 per "
        "GPU and the CPU count)",
    )
    p.add_argument(
        "--deadline",
        type=_positive_seconds,
        default=DEFAULT_DEADLINE_S,
        help="seconds per case before `timeout`",
    )
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="run cases in this process (no crash/timeout isolation): it cannot see a process exit "
        "(os._exit) and is not for CI gates",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="run the launch diff for every case, passing ones too: compare the graph captured with A with a "
        "capture made for B, kernel by kernel; a launch difference fails the case with a finding naming it",
    )
    p.add_argument(
        "--sanitizer",
        choices=TOOLS,
        default=None,
        help="rerun the first failing case's eager call and replay under compute-sanitizer (NVIDIA) and add its "
        "first findings to the case's detail; without the tool, a one-line note",
    )


_PATTERN_HELP = (
    "only matching cases: a pytest -k expression over case names and families (`-k 'moe_gemm and not fp8'`); "
    "a pattern with * ? [ is a glob on the name"
)


def program_name() -> str:
    """`graphsafe` from the console script, else `python -m <this package>` (harness here, graphsafe installed)."""
    return "graphsafe" if Path(sys.argv[0]).name == "graphsafe" else f"python -m {__package__}"


def _shown(path: Path) -> str:
    """A configured path as the user would type it here: relative to the working directory when below it."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def build_parser(settings: config.Settings | None = None) -> argparse.ArgumentParser:
    """The parser; `settings` ([tool.graphsafe], graphsafe.config) give the defaults that flags override."""
    settings = settings or config.load()
    parser = argparse.ArgumentParser(prog=program_name(), description="graphsafe: graph-replay safety checks")
    parser.set_defaults(settings=settings)
    parser.add_argument("--version", action="version", version=f"graphsafe {graphsafe.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="run cases and write a report")
    _add_run_arguments(verify, settings)
    verify.add_argument(
        "--shard",
        type=_shard,
        default=None,
        metavar="I/N",
        help="run only the cases of shard I of N (a stable hash of the case name); `report merge` joins shards",
    )
    verify.add_argument("-k", dest="pattern", default=None, help=_PATTERN_HELP)
    verify.add_argument(
        "-x", "--exitfirst", action="store_true", help="stop after the first case not as expected"
    )
    verify.add_argument(
        "--maxfail",
        type=_positive_int,
        default=None,
        metavar="N",
        help="stop after N cases not as expected (the reports say the run stopped; exit 1)",
    )
    verify.add_argument(
        "--lf",
        "--last-failed",
        dest="last_failed",
        action="store_true",
        help=f"run only the cases that failed in the last run: the newest run folder under {_shown(settings.runs_dir)}/ "
        "(the default --report-dir location); all selected cases when it recorded no failure",
    )
    verify.add_argument(
        "-v", "--verbose", action="count", default=0, help="list every case as it finishes, passing ones too"
    )
    verify.add_argument(
        "-q", "--quiet", action="count", default=0, help="print the summary line alone (errors still print)"
    )
    listing = sub.add_parser("list", help="list cases")
    listing.add_argument("--case", action="append", default=[], metavar="FILE_OR_MODULE", help=_CASE_HELP)
    listing.add_argument("-k", dest="pattern", default=None, help=_PATTERN_HELP)
    repro = sub.add_parser("repro", help="rerun one case with its recorded seeds and print its table")
    repro.add_argument("name")
    repro.add_argument(
        "--sizes",
        default=None,
        metavar="T=33,K=1",
        help="check a case that declares a size space at these sizes (the summary of a search prints them)",
    )
    _add_run_arguments(repro, settings)
    repro.add_argument("--markdown", action="store_true", help="counterexample modules: tables as Markdown")
    repro.set_defaults(replays=None)  # a counterexample module's own replay count unless given
    report = sub.add_parser("report", help="report tools")
    report_sub = report.add_subparsers(dest="report_command", required=True)
    compare = report_sub.add_parser(
        "compare", help="regressions of NEW against OLD (results.csv or run dirs)"
    )
    compare.add_argument("old", type=Path)
    compare.add_argument("new", type=Path)
    nightly = report_sub.add_parser("nightly", help="compare a run with its platform's committed baseline")
    nightly.add_argument("run_dir", type=Path)
    for p in (compare, nightly):
        p.add_argument(
            "--allow-platform-mismatch",
            action="store_true",
            help="compare runs whose fingerprints name different platforms (else exit 2)",
        )
    merge = report_sub.add_parser("merge", help="join the run directories of shards into one run and report")
    merge.add_argument("inputs", type=Path, nargs="+", metavar="DIR")
    merge.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new directory for the merge")
    merge.add_argument(
        "--allow-mixed-platforms",
        action="store_true",
        help="merge runs of different platforms or sources (else exit 2)",
    )
    merge.add_argument(
        "--allow-missing-shards", action="store_true", help="merge an incomplete set of shards (else exit 2)"
    )
    merge.add_argument(
        "--allow-mixed",
        action="store_true",
        help="merge runs that differ in commit, case files, --seed, --replays, backend, graphsafe version or "
        "platform (else exit 2); each difference is written at the top of the merged reports",
    )
    baseline = report_sub.add_parser("baseline", help="make a run the committed baseline of its platform")
    baseline.add_argument("run_dir", type=Path)
    for p in (nightly, baseline):
        p.add_argument(
            "--baseline",
            type=Path,
            default=settings.baseline,
            metavar="PATH",
            help="a folder of <platform>.csv baselines, or one baseline .csv (default: [tool.graphsafe] "
            f"baseline, here {_shown(settings.baseline)})",
        )
    return parser


def source_as_typed_here(source: str) -> str:
    """A case file as the repro command names it: relative to the working directory when below it (the
    command then works from the user's repository, and on a CI runner whatever its checkout path)."""
    path = Path(source)
    if not (source.endswith(".py") or os.sep in source) or not path.is_absolute():
        return source
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return source


def _shard(text: str) -> Shard:
    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _merge(args: argparse.Namespace) -> int:
    """`report merge`: 0 when every case is as expected and every shard complete, 1 otherwise, 2 refused,
    74 when a merged report could not be written. "As expected" is decided as the merged summary decides it
    (graphsafe.reports.tables.case_summaries: the verdict against the expectation, and any FAIL row), never
    from the status column alone."""
    from graphsafe.reports.tables import case_summaries

    try:
        merged = merge_runs(
            args.inputs,
            args.out,
            allow_mixed_platforms=args.allow_mixed_platforms,
            allow_missing_shards=args.allow_missing_shards,
            allow_mixed=args.allow_mixed,
        )
        write_reports(merged.out, merged.fingerprint, notes=merged.notes)
    except MergeError as exc:
        raise UsageError(f"report merge: {exc}") from exc
    except ReportWriteError as exc:
        raise ReportsNotWritten(f"report merge: {exc}") from exc
    failed = {s.case for s in case_summaries(merged.rows) if s.failed}
    cases = merged.rows["case"].nunique()
    emit(f"merged {len(args.inputs)} runs, {cases} cases, {len(failed)} not as expected: {merged.out}")
    for note in [*merged.notes, *([merged.stopped_early] if merged.stopped_early else [])]:
        emit(f"note: {note}")
    return 0 if not failed and merged.complete else 1


def select_cases(sources: list[str], pattern: str | None) -> list[Case]:
    """The cases of `sources` (else the built-in suites) that -k `pattern` selects; NothingSelected when the
    pattern matches none."""
    try:
        if sources:
            found: dict[str, Case] = {}
            for source in sources:
                for case in load_case_source(source):
                    found[case.name] = case
            cases = list(found.values())
        else:
            cases = load_default_suites()
    except (CaseError, CaseFileError) as exc:
        raise UsageError(str(exc)) from exc
    except SystemExit as exc:  # a case file's top level called sys.exit: no exit code of its own choosing
        raise UsageError(f"a case source called sys.exit({exc.code!r}) while it was loaded") from None
    if pattern:
        try:
            selected = compile_selector(pattern)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        cases = [c for c in cases if selected(c)]
        if not cases:
            raise NothingSelected(f"-k {pattern!r} matches no case; `{program_name()} list` lists them")
    return cases


def without_unmet_requirements(
    cases: list[Case], backend_name: str, quiet: bool = False, skipped: dict[str, str] | None = None
) -> list[Case]:
    """The cases whose Case.requires this machine and backend meet; each other one is named on stderr with the
    reason (unless `quiet`), as the pytest plugin skips it, and added to `skipped` (case -> reason: the run's
    skipped.csv)."""
    backend = resolve_backend_name(backend_name)
    kept = []
    for case in cases:
        reason = requirements.unmet(case.requires, backend)
        if reason:
            if not quiet:
                print(f"graphsafe: skipped {case.name}: {reason}", file=sys.stderr)
            if skipped is not None:
                skipped[case.name] = reason
        else:
            kept.append(case)
    return kept


def last_run_dir(root: Path) -> Path | None:
    """The newest run folder under `root` (by its results.csv's modification time), None when there is none."""
    runs = [p for p in root.glob("*/results.csv") if p.is_file()] if root.is_dir() else []
    return max(runs, key=lambda p: p.stat().st_mtime).parent if runs else None


def last_failed(cases: list[Case], root: Path, quiet: bool = False) -> list[Case]:
    """--lf: the cases of `cases` that were not as expected in the last run under `root` (the runs folder,
    [tool.graphsafe] runs-dir: where runs without --report-dir go); all of them (with a note, as
    pytest's --lf does) when there is no last run, it recorded no failure, or none of its failures is among
    `cases`."""
    run = last_run_dir(root)

    def note(text: str) -> None:
        if not quiet:
            print(f"graphsafe: --lf: {text}", file=sys.stderr)

    if run is None:
        note(f"no previous run under {root}/: running all {len(cases)} selected cases")
        return cases
    try:
        rows = read_results(run)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--lf: cannot read the last run {run}: {exc}") from None
    failed = {str(c) for c, status in zip(rows["case"], rows["status"], strict=True) if status == "FAIL"}
    chosen = [c for c in cases if c.name in failed]
    if not failed:
        note(f"the last run ({run}) recorded no failure: running all {len(cases)} selected cases")
        return cases
    if not chosen:
        note(f"none of the last run's {len(failed)} failures ({run}) is selected: running all {len(cases)}")
        return cases
    note(f"rerunning {len(chosen)} case{'s' * (len(chosen) != 1)} that failed in {run}")
    return chosen


class StoppedAfterFailures(Exception):
    """-x / --maxfail: enough cases were not as expected; the run stops and writes its reports."""


# Workers that may share one GPU. A check is mostly host work (Python, launches, synchronizations: 4.3-7.3 ms
# of host time around an op of 0.02-0.035 ms, reports/performance.md), so
# processes on one GPU overlap their host work; each has its own CUDA context, pools and graphs.
MAX_WORKERS_PER_GPU = 8


def capped_jobs(requested: int | str | None, backend: str, devices: int) -> int:
    """Workers for the run: by default one per GPU on the GPU backend, else 1; 'auto' the cap itself; a number
    above the cap (MAX_WORKERS_PER_GPU per GPU and the CPU count on gpu, the CPU count on cpu) is lowered
    with a message: more workers than that only contend."""
    cores = os.cpu_count() or 1
    if backend == "gpu":
        per_gpu = max(1, devices) * MAX_WORKERS_PER_GPU
        cap = min(per_gpu, cores)
        why = f"{MAX_WORKERS_PER_GPU} workers per GPU ({devices} visible), {cores} CPU cores"
    else:
        cap, why = cores, f"at most one worker per CPU core ({cores})"
    if requested is None:
        return max(1, devices) if backend == "gpu" else 1
    if requested == JOBS_AUTO:
        return cap
    assert isinstance(requested, int)
    if requested > cap:
        print(f"graphsafe: --jobs {requested} capped to {cap}: {why}", file=sys.stderr)
        return cap
    return requested


def _at_sizes(case: Case, text: str) -> Case:
    """`repro NAME --sizes T=33,K=1`: the case with its declared sizes fixed (harness/search.py)."""
    from graphsafe import search

    if case.sizes is None:
        raise UsageError(f"--sizes: case {case.name!r} declares no size space")
    try:
        return search.bind(case, search.parse_sizes(text, case.sizes))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _prebuild(cases: list[Case], backend: str) -> None:
    """Compile the native libraries the selected cases reach, all at once, before the first case, with
    progress lines of their own (graphsafe.native.build.prebuild); a failed build is left to the cases that
    load it, which report it with their verdicts."""
    from graphsafe.native import build as native_build

    roots = sorted({REGISTRY.origin(c.name) for c in cases} - {""})
    builds = native_build.planned(roots, ("cpu",) if backend == "cpu" else ("cpu", "gpu"))
    if builds:
        progress = BuildProgress({b.label: native_build.expected_seconds(b) for b in builds})
        native_build.prebuild(builds, on_event=progress.event)


class RunClock:
    """Phase times of one `verify` run and each case's seconds: written to the run's times.csv and summed up
    in one line on stderr, so a slow run says whether builds, definition checks, cases or reports took the
    time, and which cases. A case row also says when it started (seconds from the run's start) and on which
    worker: the run's timeline, which shows what ran beside a slow case (empty for an in-process run)."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = [("start", _IMPORTED_AT)]
        self.cases: list[Result] = []

    def mark(self, phase_done: str) -> None:
        self.marks.append((phase_done, time.monotonic()))

    def phases(self) -> list[tuple[str, float]]:
        return [(name, t - self.marks[i][1]) for i, (name, t) in enumerate(self.marks[1:])]

    def case_seconds(self) -> dict[str, float]:
        return {r.case: r.seconds for r in self.cases if r.seconds is not None}

    def write(self, run_dir: Path, workers: int, quiet: bool = False) -> None:
        start = self.marks[0][1]
        lines = ["kind,name,seconds,start,worker"]
        lines += [f"phase,{name},{s:.3f},," for name, s in self.phases()]
        for r in sorted(self.cases, key=lambda r: -(r.seconds or 0.0)):
            began = "" if r.started_at is None else f"{r.started_at - start:.3f}"
            lines.append(f"case,{r.case},{r.seconds:.3f},{began},{'' if r.worker is None else r.worker}")
        phases = ", ".join(f"{name} {s:.1f}s" for name, s in self.phases())
        slowest = sorted(self.case_seconds().items(), key=lambda c: -c[1])[:SLOWEST_SHOWN]
        tail = "; slowest: " + ", ".join(f"{n} {s:.1f}s" for n, s in slowest) if slowest else ""
        if not quiet:
            print(
                f"graphsafe: time ({workers} worker{'s' * (workers != 1)}): {phases}{tail}", file=sys.stderr
            )
        write_atomic(run_dir / "times.csv", "\n".join(lines) + "\n")  # ReportWriteError: the caller says so


def run_verify(
    args: argparse.Namespace,
    cases: list[Case],
    started: StartedWorkers | None = None,
    notes: Sequence[str] = (),
) -> tuple[list[Result], Path, dict[str, Any] | None]:
    """Run and report; returns the results, the report dir and the final status (None: every case ran).

    Every case's definition is checked (and the memory bounds) before results.csv is created, so a bad case
    runs nothing and writes no reports. Once cases run, the reports are written however the run ends; with
    no case to run (`cases` empty) they are written at once. `started`: workers spawned by
    `_start_workers_early` (stopped here whatever happens). `notes`: sentences every report shows first.

    After the reports: ReportsNotWritten when one could not be written completely (each is named on stderr),
    Interrupted when SIGINT or SIGTERM came while they were written (the writes finish first), CaseExited
    when a case's code raised SystemExit in this process (--no-isolate)."""
    backend = resolve_backend_name(args.backend)
    options = RunOptions(
        backend=backend,
        replays=args.replays,
        seed=args.seed,
        rebuilds=args.rebuilds,
        live_graphs=args.live_graphs,
        deadline=args.deadline,
        explain=args.explain,
    )
    try:
        claim = claim_run_dir(args.report_dir, root=args.settings.runs_dir)
    except RunDirError as exc:
        if started is not None:
            stop_workers(started)
        raise UsageError(str(exc)) from None
    run_dir = claim.run_dir
    devices = torch.cuda.device_count() if backend == "gpu" else 0
    if started is not None:
        jobs = len(started.workers)
    else:
        jobs = 1 if args.no_isolate else capped_jobs(args.jobs, backend, devices)
    state: dict[str, Any] = {"writer": None, "progress": None, "failed": 0, "held": None}
    verbose, quiet = getattr(args, "verbose", 0), getattr(args, "quiet", 0)
    exitfirst, maxfail = getattr(args, "exitfirst", False), getattr(args, "maxfail", None)
    stop_after = 1 if exitfirst else maxfail
    clock = RunClock()
    clock.mark("loading cases")

    def start_writing(validated: list[Validated]) -> None:
        clock.mark("definition checks")
        try:
            check_bounds(validated, options, jobs)
        except BoundsError as exc:
            raise UsageError(str(exc)) from None
        try:
            state["writer"] = ResultsWriter(run_dir, planned=[c.name for c in cases])
        except OSError as exc:
            # Nothing ran: the dir cannot take the run (full, say); a results.csv begun here goes again, so
            # it does not read as another run's reports.
            if not isinstance(exc, FileExistsError):
                with contextlib.suppress(OSError):
                    (run_dir / "results.csv").unlink()
            raise UsageError(f"cannot write {run_dir / 'results.csv'}: {exc.strerror or exc}") from None
        if not (quiet or verbose):  # -v lists each case instead; -q shows nothing while it runs
            state["progress"] = Progress(len(cases), every_s=PLAIN_PROGRESS_EVERY_S)

    def on_result(result: Result) -> None:
        if result.seconds is not None:
            clock.cases.append(result)
        if args.sanitizer and state["held"] is None and sanitizer.wanted(result):
            state["held"] = result  # written after its rerun under the sanitizer, once every case ran
        else:
            try:
                state["writer"].add(result)
            except OSError as exc:
                raise ReportWriteError(state["writer"].path, exc) from exc
        if state["progress"] is not None:
            state["progress"].update(result.case, result.ok)
        if verbose and not quiet:
            emit(case_line(result))
        if not result.ok:
            state["failed"] += 1
            if stop_after is not None and state["failed"] >= stop_after:
                how = "-x" if exitfirst else f"--maxfail {maxfail}"
                count = state["failed"]
                raise StoppedAfterFailures(
                    f"stopped after {count} case{'s' * (count != 1)} not as expected ({how})"
                )

    stopped: str | None = None
    respawns: dict[str, float] = {}  # run_isolated: seconds a replacement worker took to start, per case
    report_errors: list[str] = []  # every report file not written completely, with why
    signals = _SignalsHeld.none()
    previous_term = _raise_on_sigterm()
    try:
        _prebuild(cases, backend)  # inside: a failure or an interrupt here still releases the report dir
        clock.mark("builds")
        if not cases:
            start_writing([])  # nothing to run: the reports say why (`notes`)
        elif args.no_isolate:
            run_in_process(cases, options, on_result, validated=start_writing)
        else:
            sources = list(args.case)
            suites = [] if sources else default_suites()
            run_isolated(
                cases,
                sources,
                options,
                jobs,
                devices,
                on_result,
                suites=suites,
                validated=start_writing,
                expected_seconds=case_seconds_history(backend),
                started=started,
                respawns=respawns,
            )
        if state["held"] is not None:
            # After the cases: the rerun takes minutes under the tool and must not hold up the workers (their
            # deadlines count from their start) or share the GPU with them.
            clock.mark("cases")
            state["cases_timed"] = True
            rerun = state["held"]
            sanitizer.annotate(
                rerun, sanitizer.second_opinion(rerun, args.sanitizer, backend, list(args.case))
            )
            clock.mark(f"sanitizer {args.sanitizer}")
    except StoppedAfterFailures as exc:
        stopped = str(exc)  # not raised on: the reports are written below and say so; verify exits 1
    except Interrupted as exc:
        stopped = f"interrupted by {exc.args[0] if exc.args else 'a signal'}"
        raise
    except KeyboardInterrupt:
        stopped = "interrupted by SIGINT"
        raise Interrupted("SIGINT") from None
    except CaseError as exc:
        stopped = f"stopped at a case definition error: {exc}"
        raise
    except ReportWriteError as exc:
        stopped = f"stopped: results could not be written: {exc.strerror or exc}"
        raise ReportsNotWritten(str(exc)) from exc
    except OSError as exc:
        stopped = f"stopped: results could not be written: {exc.strerror or exc}"
        raise
    except SystemExit as exc:
        stopped = _case_exit_sentence(exc, cases, state["writer"], args.no_isolate)
        if state["writer"] is None:
            raise UsageError(stopped) from None  # found by the definition checks: nothing ran
        raise CaseExited(stopped) from None
    except BaseException as exc:
        stopped = f"stopped by an internal error: {type(exc).__name__}: {exc}"
        raise
    finally:
        # From here to the end of the writes a signal is noted, not acted on (a second Ctrl-C or a CI's
        # SIGTERM would leave the reports half done); once they are written the run exits with it.
        signals = _SignalsHeld()
        try:
            # run_isolated stops the workers it adopted; this covers a run stopped before it
            if started is not None:
                stop_workers(started)
            writer = state["writer"]
            if writer is not None and state["held"] is not None:
                try:
                    writer.add(state["held"])
                except OSError as exc:
                    report_errors.append(str(ReportWriteError(writer.path, exc)))
            status = None
            if state["progress"] is not None:
                state["progress"].close()
            if writer is not None:
                if not state.get("cases_timed"):
                    clock.mark("cases")
                status = writer.close(stopped)
                report_notes = list(notes)
                if writer.write_error:
                    report_errors.append(writer.write_error)
                    report_notes.append(
                        f"{writer.write_error}: its first line still says the run is in progress, although "
                        f"{len(writer.results)} of {len(writer.planned)} cases finished"
                    )
                try:
                    _write_reports(
                        run_dir,
                        writer.results,
                        backend,
                        list(args.case),
                        status,
                        getattr(args, "shard", None),
                        options=options,
                        notes=report_notes,
                    )
                except ReportWriteError as exc:
                    report_errors.append(str(exc))
                except OSError as exc:
                    report_errors.append(f"could not write the reports in {run_dir}: {exc}")
                try:  # apart: the nightly comparison needs it even where another report could not be written
                    skipped_report.write(run_dir, getattr(args, "skipped", {}))
                except ReportWriteError as exc:
                    report_errors.append(str(exc))
                clock.mark("reports")
                try:
                    clock.write(run_dir, jobs, quiet=bool(quiet))
                except OSError as exc:
                    report_errors.append(str(exc))
                remember_case_seconds(backend, slot_seconds(clock.case_seconds(), respawns))
            for error in report_errors:
                print(f"graphsafe: error: {error}", file=sys.stderr)
        finally:
            claim.release()
            signals.release()
            _restore_sigterm(previous_term)
    if signals.received:
        print(
            f"graphsafe: {signals.received[0]} came while the reports were written; they were finished first",
            file=sys.stderr,
        )
        raise Interrupted(signals.received[0])
    if report_errors:
        raise ReportsNotWritten(f"{len(report_errors)} report file(s) not written completely in {run_dir}")
    return writer.results, run_dir, status


def _case_exit_sentence(
    exc: SystemExit, cases: list[Case], writer: ResultsWriter | None, in_process: bool
) -> str:
    """Why the run stopped when SystemExit came out of it. In this process (--no-isolate) it comes from a
    case's code (sys.exit in an op, make_inputs or reference); the cases run in order, so the case is the
    first that has not finished. A worker's exit never reaches here, so otherwise it is graphsafe's bug."""
    if not in_process:
        return f"stopped by an internal error: SystemExit({exc.code!r}) in the run's own process"
    if writer is None:
        return (
            f"a case's definition check (make_inputs or op) raised SystemExit({exc.code!r}) under --no-isolate; "
            "nothing ran (without --no-isolate the worker reports the case)"
        )
    finished = {r.case for r in writer.results}
    running = next((c.name for c in cases if c.name not in finished), "?")
    return (
        f"case {running!r} raised SystemExit({exc.code!r}) (sys.exit in its op, make_inputs or reference) under "
        "--no-isolate: the run stopped there; without --no-isolate it is that case's crash and the run goes on"
    )


class _SignalsHeld:
    """SIGINT and SIGTERM noted instead of acted on while the reports are written (ignoring them would drop
    a CI's SIGTERM and exit 0). `release` puts the previous handlers back; `received` names the signals that
    came, for the caller to act on once the writes are done. A signal the process ignored (a nohup'd run's
    SIGINT) stays ignored."""

    def __init__(self, hold: bool = True) -> None:
        self.received: list[str] = []
        self._previous: dict[int, Any] = {}
        if not hold or threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                self._previous[signum] = signal.signal(signum, self._note)

    @classmethod
    def none(cls) -> _SignalsHeld:
        return cls(hold=False)

    def _note(self, signum: int, frame: Any) -> None:
        self.received.append(signal.Signals(signum).name)

    def release(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def _raise_on_sigterm() -> Any:
    """SIGTERM (a CI job cancelled, `timeout`) ends the run like SIGINT: reports written and marked."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted("SIGTERM")

    return signal.signal(signal.SIGTERM, handler)


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _write_reports(
    run_dir: Path,
    results: list[Result],
    backend: str,
    case_sources: list[str],
    status: dict[str, Any] | None = None,
    shard: Shard | None = None,
    options: RunOptions | None = None,
    notes: Sequence[str] = (),
) -> None:
    fingerprint = fp_module.collect(backend, case_sources)
    # Repro commands of user case files need the files: summary.md prints them with --case.
    fingerprint["case_sources"] = shlex.join(source_as_typed_here(s) for s in case_sources)
    fingerprint["shard"] = str(shard) if shard is not None else ""
    if options is not None:  # what `report merge` checks the shards of one run share
        fingerprint |= fp_module.run_settings(
            options.seed, options.replays, options.rebuilds, options.live_graphs
        )
    fp_module.write(run_dir, fingerprint)
    write_reports(run_dir, fingerprint, status, notes=notes)


# In a CI log (stderr not a terminal), a progress line at most this often, besides failures and the last case.
PLAIN_PROGRESS_EVERY_S = 10.0


def case_line(result: Result) -> str:
    """-v: one line per finished case."""
    if result.ok:
        return f"ok    {result.case}  {result.verdict}"
    return f"FAIL  {result.case}  {result.verdict} (expected {result.expected})"


def failure_blocks(results: list[Result], sources: list[str]) -> list[str]:
    """One block per case not as expected (graphsafe.findings.failure_block), in the order they finished."""
    lines: list[str] = []
    typed = [source_as_typed_here(s) for s in sources]
    for result in results:
        if result.ok:
            continue
        rows = findings.rows_as_mappings(result.rows)
        seed_a = str(rows[0]["seed_a"]) if rows else ""
        sizes = searched_sizes(str(r["detail"]) for r in rows)
        repro = repro_command(result.case, seed_a, result.backend, typed, sizes)
        lines += [*findings.failure_block(result.case, result.verdict, result.expected, rows, repro), ""]
    return lines


def summary_line(
    results: list[Result], planned: int, skipped: int, seconds: float, run_dir: Path, stopped: str = ""
) -> str:
    """The one line a run ends with, pytest's way: "graphsafe: 1 failed, 286 passed, 1 skipped in 41s"."""
    failed = sum(not r.ok for r in results)
    parts = [f"{failed} failed"] if failed else []
    parts.append(f"{len(results) - failed} passed")
    if skipped:
        parts.append(f"{skipped} skipped")
    if planned > len(results):
        parts.append(f"{planned - len(results)} not run")
    took = f"{seconds:.1f}s" if seconds < 10 else format_eta(seconds)
    head = f"graphsafe: {stopped}: " if stopped else "graphsafe: "
    return f"{head}{', '.join(parts)} in {took}; report: {_shown(Path(run_dir).resolve())}"


def print_table(results: list[Result]) -> None:
    width = max([len(r.case) for r in results] + [4])
    print(f"\n{'case':<{width}}  {'verdict':<15} {'expected':<15} status")
    for r in sorted(results, key=lambda r: (r.ok, r.case)):
        print(f"{r.case:<{width}}  {r.verdict:<15} {r.expected:<15} {'ok' if r.ok else 'FAIL'}")
    failed = sum(not r.ok for r in results)
    print(f"\n{len(results) - failed} as expected, {failed} not, of {len(results)} cases")


def print_replay_table(result: Result) -> None:
    """The seeds' table: replay | eager error | graph error | threshold | verdict."""
    print(f"\n{result.case} ({result.backend}): verdict {result.verdict}, expected {result.expected}")
    print(
        f"{'pattern':<8}{'replay':>7}{'seed':>7}  {'eager error':>12}  {'graph error':>12}  {'threshold':>10}  verdict"
    )
    for row in result.rows:
        eager = "" if row.eager_error is None else f"{row.eager_error:.6f}"
        graph = "" if row.graph_error is None else f"{row.graph_error:.6f}"
        threshold = "" if row.threshold is None else f"{row.threshold:g}"
        print(
            f"{row.pattern:<8}{row.replay:>7}{row.seed:>7}  {eager:>12}  {graph:>12}  {threshold:>10}  {row.row_verdict}"
        )
    if result.detail:
        print(f"detail: {result.detail}")


def emit(text: str) -> None:
    """print() for output a reader may cut short (`list | head`): a closed pipe ends the output quietly."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not raise again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise _OutputClosed from None


class _OutputClosed(Exception):
    """The reader of stdout went away: stop printing, keep the exit code."""


def main(argv: list[str] | None = None) -> int:
    try:
        settings = config.load()
        profiles.check_env()
    except (config.ConfigError, ValueError) as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser(settings)
    args = parser.parse_args(argv)
    code = _run_command(args)
    if argv is None and getattr(args, "no_isolate", False) and threading.active_count() > 1:
        # An op run in this process may have left non-daemon threads that would keep it alive after the
        # reports are written; everything is flushed, so end here (`graphsafe` only, never a caller
        # that passed argv).
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    return code


def _run_command(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except _OutputClosed:
        return 0
    except UsageError as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (CaseError, CaseFileError, BackendUnavailable) as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NothingSelected as exc:
        print(f"graphsafe: no case ran: {exc}", file=sys.stderr)
        return EXIT_NOTHING_SELECTED
    except CaseExited as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return EXIT_NOT_AS_EXPECTED
    except (ReportsNotWritten, ReportWriteError) as exc:  # each file and why are on stderr already
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return EXIT_REPORTS_NOT_WRITTEN
    except OSError as exc:  # the machine refused a write or a read (disk full, permissions): not a bug here
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"graphsafe: interrupted ({exc.args[0] if exc.args else 'SIGINT'})", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        traceback.print_exc()
        print(f"graphsafe: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


def _start_workers_early(args: argparse.Namespace) -> StartedWorkers | None:
    """The workers of an isolated `verify`, spawned before this process loads the cases, so that their imports
    (torch, the suites) overlap this process's own instead of following them. None with --no-isolate, or
    when the backend cannot be resolved (run_verify then reports why)."""
    if args.no_isolate:
        return None
    try:
        backend = resolve_backend_name(args.backend)
        suites = [] if args.case else default_suites()
    except (BackendUnavailable, ValueError):
        return None  # the same call in run_verify or select_cases reports it
    devices = torch.cuda.device_count() if backend == "gpu" else 0
    return start_workers(list(args.case), suites, capped_jobs(args.jobs, backend, devices), devices)


def _check_environment() -> None:
    """Before anything of a run starts: every GRAPHSAFE_* value and the build cache (graphsafe.environment);
    a bad one is a usage error naming it, never a case's verdict later."""
    errors, warnings = environment.before_a_run()
    for warning in warnings:
        print(f"graphsafe: warning: {warning}", file=sys.stderr)
    if errors:
        raise UsageError("\ngraphsafe: error: ".join(errors))


def _dispatch(args: argparse.Namespace) -> int:
    if not getattr(args, "case", True):
        # No --case: the [tool.graphsafe] cases where the table lists some, else the built-in suite.
        args.case = list(args.settings.cases)
        args.settings.put_case_modules_on_path()
    if args.command in ("verify", "repro"):
        _check_environment()
    if args.command == "list":
        for case in select_cases(args.case, args.pattern):  # NothingSelected: exit 5, as pytest
            emit(f"{case.name:<48} {case.family:<20} expect={case.expect}")
        return 0
    if args.command == "report":
        from graphsafe.reports import baseline

        allow = getattr(args, "allow_platform_mismatch", False)
        if args.report_command == "nightly":
            return baseline.main_nightly(
                args.run_dir, allow_platform_mismatch=allow, out=emit, baseline=args.baseline
            )
        if args.report_command == "merge":
            return _merge(args)
        if args.report_command == "baseline":
            try:
                emit(f"baseline written: {baseline.update(args.run_dir, args.baseline)}")
            except (FileNotFoundError, baseline.RunReadError) as exc:
                raise UsageError(f"{args.run_dir} is not a finished run directory: {exc}") from exc
            return 0
        return baseline.main_compare(args.old, args.new, allow_platform_mismatch=allow, out=emit)
    if args.command == "repro":
        from graphsafe import reproduce

        if reproduce.is_counterexample(args.name):
            return reproduce.run(
                args.name,
                backend=args.backend,
                replays=args.replays,
                seed=args.seed,
                isolate=not args.no_isolate,
                deadline=args.deadline,
                markdown=args.markdown,
                explain=args.explain,
            )
        args.replays = args.replays or args.settings.replays or DEFAULT_REPLAYS
        cases = [c for c in select_cases(args.case, None) if c.name == args.name]
        if not cases:
            raise UsageError(f"no case named {args.name!r}; `graphsafe list` lists them")
        if args.sizes is not None:
            cases = [_at_sizes(cases[0], args.sizes)]
            args.no_isolate = True  # a worker knows the case by name only, with its whole size space
    started = None
    nothing_selected = ""  # why no case was selected: the run reports it and exits 5
    notes: list[str] = []
    skipped = 0  # selected cases skipped by their `requires`
    if args.command == "verify":
        started = _start_workers_early(args)
        try:
            cases, nothing_selected, notes, skipped = _verify_selection(args)
        except BaseException:
            if started is not None:
                stop_workers(started)
            raise
    began = time.monotonic()
    results, run_dir, status = run_verify(args, cases, started, notes=notes)
    stopped = str(status.get("reason", "")) if status else ""
    stopped_by_us = stopped.startswith("stopped after ")  # -x / --maxfail: the summary line says it
    try:
        if args.command == "repro":
            for result in results:
                print_replay_table(result)
            print(f"report: {run_dir}")
        else:
            if not args.quiet:
                for line in failure_blocks(results, list(args.case)):
                    print(line)
            took = time.monotonic() - began
            print(summary_line(results, len(cases), skipped, took, run_dir, stopped if stopped_by_us else ""))
        sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(_OutputClosed):
            emit("")
    # results.csv read back, and the writer checked on a failure it must record (harness/reports/results.py):
    # a writer that wrote another verdict or status than the run computed would pass every check that reads
    # results from memory, and a CI gate reads the file.
    misrecorded = check_written(run_dir, results)
    if misrecorded:
        for line in misrecorded:
            print(f"graphsafe: internal error: {line}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    if status is not None:
        if not stopped_by_us:
            print(f"graphsafe: {status.get('sentence', 'the run stopped early')}", file=sys.stderr)
        return 1
    if nothing_selected:
        print(f"graphsafe: no case ran: {nothing_selected}", file=sys.stderr)
        return EXIT_NOTHING_SELECTED
    for note in notes:
        print(f"graphsafe: {note}", file=sys.stderr)
    return 0 if all(r.ok for r in results) else 1


def _verify_selection(args: argparse.Namespace) -> tuple[list[Case], str, list[str], int]:
    """The cases `verify` runs, why none was selected ("" when some were: exit 5 otherwise), the notes its
    reports open with when no case is left to run, and how many selected cases their `requires` skipped.
    Zero cases is an answer, as in pytest: -k matching none or an empty shard is "no tests ran" (exit 5);
    every selected case skipped by its `requires` is a run that passed (exit 0); both write reports that say
    so. --lf then keeps the last run's failures among the cases left."""
    try:
        cases = select_cases(args.case, args.pattern)
    except NothingSelected as exc:
        return [], str(exc), [f"no case ran: {exc}"], 0
    if args.shard is not None:
        total = len(cases)
        cases = [c for c in cases if args.shard.holds(c.name)]
        if not cases:
            why = f"shard {args.shard} holds none of the {total} selected cases"
            return [], why, [f"no case ran: {why}"], 0
    selected = cases
    args.skipped = {}
    cases = without_unmet_requirements(cases, args.backend, quiet=bool(args.quiet), skipped=args.skipped)
    skipped = len(selected) - len(cases)
    if cases:
        return (
            (
                last_failed(cases, args.settings.runs_dir, quiet=bool(args.quiet))
                if args.last_failed
                else cases
            ),
            "",
            [],
            skipped,
        )
    reasons = "; ".join(f"{name}: {reason}" for name, reason in args.skipped.items())
    return (
        [],
        "",
        [f"no case ran: all {len(selected)} selected cases were skipped by their requires ({reasons})"],
        skipped,
    )


__all__ = ["REGISTRY", "main"]
