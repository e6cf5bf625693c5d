"""Running many cases: in-process, or isolated in worker processes with crash and deadline handling.

Isolated mode starts `jobs` workers (one per GPU when there are GPUs: each pinned with
CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES), hands out cases as workers free up, and turns a worker that
died into `crash` and one past the case's deadline into `timeout`, then starts a fresh worker and goes on.

Given `validated`, both modes first check every case's definition on the run's device (make_inputs for A and
one B: names, shapes, dtypes, A and B differ; the op takes the inputs) and hand the input sizes to
`validated` (the CLI bounds --replays/--live-graphs with `check_bounds`) before any case runs, so a bad case
or a bound that memory cannot hold stops the run with nothing run. Workers die with their parent
(graphsafe.worker: a parent-death signal on Linux and a liveness check everywhere).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphsafe import verdicts as V
from graphsafe.case import Case, CaseFileError
from graphsafe.case_run import add_note, run_case
from graphsafe.errors import CaseError
from graphsafe.poison import PATTERNS
from graphsafe.process_state import restored
from graphsafe.processes import RunProcesses, run_processes
from graphsafe.protocol import validate_definition
from graphsafe.records import Result, Row, case_level_result

DEFAULT_DEADLINE_S = 300.0
# Workers run the same interpreter, which imports graphsafe as this process did (installed or editable).
_WORKER_MODULE = f"{__package__}.worker"


@dataclass
class RunOptions:
    backend: str = "auto"
    replays: int = 3
    seed: int = 0
    rebuilds: int = 0
    live_graphs: int = 0
    deadline: float = DEFAULT_DEADLINE_S
    explain: bool = False  # the launch diff for every case (graphsafe.protocol.check explain=)


@dataclass(frozen=True)
class Validated:
    """A case whose definition passed the checks, with what it needs from memory."""

    case: Case
    input_bytes: int  # one input set, from make_inputs on the run's device
    available_bytes: int  # memory free on that device when it was measured


# What one case holds at once, in input sets: A, the static buffers, the current B, the eager call's copy, the
# hidden-state probe's copy and the outputs (protocol._check_pattern); each live graph adds its own static
# buffers and outputs (two sets). Rows are kept until the case ends: one Row, its dict and JSON in the
# worker and again in the parent come to under 4 KiB (sys.getsizeof over a CPU run's rows: about 1.5 KiB).
INPUT_SETS_HELD = 6
INPUT_SETS_PER_LIVE_GRAPH = 2
ROW_BYTES = 4096
# A case may use at most this share of the free memory: torch, the op's workspace and the other workers
# need the rest.
MEMORY_SHARE = 0.5


class BoundsError(ValueError):
    """--replays / --live-graphs would need more memory than the device has (CLI exit code 2)."""


def needed_bytes(input_bytes: int, replays: int, live_graphs: int) -> int:
    sets = INPUT_SETS_HELD + INPUT_SETS_PER_LIVE_GRAPH * live_graphs
    return input_bytes * sets + replays * len(PATTERNS) * ROW_BYTES


def check_bounds(validated: Sequence[Validated], options: RunOptions, jobs: int) -> None:
    """BoundsError naming the option, the case, the estimate and the largest value that fits, when a case's
    estimate (`needed_bytes`) exceeds MEMORY_SHARE of the free memory divided among `jobs` workers."""
    for v in validated:
        live = max(options.live_graphs, v.case.live_graphs)
        budget = int(v.available_bytes * MEMORY_SHARE / max(1, jobs))
        need = needed_bytes(v.input_bytes, options.replays, live)
        if need <= budget:
            continue
        rows_bytes = options.replays * len(PATTERNS) * ROW_BYTES
        sets_bytes = need - rows_bytes
        if rows_bytes >= sets_bytes:
            spare = budget - needed_bytes(v.input_bytes, 0, live)
            limit = f"--replays at most {max(0, spare // (len(PATTERNS) * ROW_BYTES))}"
            option = f"--replays {options.replays}"
        else:
            spare = budget - needed_bytes(v.input_bytes, options.replays, 0)
            per_graph = max(1, v.input_bytes * INPUT_SETS_PER_LIVE_GRAPH)
            limit = f"--live-graphs at most {max(0, spare // per_graph)}"
            option = f"--live-graphs {live}"
        raise BoundsError(
            f"{option} needs about {_size(need)} for case {v.case.name!r} ({_size(v.input_bytes)} per input "
            f"set), more than {MEMORY_SHARE:.0%} of the {_size(v.available_bytes)} free"
            + (f" shared by {jobs} workers" if jobs > 1 else "")
            + f": use {limit}"
        )


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def available_memory(backend: str) -> int:
    """Free bytes where the case's tensors live: the GPU's free memory, else the host's available memory."""
    import torch

    if backend == "gpu" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # no way to tell (not Linux, no sysconf): no memory bound


