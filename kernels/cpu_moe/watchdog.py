"""CPU/hybrid MoE, the watchdog: it answers a wait that the CPU side never answers (a probe's missed deadline,
close() on a GPU that does not drain, any block under `wait_guard` of kernels/cpu_moe/executor.py).

NOTE on waits: a GPU wait-value has no timeout, nor does the split hostfn wait (a host function spinning on
the same done word). The probe's watchdog releases a wait the CPU never answers (it stores done := 1, which
either wait reads) and outlives a delayed launch; `wait_guard` is the same for any block of code (the GPU
tests run under it): past its deadline it answers every live executor's posted waits (a request nobody took)
until the block ends, and leaves idle slots alone.
Watchdog threads never call the GPU runtime (completion is a host word set by a host function): a runtime
call from another thread would invalidate a global-mode capture that happens to be open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Watchdog:
    """Releases a wait the CPU side never answered, and keeps doing so until the waiter has drained.

    A GPU wait-value that is never satisfied hangs the queue: it has no timeout, and the runtime offers no way
    to cancel it. After `deadline_s` the watchdog writes the slot's done word every `period_s` until
    `drained()` is true: a probe launch delayed past the deadline reaches its wait later, so one release at the
    deadline is not enough (FreeToken issue #350's fix keeps the release alive until such a launch drains). `max_s` bounds
    the thread's life; `hung` says it gave up (then the device is reported, never silently reused).
    """

    def __init__(
        self,
        release: Callable[[], None],
        drained: Callable[[], bool],
        *,
        deadline_s: float,
        period_s: float = 0.001,
        max_s: float = 120.0,
    ) -> None:
        self.release, self.drained = release, drained
        self.deadline_s, self.period_s, self.max_s = deadline_s, period_s, max_s
        self.releases = 0
        self.hung = False
        self.drained_at: float | None = None
        self.exited_at: float | None = None
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="cpu-moe-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end_of_grace = self.started_at + self.deadline_s
        while not self.drained():
            now = time.monotonic()
            if now - self.started_at > self.max_s:
                self.hung = True
                break
            if now >= end_of_grace:
                self.release()
                self.releases += 1
            time.sleep(self.period_s)
        else:
            self.drained_at = time.monotonic()
        self.exited_at = time.monotonic()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
