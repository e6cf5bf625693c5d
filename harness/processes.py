"""Processes an op starts end with its case, and none outlives the run.

An op may start processes and leave them running: `subprocess.Popen(["setsid", "sleep", "300"])`, a shell
that backgrounds a command and exits, a daemon that double-forks. A process in a session or process group of
its own escapes the kill of the worker's process group, and an orphan is adopted by init: seven `sleep`
processes outlived a run of one such op.

On Linux the process running cases (a worker, or the harness with --no-isolate) is a child subreaper
(prctl PR_SET_CHILD_SUBREAPER): an orphan among its descendants is adopted by it rather than by init, so it
stays in view. After each case (`CaseProcesses`) the descendants the case started that left the process's
own process group (setsid, setpgid, a daemon) are killed. Those still in the group are ended with the worker
(the runner kills its process group when the run ends or the worker is replaced) or, in-process, when the
run ends (`RunProcesses`): a pool a library starts once and reuses (torch inductor's compile workers stay in
the group) then still serves the next case instead of failing it with "Attempting to use a closed pool".
The harness is a subreaper for the run too, so what a killed or crashed worker leaves behind is adopted by
it and killed (after the worker's death, and at the end of the run).

Not covered: other platforms (no subreaper, no /proc: only the worker's process group is killed); processes
started outside the process tree (a systemd unit, a container, ssh to another host); and a harness killed
with SIGKILL, whose adopted orphans go to init (its workers still die with it: graphsafe.worker).

Processes are named by (pid, start time) so that a pid reused by an unrelated process is never killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_PR_GET_CHILD_SUBREAPER = 37
_PROC = Path("/proc")
# How long to wait for killed processes to be gone before going on (SIGKILL takes effect at once; a process
# in uninterruptible sleep on a device may take longer, and is then left to the run's end).
_REAP_SECONDS = 2.0

Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _prctl(option: int, value: int = 0) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if option == _PR_GET_CHILD_SUBREAPER:
            flag = ctypes.c_int(0)
            if libc.prctl(option, ctypes.byref(flag), 0, 0, 0) != 0:
                return None
            return flag.value
        return 0 if libc.prctl(option, value, 0, 0, 0) == 0 else None
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make this process adopt orphaned descendants (Linux); False where that is not possible."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1) is not None


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, process group, start time) of `pid`, or None when it is gone or a zombie."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _children(pid: int) -> list[int]:
    """Direct children of `pid`: /proc/PID/task/*/children (each thread's own), else a scan of /proc."""
    found: list[int] = []
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
        for task in tasks:
            found += [int(c) for c in (task / "children").read_text().split()]
        return found
    except FileNotFoundError:
        pass  # no such pid, or a kernel without CONFIG_PROC_CHILDREN
    except OSError:
        return found
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] == pid:
                found.append(int(entry.name))
    return found


def descendants(pid: int | None = None) -> dict[Process, int]:
    """Every live descendant of `pid` (default: this process) as {(pid, start time): process group}."""
    if not _PROC.is_dir():
        return {}
    found: dict[Process, int] = {}
    stack = _children(os.getpid() if pid is None else pid)
    seen: set[int] = set()
    while stack:
        child = stack.pop()
        if child in seen:
            continue
        seen.add(child)
        stat = _stat(child)
        if stat is None:
            continue
        found[(child, stat[2])] = stat[1]
        stack.extend(_children(child))
    return found


def end(processes: Iterable[Process]) -> list[int]:
    """SIGKILL each process that is still the one named (same pid and start time); reap those that are this
    process's children. Returns the pids killed."""
    killed = []
    for pid, started in processes:
        stat = _stat(pid)
        if stat is None or stat[2] != started:
            continue  # gone, or the pid now names another process
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    deadline = time.monotonic() + _REAP_SECONDS
    waiting = set(killed)
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: its own parent reaps it; wait until it is gone
                done = pid if _stat(pid) is None else 0
            if done:
                waiting.discard(pid)
        if waiting:
            time.sleep(0.01)
    return killed


def _reap_exited_children(keep: set[int]) -> None:
    """Collect the exit status of adopted orphans that ended on their own (zombies), except `keep` (processes
    whose status their subprocess.Popen will read). Never waitpid(-1): it could take a worker's status."""
    for pid in _children(os.getpid()):
        if pid in keep:
            continue
        try:
            state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _last_pid() -> str:
    """The pid most recently given out in this pid namespace (/proc/loadavg's last field): while it stays the
    same, no process was started anywhere, and a walk of the descendants can be skipped."""
    try:
        return (_PROC / "loadavg").read_text().rsplit(None, 1)[-1]
    except (OSError, IndexError):
        return ""


# The descendants of this process at its last walk, and the last pid then (CaseProcesses).
_known: set[Process] | None = None
_known_at = ""


def _walk() -> set[Process]:
    global _known, _known_at
    _known_at = _last_pid()
    _known = set(descendants())
    return _known


class CaseProcesses:
    """Around one case in a process that runs many: `end_escaped()` kills the processes started since
    `__init__` that left this process's process group (module note). A walk of the descendants reads /proc
    once per thread and child (40-50 us a read on the busy 2-core test box); it is skipped when no process
    was started since the last one (`_last_pid`), so a case that starts none costs two small reads."""

    def __init__(self) -> None:
        self._before = _known if _known is not None and _known_at and _last_pid() == _known_at else _walk()

    def end_escaped(self) -> list[int]:
        if _known_at and _last_pid() == _known_at:
            return []
        group = os.getpgrp()
        now = descendants()
        ended = end(p for p, g in now.items() if p not in self._before and g != group)
        _walk()
        return ended


@contextlib.contextmanager
def run_processes(keep: Iterable[int] = ()) -> Iterator[RunProcesses]:
    """For a run: this process adopts orphans (Linux subreaper, put back as it was afterwards), and at the
    end every process started during the run is killed, whatever group it is in."""
    scope = RunProcesses()
    try:
        yield scope
    finally:
        scope.end_all(keep)
        scope.close()


class RunProcesses:
    def __init__(self) -> None:
        self._previous = _prctl(_PR_GET_CHILD_SUBREAPER)
        self.subreaper = become_subreaper()
        self._before = set(descendants())

    def end_adopted(self, workers: Iterable[int]) -> list[int]:
        """Kill the processes started during the run that are not `workers` or their descendants: what a
        dead worker's cases left behind, adopted by this process."""
        alive = set(workers)
        keep: set[Process] = set()
        for pid in alive:
            keep.update(descendants(pid))
        ended = end(p for p in descendants() if p not in self._before and p not in keep and p[0] not in alive)
        _reap_exited_children(alive)
        return ended

    def end_all(self, keep: Iterable[int] = ()) -> list[int]:
        kept = set(keep)
        return end(p for p in descendants() if p not in self._before and p[0] not in kept)

    def close(self) -> None:
        if self.subreaper and self._previous == 0:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


__all__ = ["CaseProcesses", "RunProcesses", "become_subreaper", "descendants", "end", "run_processes"]