def file_digests(sources: Sequence[str]) -> dict[str, str]:
    """sha256 of each case source that is a file: a worker (re)started later checks it loads the same file."""
    digests = {}
    for source in sources:
        path = Path(source)
        if path.is_file():
            digests[source] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


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
    spawned: float = field(default_factory=time.monotonic)
    last_case: str = ""  # the case assigned last: a worker that dies or is killed is replaced on its account
    replaces: str = ""  # the case whose worker this one replaces, until it is ready
    validating: bool = False
    # The worker's last stderr lines (it is forwarded to ours as it comes): a crash's detail quotes them.
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    stderr_reader: threading.Thread | None = None


@dataclass
class StartedWorkers:
    """Worker processes spawned ahead of the run (`start_workers`): they import torch and the case sources
    while this process loads the same sources and builds, instead of after (each such import took 5.6-7.2 s
    on the H200 host with 8 workers, reports/performance.md)."""

    load: dict[str, Any]
    selector: selectors.BaseSelector
    workers: dict[int, _Worker]


def start_workers(sources: Sequence[str], suites: Sequence[str], jobs: int, devices: int) -> StartedWorkers:
    """Spawn `jobs` workers that load `sources` and `suites`; hand them to run_isolated, or stop_workers."""
    load = {"case_sources": list(sources), "suites": list(suites), "digests": file_digests(sources)}
    selector = selectors.DefaultSelector()
    workers = {index: _spawn(index, load, devices, jobs, selector) for index in range(max(1, jobs))}
    return StartedWorkers(load, selector, workers)


def stop_workers(started: StartedWorkers) -> None:
    """Stop workers that no run adopted (the run ended before its cases started: a usage error, say)."""
    for worker in started.workers.values():
        _kill(worker)
        _close(worker, started.selector)
    started.workers.clear()
    started.selector.close()


def run_in_process(
    cases: list[Case],
    options: RunOptions,
    on_result: Callable[[Result], None],
    validated: Callable[[list[Validated]], None] | None = None,
) -> None:
    with run_processes():  # what the cases left running ends with the run (graphsafe.processes)
        if validated is not None:
            available = available_memory(options.backend)
            checked = []
            for c in cases:
                with restored(c):  # make_inputs runs here too
                    checked.append(
                        Validated(c, validate_definition(c, options.backend, seed=options.seed), available)
                    )
            validated(checked)
        for case in cases:
            start = time.monotonic()
            try:
                ran = run_case(
                    case,
                    options.backend,
                    replays=options.replays,
                    seed=options.seed,
                    rebuilds=options.rebuilds,
                    live_graphs=options.live_graphs,
                    explain=options.explain,
                )
                result = ran.result
                if ran.replace_process:
                    add_note(result, "later cases of this --no-isolate run share the process and may see it")
            except Exception as exc:  # graphsafe's own fault on this case: named as such, the run goes on
                detail = f"harness error in process: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
                result = _failed(case, options, V.CRASH, detail)
            result.seconds = time.monotonic() - start
            on_result(result)


