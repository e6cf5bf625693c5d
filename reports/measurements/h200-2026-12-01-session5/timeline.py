"""Summary of a verify run's timeline from its times.csv (kind,name,seconds,start,worker): phases, when each
worker finished and how long it was busy, and the slowest cases with their start (from the first case's)
and worker.

    python3 reports/measurements/h200-2026-12-01-session5/timeline.py c_warm2_times.csv [...]
"""

import csv
import sys

for path in sys.argv[1:]:
    rows = list(csv.DictReader(open(path)))
    phases = {r["name"]: round(float(r["seconds"]), 1) for r in rows if r["kind"] == "phase"}
    cases = [r for r in rows if r["kind"] == "case" and r.get("start")]
    t0 = min(float(r["start"]) for r in cases)
    ends: dict[str, float] = {}
    busy: dict[str, float] = {}
    for r in cases:
        end = float(r["start"]) + float(r["seconds"])
        ends[r["worker"]] = max(ends.get(r["worker"], 0.0), end)
        busy[r["worker"]] = busy.get(r["worker"], 0.0) + float(r["seconds"])
    print(path, "phases", phases)
    print("  workers end:", sorted(round(v - t0, 1) for v in ends.values()))
    print("  workers busy:", sorted(round(v, 1) for v in busy.values()))
    for r in sorted(cases, key=lambda r: -float(r["seconds"]))[:10]:
        print(f"   {r['name'][:55]:55} {float(r['seconds']):6.2f} s, start {float(r['start']) - t0:6.2f} w{r['worker']}")
