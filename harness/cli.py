"""The command line: `python -m harness verify | list | repro | report compare`.

Exit codes (public contract): verify exits 0 iff every verdict equals its expectation, 1 otherwise, 2 for a
usage error or a case file that cannot be loaded (the message names the file or case and the reason).
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from harness.backends import BACKEND_NAMES, resolve_backend_name
from harness.case import REGISTRY, Case, CaseFileError, load_case_source
from harness.errors import BackendUnavailable, CaseError
from harness.progress import Progress
from harness.protocol import DEFAULT_REPLAYS
from harness.records import Result
from harness.reports import fingerprint as fp_module
from harness.reports.html import write_html
from harness.reports.junit import write_junit
from harness.reports.markdown import render_summary
from harness.reports.results import ResultsWriter, default_run_dir, read_results
from harness.runner import DEFAULT_DEADLINE_S, RunOptions, run_in_process, run_isolated
from harness.suite_config import SuiteConfigError
from harness.suites import default_suites, load_default_suites


class UsageError(Exception):
    pass


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


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


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend", choices=BACKEND_NAMES, default="auto", help="auto: the GPU when present, else cpu"
    )
    p.add_argument(
        "--case", action="append", default=[], metavar="FILE_OR_MODULE", help="case file or module"
    )
    p.add_argument(
        "--replays", type=_positive_int, default=DEFAULT_REPLAYS, help="fresh-input replays per pattern"
    )
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of input A (B_i use seed+1+i)")
    p.add_argument(
        "--rebuilds", type=_non_negative_int, default=0, help="recapture R times after the replays"
    )
    p.add_argument(
        "--live-graphs", type=_non_negative_int, default=0, help="keep G graphs live, replay interleaved"
    )
    p.add_argument("--report-dir", type=Path, default=None, help="default reports/runs/<time>-<host>/")
    p.add_argument(
        "--jobs", type=_positive_int, default=None, help="worker processes (default: one per GPU, else 1)"
    )
    p.add_argument(
        "--deadline",
        type=_positive_seconds,
        default=DEFAULT_DEADLINE_S,
        help="seconds per case before `timeout`",
    )
    p.add_argument(
        "--no-isolate", action="store_true", help="run cases in this process (no crash/timeout isolation)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness", description="graphsafe: graph-replay safety checks"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="run cases and write a report")
    _add_run_arguments(verify)
    verify.add_argument(
        "-k", dest="pattern", default=None, help="only cases whose name matches (substring or glob)"
    )
    listing = sub.add_parser("list", help="list cases")
    listing.add_argument("--case", action="append", default=[], metavar="FILE_OR_MODULE")
    listing.add_argument("-k", dest="pattern", default=None)
    repro = sub.add_parser("repro", help="rerun one case with its recorded seeds and print its table")
    repro.add_argument("name")
    _add_run_arguments(repro)
    report = sub.add_parser("report", help="report tools")
    report_sub = report.add_subparsers(dest="report_command", required=True)
    compare = report_sub.add_parser(
        "compare", help="regressions of NEW against OLD (results.csv or run dirs)"
    )
    compare.add_argument("old", type=Path)
    compare.add_argument("new", type=Path)
    nightly = report_sub.add_parser("nightly", help="compare a run with its platform's committed baseline")
    nightly.add_argument("run_dir", type=Path)
    baseline = report_sub.add_parser("baseline", help="make a run the committed baseline of its platform")
    baseline.add_argument("run_dir", type=Path)
    return parser


def select_cases(sources: list[str], pattern: str | None) -> list[Case]:
    try:
        if sources:
            found: dict[str, Case] = {}
            for source in sources:
                for case in load_case_source(source):
                    found[case.name] = case
            cases = list(found.values())
        else:
            cases = load_default_suites()
    except (CaseError, CaseFileError, SuiteConfigError) as exc:
        raise UsageError(str(exc)) from exc
    if pattern:
        cases = [c for c in cases if _matches(c.name, pattern)]
        if not cases:
            raise UsageError(f"-k {pattern!r} matches no case; `python -m harness list` lists them")
    return cases


def _matches(name: str, pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatch(name, pattern)
    return pattern.lower() in name.lower()


def run_verify(args: argparse.Namespace, cases: list[Case]) -> tuple[list[Result], Path]:
    backend = resolve_backend_name(args.backend)
    options = RunOptions(
        backend=backend,
        replays=args.replays,
        seed=args.seed,
        rebuilds=args.rebuilds,
        live_graphs=args.live_graphs,
        deadline=args.deadline,
    )
    run_dir = args.report_dir or default_run_dir()
    writer = ResultsWriter(run_dir)
    progress = Progress(len(cases))

    def on_result(result: Result) -> None:
        writer.add(result)
        progress.update(result.case, result.ok)

    try:
        if args.no_isolate:
            run_in_process(cases, options, on_result)
        else:
            devices = torch.cuda.device_count() if backend == "gpu" else 0
            jobs = args.jobs or max(1, devices)
            sources = list(args.case)
            suites = [] if sources else default_suites()
            run_isolated(cases, sources, options, jobs, devices, on_result, suites=suites)
    finally:
        progress.close()
        writer.close()
        _write_reports(run_dir, writer.results, backend, list(args.case))
    return writer.results, run_dir


def _write_reports(run_dir: Path, results: list[Result], backend: str, case_sources: list[str]) -> None:
    write_junit(run_dir / "junit.xml", results)
    fingerprint = fp_module.collect(backend)
    # Repro commands of user case files need the files: summary.md prints them with --case.
    fingerprint["case_sources"] = shlex.join(case_sources)
    fp_module.write(run_dir, fingerprint)
    (run_dir / "summary.md").write_text(render_summary(read_results(run_dir), fingerprint))
    write_html(run_dir)


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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for case in select_cases(args.case, args.pattern):
                print(f"{case.name:<48} {case.family:<20} expect={case.expect}")
            return 0
        if args.command == "report":
            from harness.reports import baseline

            if args.report_command == "nightly":
                return baseline.main_nightly(args.run_dir)
            if args.report_command == "baseline":
                try:
                    print(f"baseline written: {baseline.update(args.run_dir)}")
                except FileNotFoundError as exc:
                    raise UsageError(f"{args.run_dir} is not a finished run directory: {exc}") from exc
                return 0
            return baseline.main_compare(args.old, args.new)
        if args.command == "repro":
            cases = [c for c in select_cases(args.case, None) if c.name == args.name]
            if not cases:
                raise UsageError(f"no case named {args.name!r}; `python -m harness list` lists them")
        else:
            cases = select_cases(args.case, args.pattern)
        results, run_dir = run_verify(args, cases)
    except UsageError as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return 2
    except (CaseError, BackendUnavailable) as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return 2
    if args.command == "repro":
        for result in results:
            print_replay_table(result)
    else:
        print_table(results)
    print(f"report: {run_dir}")
    return 0 if all(r.ok for r in results) else 1


__all__ = ["REGISTRY", "main"]