def run_isolated(
    cases: list[Case],
    sources: Sequence[str],
    options: RunOptions,
    jobs: int,
    devices: int,
    on_result: Callable[[Result], None],
    suites: Sequence[str] = (),
    validated: Callable[[list[Validated]], None] | None = None,
    expected_seconds: Mapping[str, float] | None = None,
    started: StartedWorkers | None = None,
    respawns: dict[str, float] | None = None,
) -> None:
    """Run `cases` in `jobs` worker processes; raises CaseError for a malformed case (after stopping workers).
    `expected_seconds` (case_seconds_history): with several workers, cases start longest first. `started`: workers `start_workers`
    spawned for the same sources and suites before the cases were loaded here (stopped by this call).
    `respawns`, when given, receives for each case whose worker was killed or retired the seconds its
    replacement took to start (`slot_seconds` adds them to the case's own for the next run's order).

    Each worker imports `suites` (graphsafe.suites.load_suites) and `sources` (case files or modules) before it
    runs anything: together they must register every case in `cases`. A case file that changed since
    `sources` were read is refused by the worker that loads it (CaseFileError): the run never mixes two
    versions of a case.
    """
    # With one worker the order cannot change the run's length, and runs keep the registration order.
    pending = longest_first(cases, expected_seconds or {}) if jobs > 1 else list(cases)
    pool = started if started is not None else start_workers(sources, suites, jobs, devices)
    load, selector, workers = pool.load, pool.selector, pool.workers
    active = max(1, min(jobs, len(cases)))  # the workers this run uses
    for index in [i for i in workers if i >= active]:
        _kill(workers[index])  # started for more cases than were selected
        _close(workers.pop(index), selector)
    to_validate = list(cases) if validated is not None else []
    checked: list[Validated] = []
    # One spare worker per GPU (one in all on the CPU), started beside the others, takes the place of a worker
    # that a timeout, a crash or a device fault ended: a new worker spends seconds importing torch and the
    # cases before it can take a case (5.6-7.2 s each on the H200 with 8 workers, three times in every
    # `make verify`: reports/performance.md). Only where a core is left
    # for it: on a machine with no more cores than workers its start would slow theirs.
    spare_slots = max(1, min(devices, active)) if active > 1 and (os.cpu_count() or 1) > active else 0
    spares: dict[int, _Worker] = {}

    def spawn_spare(slot: int) -> None:
        spares[slot] = _spawn(slot, load, devices, jobs, selector)  # index `slot`: that slot's device

    def start(index: int, replaces: str = "") -> None:
        slot = index % devices if devices > 0 else 0
        spare = spares.pop(slot, None)
        if spare is not None and spare.proc.poll() is None:
            spare.index, spare.spawned = index, time.monotonic()  # its wait, if any, counts from now
            workers[index] = spare
        else:
            if spare is not None:  # it died before it was needed: replace it the ordinary way
                _close(spare, selector)
            workers[index] = _spawn(index, load, devices, jobs, selector)
        if slot < spare_slots:
            spawn_spare(slot)
        # A spare that was ready took the case's place at once: nothing to charge to the case.
        workers[index].replaces = "" if workers[index].ready else replaces

    def finish(worker: _Worker, result: Result) -> None:
        worker.case = None
        result.seconds = time.monotonic() - worker.started
        result.started_at, result.worker = worker.started, worker.index
        on_result(result)

    def validate_done(worker: _Worker, message: dict) -> None:
        assert worker.case is not None
        checked.append(Validated(worker.case, message["input_bytes"], message["available_bytes"]))
        worker.case, worker.validating = None, False

    def handle(worker: _Worker, line: bytes) -> None:
        try:
            message = json.loads(line)
            if "valid" in message:
                validate_done(worker, message)
            else:
                _handle(worker, message, options, finish)
                if worker.ready and worker.replaces:
                    if respawns is not None:
                        respawns[worker.replaces] = time.monotonic() - worker.spawned
                    worker.replaces = ""
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if isinstance(exc, CaseError):
                raise
            # A line cut off or garbled (the worker was killed mid-write, or an op wrote to the result pipe):
            # nothing more from this worker can be trusted. Its case is a crash; a fresh worker goes on.
            worker.buffer = b""
            worker.retiring = True
            _kill(worker)
            worker_lost(worker, f"the worker's answer was cut off or corrupt ({type(exc).__name__}: {exc})")

    def worker_lost(worker: _Worker, why: str) -> None:
        """A worker that died or hung: the case's verdict, or a definition error while validating it."""
        case = worker.case
        if case is None:
            return
        if worker.validating:
            raise CaseError(
                case.name, "make_inputs", f"{why} while making its inputs for the definition check"
            )
        verdict = V.TIMEOUT if why.startswith("no result") else V.CRASH
        finish(worker, _failed(case, options, verdict, why + stderr_tail_text(worker)))

    def end_orphans() -> None:
        """After a worker died or was killed: end what its cases left running (adopted by this process)."""
        scope.end_adopted(w.proc.pid for w in [*workers.values(), *spares.values()] if w.proc.poll() is None)

    validating = validated is not None
    for index in range(active):
        if index not in workers:
            workers[index] = _spawn(index, load, devices, jobs, selector)
    for slot in range(spare_slots):
        spawn_spare(slot)
    # This process adopts what a dead worker's cases left running, ends it, and ends the rest with the run.
    scope = RunProcesses()
    try:
        while pending or to_validate or any(w.case is not None for w in workers.values()):
            if validating and not to_validate and not any(w.validating for w in workers.values()):
                validating = False
                assert validated is not None
                order = {c.name: i for i, c in enumerate(cases)}
                validated(sorted(checked, key=lambda v: order[v.case.name]))
            for worker in workers.values():
                if not worker.ready or worker.retiring or worker.case is not None:
                    continue
                if validating and to_validate:
                    _assign(worker, to_validate.pop(0), options, validate=True)
                elif not validating and pending:
                    chosen = _next_case(pending, workers.values())
                    if chosen is not None:
                        _assign(worker, pending.pop(chosen), options)
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
                    handle(worker, line)
            now = time.monotonic()
            for index, worker in list(workers.items()):
                case = worker.case
                deadline = (case.deadline if case and case.deadline else options.deadline) if case else None
                if worker.proc.poll() is not None:
                    _drain(worker, handle)  # a result written just before exiting still counts
                    _close(worker, selector)
                    end_orphans()
                    if worker.case is not None:
                        worker_lost(
                            worker,
                            f"worker process died with exit code {worker.proc.returncode}"
                            " while running the case",
                        )
                    elif not worker.ready:
                        raise RuntimeError(
                            f"worker {index} exited with code {worker.proc.returncode} before starting"
                        )
                    busy = any(w.case is not None for w in workers.values() if w is not worker)
                    if pending or to_validate or busy:
                        start(index, replaces=worker.last_case)
                    else:
                        del workers[index]
                elif case is not None and deadline is not None and now - worker.started > deadline:
                    _kill(worker)
                    _close(worker, selector)
                    end_orphans()
                    worker_lost(worker, f"no result after {deadline:.0f} s; worker killed")
                    if pending or to_validate:
                        start(index, replaces=worker.last_case)
                    else:
                        del workers[index]
    finally:
        for worker in [*workers.values(), *spares.values()]:
            _kill(worker)
            _close(worker, selector)
        selector.close()
        scope.end_all()
        scope.close()


