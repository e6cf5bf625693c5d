"""Build every native library the built-in cases reach (cpu and gpu), as verify's prebuild does, and print
each build's seconds: the cold build time per family on this machine. Usage: python prebuild_all.py"""
import importlib
import pkgutil
import sys
import time

import cases
from harness.native import build

for info in pkgutil.walk_packages(cases.__path__, "cases."):
    if "real_world" not in info.name and not info.name.rsplit(".", 1)[-1].startswith("_"):
        importlib.import_module(info.name)
builds = build.planned([m for m in sys.modules if m.startswith("cases")], ("cpu", "gpu"))
start = time.perf_counter()


def event(kind, planned, seconds, error):
    if kind == "done":
        print(f"{planned.label:40s} {seconds:6.1f} s {'FAILED: ' + str(error)[:200] if error else ''}", flush=True)


failures = build.prebuild(builds, on_event=event)
print(f"all {len(builds)} builds in parallel: {time.perf_counter() - start:.1f} s wall, {len(failures)} failed")
