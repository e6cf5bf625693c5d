"""A case-running worker process: reads requests as JSON lines on stdin, answers on a dedicated pipe.

Capture violations can leave the device context unusable for every later call (ROCm/rocm-systems#6097), and
an illegal memory access kills the process: running cases here means such a case costs itself, never the
run. The parent (graphsafe.runner) restarts a worker that died or hung.

Answers go to the file descriptor given in GRAPHSAFE_RESULT_FD, not stdout, so whatever a case prints
cannot corrupt the protocol. What to load comes from the parent in GRAPHSAFE_WORKER_LOAD, a JSON object
{"case_sources": [file or module, ...], "suites": [module, ...], "digests": {file: sha256}}: the worker
decides nothing about it; a case file whose digest changed since the parent read it is refused.

Each case runs through graphsafe.case_run: the process state it changed is put back after it (a worker whose
state cannot be put back exits after the result, and a fresh one takes the next case), and the processes it
left running outside the worker's process group are ended; the worker adopts orphaned descendants (Linux
child subreaper) so that none escapes that.

A worker never outlives the run: the parent's pid comes in GRAPHSAFE_PARENT_PID, and the worker exits when
its parent is gone, by a parent-death signal (Linux prctl PR_SET_PDEATHSIG: the kernel kills it even while
an op holds the GIL in a C loop) and by a thread that checks the parent every second (every platform). Its
process exit releases the GPU context.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

PARENT_CHECK_S = 1.0
EXIT_PARENT_GONE = 70
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """Exit when `parent` is no longer this process's parent (it died: we were re-parented)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the thread below still ends the worker
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(EXIT_PARENT_GONE)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_S)
            if os.getppid() != parent:
                os._exit(EXIT_PARENT_GONE)

    threading.Thread(target=watch, name="graphsafe-parent-check", daemon=True).start()


def _changed_files(digests: dict[str, str]) -> list[str]:
    changed = []
    for source, digest in digests.items():
        try:
            now = hashlib.sha256(Path(source).read_bytes()).hexdigest()
        except OSError:
            now = "missing"
        if now != digest:
            changed.append(source)
    return changed


def _case_error(exc: Exception) -> dict[str, str]:
    """A CaseError as its fields, so the parent re-raises the same message instead of wrapping it."""
    case, field = getattr(exc, "case", "?"), getattr(exc, "field", "?")
    prefix = f"case {case!r}: field {field!r}: "
    text = str(exc)
    return {"case": case, "field": field, "problem": text[len(prefix) :] if text.startswith(prefix) else text}


def main() -> int:
    if "GRAPHSAFE_PARENT_PID" in os.environ:
        die_with_parent(int(os.environ["GRAPHSAFE_PARENT_PID"]))
    out = os.fdopen(int(os.environ["GRAPHSAFE_RESULT_FD"]), "w", buffering=1)
    load = json.loads(os.environ["GRAPHSAFE_WORKER_LOAD"])
    from graphsafe.case import REGISTRY, CaseFileError, load_case_source
    from graphsafe.case_run import add_note, run_case
    from graphsafe.errors import CaseError
    from graphsafe.process_state import restored
    from graphsafe.processes import become_subreaper
    from graphsafe.protocol import validate_definition
    from graphsafe.runner import available_memory
    from graphsafe.suites import load_suites
    from graphsafe.verdicts import CRASH

    become_subreaper()  # an op's orphaned processes stay in view, to be ended (graphsafe.processes)
    digests = load.get("digests", {})
    try:
        changed = _changed_files(digests)
        load_suites(load["suites"])
        for source in load["case_sources"]:
            load_case_source(source)
        changed += [s for s in _changed_files(digests) if s not in changed]
        if changed:
            raise CaseFileError(
                f"case file {changed[0]!r} changed after the run started; the run does not mix two versions "
                "of a case: rerun it"
            )
    except (CaseError, CaseFileError) as exc:
        out.write(json.dumps({"fatal": str(exc)}) + "\n")
        return 2
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request.get("validate"):
                case = REGISTRY.get(request["case"])
                with restored(case) as changes:  # make_inputs runs here too
                    size = validate_definition(case, request["backend"], seed=request["seed"])
                if changes:
                    print(f"graphsafe: {changes.note()} (its definition check)", file=sys.stderr, flush=True)
                free = available_memory(request["backend"])
                out.write(
                    json.dumps({"valid": request["case"], "input_bytes": size, "available_bytes": free})
                    + "\n"
                )
                continue
            ran = run_case(
                REGISTRY.get(request["case"]),
                request["backend"],
                replays=request["replays"],
                seed=request["seed"],
                rebuilds=request["rebuilds"],
                live_graphs=request["live_graphs"],
                explain=request.get("explain", False),
            )
            result = ran.result
            # A device fault leaves the context unusable, and so does process state the case changed beyond
            # repair (graphsafe.process_state): say so with the result, so the runner assigns this worker
            # nothing more, then exit; the runner starts a fresh worker for the remaining cases.
            retire = result.verdict == CRASH or ran.replace_process
            if ran.replace_process:
                add_note(result, "this worker is replaced before the next case")
            out.write(json.dumps({"result": dataclasses.asdict(result), "retire": retire}) + "\n")
            if retire:
                return 3
        except CaseError as exc:
            out.write(json.dumps({"case_error": _case_error(exc)}) + "\n")
        except Exception as exc:  # a harness-level failure for this case: report it, keep serving
            out.write(
                json.dumps({"harness_error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}) + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
