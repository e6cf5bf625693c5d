"""How often the default search budget (its counts, the time cap lifted) finds shape-edge bugs, over seeds,
with a fake check that fails exactly at the bug's sizes (no torch work), in three size spaces of the suite.
Session 5's script with three bugs that need a token (T > 0) beside an edge of H or K.

    python3 reports/measurements/cpu-2026-12-01-session6-search/search_power.py [SEEDS]
    ROOT=/a/checkout/of/another/tree python3 .../search_power.py [SEEDS]   (that tree's harness/search.py)
"""
import sys, dataclasses
sys.path.insert(0, __import__("os").environ.get("ROOT") or str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import os, tempfile
os.environ["GRAPHSAFE_SEARCH_DB"] = tempfile.mkdtemp()
from harness import Case, Result
from harness import search as S
from harness.backends import get_backend
be = get_backend("cpu")
BUDGET = dataclasses.replace(S.PROFILES["default"], seconds=3600.0)
SPACES = {
    "combine": {"T": range(0, 97), "K": range(1, 9), "H": range(1, 265)},
    "block": {"T": range(1, 257), "H": range(1, 129)},
    "routing": {"T": range(1, 65), "E": range(1, 17), "H": range(1, 33)},
}
BUGS = [
    ("combine", "T%64==33", lambda s: s["T"] % 64 == 33),
    ("combine", "H%8==7 and H>256", lambda s: s["H"] % 8 == 7 and s["H"] > 256),
    ("combine", "H==129", lambda s: s["H"] == 129),
    ("combine", "T>=65 and K==8", lambda s: s["T"] >= 65 and s["K"] == 8),
    ("combine", "T>0 and H==129", lambda s: s["T"] > 0 and s["H"] == 129),
    ("combine", "T>0 and H%8==7 and H>256", lambda s: s["T"] > 0 and s["H"] % 8 == 7 and s["H"] > 256),
    ("combine", "T>0 and K==8", lambda s: s["T"] > 0 and s["K"] == 8),
    ("combine", "T%32==1 and H%8==3", lambda s: s["T"] % 32 == 1 and s["T"] > 1 and s["H"] % 8 == 3),
    ("block", "T%128==97", lambda s: s["T"] % 128 == 97),
    ("block", "T%64==33", lambda s: s["T"] % 64 == 33),
    ("block", "T==256", lambda s: s["T"] == 256),
    ("block", "H%64==63", lambda s: s["H"] % 64 == 63),
    ("routing", "E>T and E%4==3", lambda s: s["E"] > s["T"] and s["E"] % 4 == 3),
    ("routing", "T==64", lambda s: s["T"] == 64),
    ("routing", "H==32 and E==16", lambda s: s["H"] == 32 and s["E"] == 16),
]
def make(seed, device, **kw): return {}
seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for space, label, pred in BUGS:
    found = 0
    for seed in range(seeds):
        case = Case(f"fake{seed}", make, lambda: None, sizes=SPACES[space])
        def run_check(bound, pred=pred):
            sizes = bound.make_inputs.keywords
            v = "uninitialized" if pred(sizes) else "pass"
            return Result(case=bound.name, expected="pass", verdict=v, backend="cpu")
        r = S.search(case, be, run_check, seed=seed, budget=BUDGET)
        found += r.verdict != "pass"
    print(f"{space:8} {label:22} found {found}/{seeds}")
