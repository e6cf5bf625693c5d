"""A case-running worker process: reads requests as JSON lines on stdin, answers on a dedicated pipe.

Capture violations can leave the device context unusable for every later call (ROCm/rocm-systems#6097), and
an illegal memory access kills the process: running cases here means such a case costs itself, never the
run. The parent (harness.runner) restarts a worker that died or hung.

Answers go to the file descriptor given in GRAPHSAFE_RESULT_FD, not stdout, so whatever a case prints
cannot corrupt the protocol. What to load comes from the parent in GRAPHSAFE_WORKER_LOAD, a JSON object
{"case_sources": [file or module, ...], "suites": [module, ...]}: the worker decides nothing about it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback


def main() -> int:
    out = os.fdopen(int(os.environ["GRAPHSAFE_RESULT_FD"]), "w", buffering=1)
    load = json.loads(os.environ["GRAPHSAFE_WORKER_LOAD"])
    from harness.case import REGISTRY, CaseFileError, load_case_source
    from harness.errors import CaseError
    from harness.protocol import check
    from harness.suite_config import SuiteConfigError
    from harness.suites import load_suites
    from harness.verdicts import CRASH

    try:
        load_suites(load["suites"])
        for source in load["case_sources"]:
            load_case_source(source)
    except (CaseError, CaseFileError, SuiteConfigError) as exc:
        out.write(json.dumps({"fatal": str(exc)}) + "\n")
        return 2
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = check(
                REGISTRY.get(request["case"]),
                request["backend"],
                replays=request["replays"],
                seed=request["seed"],
                rebuilds=request["rebuilds"],
                live_graphs=request["live_graphs"],
            )
            # A device fault leaves the context unusable: say so with the result, so the runner assigns this
            # worker nothing more, then exit; the runner starts a fresh worker for the remaining cases.
            retire = result.verdict == CRASH
            out.write(json.dumps({"result": dataclasses.asdict(result), "retire": retire}) + "\n")
            if retire:
                return 3
        except CaseError as exc:
            out.write(json.dumps({"case_error": str(exc)}) + "\n")
        except Exception as exc:  # a harness-level failure for this case: report it, keep serving
            out.write(
                json.dumps({"harness_error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}) + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
