"""A second opinion on one failing case: its eager call and its replay rerun under NVIDIA's compute-sanitizer.

Role: `graphsafe verify --sanitizer initcheck` (and `repro`) takes the run's first case whose replay or eager
call went wrong (stale_replay, uninitialized, eager_mismatch) and reruns it in a child process under
`compute-sanitizer --tool initcheck`, which reports device reads of memory nothing wrote. Its first findings
are appended to that case's detail ("initcheck: ..."). A machine without the tool, a ROCm build of torch or
the cpu backend gets a one-line note instead; the sanitizer never changes a verdict or the exit code.

Why a child of its own (`python -m graphsafe.sanitizer NAME ...`) and not the protocol: the protocol fills
every allocation with a byte pattern (harness/poison.py), and to initcheck a memset is a write, so it would
see nothing uninitialized. The child runs the case's op as an engine would: inputs A and B from the failing
row's seeds, a warm-up, one capture with A in a plain torch.cuda.CUDAGraph, B copied into the static inputs,
one replay and one eager call with B; the reads initcheck reports are the op's own.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from graphsafe import verdicts as V
from graphsafe.records import Result

TOOLS = ("initcheck",)
# Verdicts of a case whose eager call and replay both ran and one of them went wrong: what a rerun can show.
EXAMINED = (V.STALE_REPLAY, V.UNINITIALIZED, V.EAGER_MISMATCH)
FINDINGS_SHOWN = 3
# compute-sanitizer on a small op with a cold build cache: the child imports torch, builds the op's library
# if needed and runs the op twice; ten minutes is far past that and bounds a hang.
TIMEOUT_S = 600.0
_PREFIX = "========= "
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def find_tool() -> str | None:
    """compute-sanitizer on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin; None when absent."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (candidate := Path(root) / "bin" / "compute-sanitizer").is_file():
            return str(candidate)
    return None


def wanted(result: Result) -> bool:
    """Is this a case the sanitizer can say something about (its eager call and replay ran, one went wrong)?"""
    return result.verdict in EXAMINED


def child_command(
    tool_path: str, tool: str, case: str, sources: Sequence[str], seed_a: int, seed_b: int
) -> list[str]:
    command = [tool_path, "--tool", tool, "--print-limit", str(FINDINGS_SHOWN * 4)]
    command += [sys.executable, "-m", "graphsafe.sanitizer", case, "--seed-a", str(seed_a)]
    command += ["--seed-b", str(seed_b)]
    for source in sources:
        command += ["--case", source]
    return command


def summarize(tool: str, output: str, returncode: int) -> str:
    """compute-sanitizer's output as one detail line: the error count and the first findings, each as its
    header and the first frame (`at kernel(...)`), or why there is nothing to show."""
    findings: list[list[str]] = []
    errors: int | None = None
    for raw in output.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        text = raw[len(_PREFIX) :]
        summary = _SUMMARY.search(text)
        if summary:
            errors = int(summary.group(1))
            continue
        if not text.startswith(" "):
            if text.startswith(("COMPUTE-SANITIZER", "Target application returned", "Program hit")):
                continue
            findings.append([text.strip()])
        elif findings and len(findings[-1]) < 3 and text.strip().startswith(("at ", "by thread")):
            findings[-1].append(text.strip())
    if errors is None:
        tail = [line for line in output.strip().splitlines() if line.strip()][-1:] or ["no output"]
        return f"{tool}: the rerun under compute-sanitizer ended with exit code {returncode} and no summary: {tail[0]}"
    if errors == 0:
        return f"{tool}: 0 errors in the rerun of this case's eager call and replay"
    shown = "; ".join(" ".join(f) for f in findings[:FINDINGS_SHOWN])
    return f"{tool}: {errors} error{'s' * (errors != 1)} in the rerun; first: {shown}"


def second_opinion(
    result: Result, tool: str, backend: str, sources: Sequence[str], timeout: float = TIMEOUT_S
) -> str:
    """Rerun `result`'s case under compute-sanitizer `tool`; returns the line for its detail."""
    if tool not in TOOLS:
        raise ValueError(f"sanitizer tool must be one of {TOOLS}, got {tool!r}")
    if backend != "gpu":
        return (
            f"{tool}: not run: compute-sanitizer checks device code, and this run used the {backend} backend"
        )
    import torch

    if torch.version.hip:
        return f"{tool}: not run: compute-sanitizer is NVIDIA's and this torch is a ROCm build"
    tool_path = find_tool()
    if tool_path is None:
        return f"{tool}: not run: compute-sanitizer is not installed (looked in PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"
    failing = next((r for r in result.rows if r.row_verdict in EXAMINED and r.replay >= 0), None)
    row = failing or next((r for r in result.rows if r.replay >= 0), None)
    seed_a, seed_b = (row.seed_a, row.seed) if row is not None else (0, 1)
    command = child_command(tool_path, tool, result.case, sources, seed_a, seed_b)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"{tool}: the rerun under compute-sanitizer did not finish in {timeout:.0f} s"
    except OSError as exc:
        return f"{tool}: compute-sanitizer could not be started: {exc}"
    return summarize(tool, done.stdout + done.stderr, done.returncode)


def annotate(result: Result, line: str) -> None:
    """Append the sanitizer's line to the case's detail and to its first failing row's."""
    result.detail = f"{result.detail}; {line}" if result.detail else line
    row = next((r for r in result.rows if r.row_verdict == result.verdict), None)
    if row is not None:
        row.detail = f"{row.detail}; {line}" if row.detail else line


# ------------------------------------------------------------------------------------------ the child


def rerun(case_name: str, sources: Sequence[str], seed_a: int, seed_b: int) -> None:
    """The child's work (module note): one capture with A, one replay and one eager call with B."""
    import torch

    from graphsafe.case import REGISTRY, load_case_source
    from graphsafe.suites import load_default_suites
    from graphsafe.verdict_rules import _call_op, _clone_all, prepare_inputs

    if sources:
        for source in sources:
            load_case_source(source)
    else:
        load_default_suites()
    case = REGISTRY.get(case_name)
    device = torch.device("cuda", torch.cuda.current_device())
    inputs_b = case.inputs(seed_b, device)
    static = _clone_all(case.inputs(seed_a, device))
    prepare_inputs(case, static)
    side, current = torch.cuda.Stream(), torch.cuda.current_stream()
    side.wait_stream(current)
    with torch.no_grad(), torch.cuda.stream(side):
        _call_op(case, static)
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        _call_op(case, static)
    with torch.no_grad():
        for name, t in inputs_b.items():
            static[name].copy_(t)
    prepare_inputs(case, static)
    graph.replay()
    torch.cuda.synchronize()
    eager = _clone_all(inputs_b)
    prepare_inputs(case, eager)
    with torch.no_grad():
        _call_op(case, eager)
    torch.cuda.synchronize()
    print(
        f"graphsafe sanitizer: {case_name}: capture with seed {seed_a}, replay and eager with seed {seed_b} ran"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphsafe.sanitizer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("name")
    parser.add_argument("--seed-a", type=int, default=0)
    parser.add_argument("--seed-b", type=int, default=1)
    parser.add_argument("--case", action="append", default=[])
    args = parser.parse_args(argv)
    rerun(args.name, args.case, args.seed_a, args.seed_b)
    return 0


if __name__ == "__main__":
    from graphsafe.sanitizer import main as _main  # the package's module, not a second copy as __main__

    sys.exit(_main())
