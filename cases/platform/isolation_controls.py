"""Isolation controls: a case that faults the device and cases that hang or kill the process.

They prove that the runner's worker isolation turns a dead or hung case into `crash` / `timeout` and loses no
other case's rows. Never run them in the pytest process: their `expect` (crash / timeout) is what in-process
loops test for (cases/test_registry.py sends them through the isolated runner, tests/test_platform_cases.py
runs each in a subprocess). GPU-only: registered when `torch.cuda.is_available()` at import.

NOTE on the illegal address: CUDA reports the fault at the next synchronizing call as an exception
(torch.AcceleratorError, "an illegal memory access was encountered") and the context is unusable afterwards
(a sticky error), so the worker must report `crash` and exit rather than run more cases. The abort control
kills the process outright (SIGABRT) and needs no such mapping.
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.cases.platform._shared import affine_reference, vector_inputs

if torch.cuda.is_available():
    from graphsafe.kernels.platform import ops as P

    register(
        Case(
            "isolation_illegal_address",
            vector_inputs,
            P.illegal_address,
            affine_reference,
            expect="crash",
            note="kernel stores to address 0x10: sticky device fault; worker must die or be retired",
        )
    )
    register(
        Case(
            "isolation_abort",
            vector_inputs,
            P.hard_abort,
            affine_reference,
            expect="crash",
            note="native std::abort() during warm-up: the worker process dies with SIGABRT",
        )
    )
    register(
        Case(
            "isolation_spin_forever",
            vector_inputs,
            P.spin_forever,
            affine_reference,
            expect="timeout",
            # Its deadline is how long one worker, and a GPU context with a kernel that never ends, is held
            # for it in every run: with 8 workers on one H200 the suite's cases phase takes 27-29 s
            # (reports/performance.md). The spin starts within a second of the
            # case reaching its worker (the library is built before the run), so 5 s is five times that.
            deadline=5,
            note="kernel spins on a flag nobody sets; its watchdog (GRAPHSAFE_SPIN_LIMIT_S, default 600 s) "
            "outlasts the case's 5 s deadline",
        )
    )