def _next_case(pending: Sequence[Case], workers: Iterable[_Worker]) -> int | None:
    """Index of the first pending case whose `exclusive` name no running case holds (None: all wait)."""
    held = {w.case.exclusive for w in workers if w.case is not None and w.case.exclusive}
    return next(
        (i for i, case in enumerate(pending) if not case.exclusive or case.exclusive not in held), None
    )


def longest_first(cases: Sequence[Case], history: Mapping[str, float]) -> list[Case]:
    """Cases by the seconds this machine took for them last time, longest first; cases never timed keep their
    order, at the front. A long case started last holds the run's end while the other workers sit idle
    (a timeout control that lasts its whole deadline).
    Cases sharing an `exclusive` name run one after another, so the group is placed by its summed seconds
    (its members together, longest first): 32 short host-waiting cases sorted among the short ones would
    be left to run one at a time after everything else. Among cases never timed (a first run on the machine)
    a group comes first, its members in their order: its cases cannot overlap, so it is the run's longest
    chain (on the H200 the built-in suite's 32 host-waiting cases take 18 s one after another, and started
    last they ended a cold run long after the other workers: reports/performance.md)."""
    own = {c.name: history.get(c.name, math.inf) for c in cases}
    group: dict[str, float] = {}
    for c in cases:
        if c.exclusive:
            group[c.exclusive] = group.get(c.exclusive, 0.0) + own[c.name]
    return sorted(
        cases,
        key=lambda c: (-group.get(c.exclusive, own[c.name]), not c.exclusive, c.exclusive, -own[c.name]),
    )


def _case_seconds_path() -> Path:
    from graphsafe.native.build import cache_dir  # the machine's cache folder, beside the build cache

    return cache_dir() / "case_seconds.json"


def slot_seconds(case_seconds: Mapping[str, float], respawns: Mapping[str, float]) -> dict[str, float]:
    """What each case cost its worker slot: its own seconds, plus the start of the worker that replaced the
    one it killed or retired. A timeout control took its 5 s deadline and then held its slot for 5.6 s more
    while a new worker imported torch and the cases (H200, 8 workers: reports/performance.md); ordered by
    its own seconds it started mid-run, and the case its replacement took next ended the run after every
    other worker."""
    return {name: seconds + respawns.get(name, 0.0) for name, seconds in case_seconds.items()}


