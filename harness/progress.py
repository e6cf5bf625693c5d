"""Live progress for `graphsafe verify`: cases done/total, failures so far, ETA, current case.

On a terminal the line is rewritten in place (\\r), so a long run shows one moving line; when stderr is a pipe
or a CI log, finished cases get plain lines, because \\r in a log file turns into one unreadable line: one per
case, or with `every_s` one per that many seconds, at a failure and at the last case (`graphsafe verify`:
a 288-case run's log then holds a few lines, not 288). The ETA is the mean time per finished case times the
cases left: cases differ in cost, so it is a rough guide, which is why it is printed in whole seconds.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

_CLEAR_TO_EOL = "\x1b[K"


def format_eta(seconds: float) -> str:
    """ "42s", "3m05s", "1h02m": short enough to leave room for the case name."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{(total % 3600) // 60:02d}m"


class Progress:
    """Progress of a run over `total` cases; call `update` once per finished case, `close` at the end."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = 0.0,
    ) -> None:
        self.total = max(0, int(total))
        # Resolved at call time, not as a default argument, so pytest's capsys (which swaps sys.stderr) works.
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.done = 0
        self.failures = 0
        self._clock = clock
        self._start = clock()
        self._in_place = self._is_tty()
        self._line_open = False  # an in-place line is on screen without its newline yet
        self._every_s = every_s
        self._last_line = self._start

    def _is_tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (OSError, ValueError):  # closed or detached streams
            return False

    def eta_seconds(self) -> float | None:
        """Seconds left, estimated from the mean time per finished case; None before the first case."""
        if self.done == 0:
            return None
        per_case = (self._clock() - self._start) / self.done
        return per_case * max(0, self.total - self.done)

    def line(self, case: str) -> str:
        eta = self.eta_seconds()
        eta_text = "?" if eta is None else format_eta(eta)
        return f"[{self.done}/{self.total}] failures={self.failures} eta={eta_text} {case}"

    def update(self, case: str, ok: bool) -> None:
        """Record one finished case (`ok`: its verdict equals its expectation) and show the new line."""
        self.done += 1
        if not ok:
            self.failures += 1
        text = self.line(case)
        if self._in_place:
            width = shutil.get_terminal_size(fallback=(120, 24)).columns
            # A line longer than the terminal wraps, and \r then only rewrites its last part.
            self.stream.write("\r" + text[: max(1, width - 1)] + _CLEAR_TO_EOL)
            self._line_open = True
        else:
            now = self._clock()
            if self._every_s and ok and self.done < self.total and now - self._last_line < self._every_s:
                return
            self._last_line = now
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the in-place line so whatever prints next starts on a fresh line."""
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BuildProgress:
    """Progress of the native builds run before the first case (graphsafe.native.build.prebuild): a line when
    a build starts and when it ends, with the ETA of those still running. Each build has its own expected
    time (its last cold build on this machine), so the ETA is the longest expected remainder among the builds
    in flight: they compile at once. Case progress starts after the builds, so its ETA never counts them."""

    def __init__(
        self,
        expected: dict[str, float],
        stream: TextIO | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.expected = dict(expected)
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self._clock = clock
        self._started: dict[str, float] = {}
        self._finished: set[str] = set()
        self._lock = threading.Lock()

    def eta_seconds(self) -> float:
        now = self._clock()
        left = [
            max(0.0, self.expected[label] - (now - self._started.get(label, now)))
            for label in self.expected
            if label not in self._finished
        ]
        return max(left, default=0.0)

    def started(self, label: str) -> None:
        with self._lock:
            self._started[label] = self._clock()
            self._write(f"compiling {label} (about {format_eta(self.expected.get(label, 0.0))})")

    def finished(self, label: str, seconds: float, error: BaseException | None = None) -> None:
        with self._lock:
            self._finished.add(label)
            outcome = f"FAILED after {seconds:.1f}s: {type(error).__name__}" if error else f"{seconds:.1f}s"
            self._write(f"{label} {outcome}")

    def event(self, kind: str, build: Any, seconds: float, error: BaseException | None) -> None:
        """graphsafe.native.build.prebuild's on_event."""
        if kind == "start":
            self.started(build.label)
        else:
            self.finished(build.label, seconds, error)

    def _write(self, text: str) -> None:
        done, total = len(self._finished), len(self.expected)
        self.stream.write(f"[build {done}/{total}] eta={format_eta(self.eta_seconds())} {text}\n")
        self.stream.flush()
