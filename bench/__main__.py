"""`python -m bench` (`make bench`): run every benchmark, one subprocess each, tables to stdout.

Each benchmark measures its own peer in the same run (device copy bandwidth, a torch composite, a per-expert
torch loop, the op's own time) and skips cleanly where it needs a GPU and there is none. A failing
benchmark is reported and the others still run; the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# name -> extra arguments, given the output directory
BENCHES: dict[str, list[str]] = {
    "harness_throughput": ["--out", "{out}/harness_throughput.csv"],
    "moe_combine": ["--out", "{out}/moe_combine.csv"],
    "moe_gemm": ["--out", "{out}/moe_gemm.csv"],
    "cpu_moe": [],
    "contention": ["--out", "{out}/contention.csv"],
    "check_profile": ["--out", "{out}/check_profile.csv"],
    "scan_host_flags": ["--out", "{out}/scan_host_flags.csv"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--out-dir", type=Path, default=REPO / "graphsafe-runs" / "bench")
    parser.add_argument("names", nargs="*", help=f"default: all of {', '.join(BENCHES)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHES]
    if unknown:  # argparse's choices reject an empty nargs="*" list on Python 3.11, so check here
        parser.error(f"unknown benchmark(s) {unknown}; allowed: {', '.join(BENCHES)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    failed = []
    for name in args.names or list(BENCHES):
        if not (REPO / "bench" / f"{name}.py").exists():
            print(f"== {name}: not present, skipped", flush=True)
            continue
        extra = [a.format(out=args.out_dir) for a in BENCHES[name]]
        print(f"== {name}", flush=True)
        rc = subprocess.run([sys.executable, "-m", f"bench.{name}", *extra], env=env, cwd=REPO).returncode
        if rc != 0:
            failed.append(f"{name} (exit {rc})")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