def case_seconds_history(backend: str) -> dict[str, float]:
    """Seconds each case took the last time it ran on this machine with this backend ({} when unknown)."""
    try:
        data = json.loads(_case_seconds_path().read_text())
        return {str(k): float(v) for k, v in data.get(backend, {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def remember_case_seconds(backend: str, seconds: Mapping[str, float]) -> None:
    """Merge this run's case times into the history (best effort: a read-only cache only loses the order)."""
    path = _case_seconds_path()
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(data, dict):
            data = {}
        data.setdefault(backend, {}).update({k: round(v, 3) for k, v in seconds.items()})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        os.replace(tmp, path)
    except (OSError, ValueError, TypeError, AttributeError):
        pass


def _spawn(index: int, load: dict, devices: int, jobs: int, selector: selectors.BaseSelector) -> _Worker:
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["GRAPHSAFE_RESULT_FD"] = str(write_fd)
    env["GRAPHSAFE_WORKER_LOAD"] = json.dumps(load)
    env["GRAPHSAFE_PARENT_PID"] = str(os.getpid())  # the worker exits when this process is gone
    if devices > 0:
        # One worker per GPU: a box with N GPUs runs N cases at once.
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = str(index % devices)
    if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
        # Each worker's torch would start one OpenMP thread per core; N workers oversubscribe the CPU N-fold
        # and spin-waiting threads then crawl. Give each worker its share of the cores.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    proc = subprocess.Popen(
        [sys.executable, "-m", _WORKER_MODULE],
        stdin=subprocess.PIPE,
        env=env,
        pass_fds=(write_fd,),
        stderr=subprocess.PIPE,
        start_new_session=True,  # so a kill takes the worker's own children too
    )
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    worker = _Worker(index=index, proc=proc, results=read_fd)
    worker.stderr_reader = threading.Thread(
        target=_forward_stderr,
        args=(proc.stderr, worker.stderr_tail),
        name=f"worker-{index}-stderr",
        daemon=True,
    )
    worker.stderr_reader.start()
    selector.register(read_fd, selectors.EVENT_READ, worker)
    return worker


def _drain(worker: _Worker, handle: Callable[[_Worker, bytes], None]) -> None:
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
        handle(worker, line)


def _assign(worker: _Worker, case: Case, options: RunOptions, validate: bool = False) -> None:
    request = {
        "validate": validate,
        "case": case.name,
        "backend": options.backend,
        "replays": options.replays,
        "seed": options.seed,
        "rebuilds": options.rebuilds,
        "live_graphs": options.live_graphs,
        "explain": options.explain,
    }
    worker.case = case
    worker.last_case = case.name
    worker.validating = validate
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
        raise CaseFileError(f"a worker could not load the cases: {message['fatal']}")
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
        error = message["case_error"]  # the CaseError's fields: re-raised as it was, not wrapped again
        raise CaseError(error["case"], error["field"], error["problem"])
    else:
        finish(
            worker, _failed(case, options, V.CRASH, "harness error in worker: " + message["harness_error"])
        )


def _result_from_json(data: dict) -> Result:
    rows = [Row(**row) for row in data.pop("rows")]
    return Result(rows=rows, **data)


STDERR_TAIL_LINES = 20
_STDERR_LINE_CHARS = 400


def _forward_stderr(stream: Any, tail: deque[str]) -> None:
    """Copy a worker's stderr to ours line by line, keeping the last lines for the detail of a crash."""
    out = getattr(sys.stderr, "buffer", None)
    for line in iter(stream.readline, b""):
        tail.append(line.decode("utf-8", "replace").rstrip()[:_STDERR_LINE_CHARS])
        with contextlib.suppress(OSError, ValueError):  # our stderr closed: keep collecting the tail
            if out is not None:
                out.write(line)
                out.flush()
            else:
                sys.stderr.write(line.decode("utf-8", "replace"))
    stream.close()


def stderr_tail_text(worker: _Worker) -> str:
    """The lines "; last stderr lines of the worker:\n..." (the lines a crash printed: an assert, a CUDA error), or ""."""
    if worker.stderr_reader is not None:
        worker.stderr_reader.join(timeout=2.0)  # the pipe ends when the worker (and its children) are gone
    lines = [line for line in worker.stderr_tail if line.strip()]
    return "; last stderr lines of the worker:\n" + "\n".join(lines) if lines else ""


def _failed(case: Case, options: RunOptions, verdict: str, detail: str) -> Result:
    from graphsafe.backends import resolve_backend_name

    return case_level_result(
        case.name, case.family, case.expect, resolve_backend_name(options.backend), verdict, detail
    )


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


__all__ = [
    "DEFAULT_DEADLINE_S",
    "BoundsError",
    "RunOptions",
    "Validated",
    "available_memory",
    "check_bounds",
    "run_in_process",
    "run_isolated",
]
