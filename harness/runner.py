"""Running many cases: in-process, or isolated in worker processes with crash and deadline handling.

Isolated mode starts `jobs` workers (one per GPU when there are GPUs: each pinned with
CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES), hands out cases as workers free up, and turns a worker that
died into `crash` and one past the case's deadline into `timeout`, then starts a fresh worker and goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import verdicts as V
from harness.case import Case
from harness.errors import CaseError
from harness.protocol import check
from harness.records import Result, Row

DEFAULT_DEADLINE_S = 300.0
# The folder the harness package is imported from: on the workers' PYTHONPATH, so they import this same
# harness (and a checkout's suites next to it), whatever the caller's working directory.
_IMPORT_ROOT = Path(__file__).resolve().parent.parent
_WORKER_MODULE = f"{__package__}.worker"  # `harness.worker` in a checkout, `graphsafe.worker` installed


@dataclass
class RunOptions:
    backend: str = "auto"
    replays: int = 3
    seed: int = 0
    rebuilds: int = 0
    live_graphs: int = 0
    deadline: float = DEFAULT_DEADLINE_S


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    results: object  # file object of the result pipe
    case: Case | None = None
    started: float = 0.0
    buffer: bytes = b""
    ready: bool = False
    retiring: bool = False


def run_in_process(cases: list[Case], options: RunOptions, on_result: Callable[[Result], None]) -> None:
    for case in cases:
        result = check(
            case,
            options.backend,
            replays=options.replays,
            seed=options.seed,
            rebuilds=options.rebuilds,
            live_graphs=options.live_graphs,
        )
        on_result(result)


def run_isolated(
    cases: list[Case],
    sources: Sequence[str],
    options: RunOptions,
    jobs: int,
    devices: int,
    on_result: Callable[[Result], None],
    suites: Sequence[str] = (),
) -> None:
    """Run `cases` in `jobs` worker processes; raises CaseError for a malformed case (after stopping workers).

    Each worker imports `suites` (harness.suites.load_suites) and `sources` (case files or modules) before it
    runs anything: together they must register every case in `cases`.
    """
    pending = list(cases)
    load = {"case_sources": list(sources), "suites": list(suites)}
    selector = selectors.DefaultSelector()
    workers: dict[int, _Worker] = {}

    def start(index: int) -> None:
        workers[index] = _spawn(index, load, devices, jobs, selector)

    def finish(worker: _Worker, result: Result) -> None:
        worker.case = None
        on_result(result)

    for index in range(max(1, min(jobs, len(cases)))):
        start(index)
    try:
        while pending or any(w.case is not None for w in workers.values()):
            for worker in workers.values():
                if worker.ready and not worker.retiring and worker.case is None and pending:
                    _assign(worker, pending.pop(0), options)
            events = selector.select(timeout=0.5)
            for key, _ in events:
                worker = key.data
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:  # end of file: the worker is exiting; stop polling the descriptor
                    selector.unregister(key.fd)
                    continue
                worker.buffer += chunk
                while b"\n" in worker.buffer:
                    line, worker.buffer = worker.buffer.split(b"\n", 1)
                    _handle(worker, json.loads(line), options, finish)
            now = time.monotonic()
            for index, worker in list(workers.items()):
                case = worker.case
                deadline = (case.deadline if case and case.deadline else options.deadline) if case else None
                if worker.proc.poll() is not None:
                    _drain(worker, options, finish)  # a result written just before exiting still counts
                    case = worker.case
                    _close(worker, selector)
                    if case is not None:
                        detail = f"worker process died with exit code {worker.proc.returncode} while running the case"
                        finish(worker, _failed(case, options, V.CRASH, detail))
                    elif not worker.ready:
                        raise RuntimeError(
                            f"worker {index} exited with code {worker.proc.returncode} before starting"
                        )
                    if pending or any(w.case is not None for w in workers.values() if w is not worker):
                        start(index)
                    else:
                        del workers[index]
                elif case is not None and deadline is not None and now - worker.started > deadline:
                    _kill(worker)
                    _close(worker, selector)
                    finish(
                        worker,
                        _failed(case, options, V.TIMEOUT, f"no result after {deadline:.0f} s; worker killed"),
                    )
                    if pending:
                        start(index)
                    else:
                        del workers[index]
    finally:
        for worker in workers.values():
            _kill(worker)
            _close(worker, selector)
        selector.close()


def _spawn(
    index: int, load: dict[str, list[str]], devices: int, jobs: int, selector: selectors.BaseSelector
) -> _Worker:
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["GRAPHSAFE_RESULT_FD"] = str(write_fd)
    env["GRAPHSAFE_WORKER_LOAD"] = json.dumps(load)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_IMPORT_ROOT), env.get("PYTHONPATH", "")]))
    if devices > 0:
        # One worker per GPU: a box with N GPUs runs N cases at once.
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = str(index % devices)
    if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
        # Each worker's torch would start one OpenMP thread per core; N workers oversubscribe the CPU N-fold
        # and spin-waiting threads then crawl (H200 x2, 32 cores: 79 cases took 14.7 s with one worker and
        # 25 cases took 60 s with two). Give each worker its share of the cores.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    proc = subprocess.Popen(
        [sys.executable, "-m", _WORKER_MODULE],
        stdin=subprocess.PIPE,
        env=env,
        pass_fds=(write_fd,),
        start_new_session=True,  # so a kill takes the worker's own children too
    )
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    worker = _Worker(index=index, proc=proc, results=read_fd)
    selector.register(read_fd, selectors.EVENT_READ, worker)
    return worker


def _drain(worker: _Worker, options: RunOptions, finish: Callable[[_Worker, Result], None]) -> None:
    fd = worker.results
    if not isinstance(fd, int) or fd < 0:
        return
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        worker.buffer += chunk
    while b"\n" in worker.buffer:
        line, worker.buffer = worker.buffer.split(b"\n", 1)
        _handle(worker, json.loads(line), options, finish)


def _assign(worker: _Worker, case: Case, options: RunOptions) -> None:
    request = {
        "case": case.name,
        "backend": options.backend,
        "replays": options.replays,
        "seed": options.seed,
        "rebuilds": options.rebuilds,
        "live_graphs": options.live_graphs,
    }
    worker.case = case
    worker.started = time.monotonic()
    assert worker.proc.stdin is not None
    try:
        worker.proc.stdin.write((json.dumps(request) + "\n").encode())
        worker.proc.stdin.flush()
    except BrokenPipeError:
        pass  # the worker died; the poll loop reports the crash


def _handle(
    worker: _Worker, message: dict, options: RunOptions, finish: Callable[[_Worker, Result], None]
) -> None:
    if "fatal" in message:
        raise CaseError("<load>", "case source", message["fatal"])
    if "ready" in message:
        worker.ready = True
        return
    case = worker.case
    if case is None:
        return
    if "result" in message:
        if message.get("retire"):
            worker.retiring = True  # it exits after this result; the poll loop replaces it
        finish(worker, _result_from_json(message["result"]))
    elif "case_error" in message:
        raise CaseError(case.name, "definition", message["case_error"])
    else:
        finish(
            worker, _failed(case, options, V.CRASH, "harness error in worker: " + message["harness_error"])
        )


def _result_from_json(data: dict) -> Result:
    rows = [Row(**row) for row in data.pop("rows")]
    return Result(rows=rows, **data)


def _failed(case: Case, options: RunOptions, verdict: str, detail: str) -> Result:
    from harness.backends import resolve_backend_name

    return case_level_result(
        case.name, case.family, case.expect, resolve_backend_name(options.backend), verdict, detail
    )


def case_level_result(
    case: str, family: str, expected: str, backend: str, verdict: str, detail: str
) -> Result:
    """A result for a case that produced no rows of its own (crash, timeout)."""
    row = Row(
        case=case,
        family=family,
        backend=backend,
        device="",
        pattern="",
        replay=-1,
        seed_a=0,
        seed=0,
        eager_error=None,
        graph_error=None,
        graph_vs_eager=None,
        threshold=None,
        bit_exact=False,
        nonfinite=0,
        poisoned=0,
        row_verdict=verdict,
        detail=detail,
    )
    return Result(case, expected, verdict, backend, [row], detail)


def _kill(worker: _Worker) -> None:
    if worker.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()


def _close(worker: _Worker, selector: selectors.BaseSelector) -> None:
    fd = worker.results
    if isinstance(fd, int) and fd >= 0:
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(fd)
        os.close(fd)
        worker.results = -1
    if worker.proc.stdin is not None and not worker.proc.stdin.closed:
        with contextlib.suppress(BrokenPipeError):
            worker.proc.stdin.close()


__all__ = ["DEFAULT_DEADLINE_S", "RunOptions", "run_in_process", "run_isolated"]
