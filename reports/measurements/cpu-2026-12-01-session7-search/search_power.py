"""How often the default search budget (its counts, the time cap lifted) finds shape-edge bugs, over seeds,
with a fake check that fails exactly at the bug's sizes (no torch work), in four size spaces of the suite and
one written with Hypothesis strategies. Session 6's script (whose searches shared case names across bugs,
so that a bug could be "found" from the example database at the sizes of the bug before it) with bugs inside a kernel's aligned path (an edge of
one dimension that shows only where another is a multiple of 8), pairs of edges, and a strategy-declared space.

    python3 reports/measurements/cpu-2026-12-01-session7-search/search_power.py [SEEDS]
    ROOT=/a/checkout/of/another/tree python3 .../search_power.py [SEEDS]   (that tree's harness/search.py)
Prints per bug: found/seeds, and the median number of sizes checked when found. A second argument keeps only
the bugs of that space (or with that label).
"""
import sys, dataclasses, statistics
sys.path.insert(0, __import__("os").environ.get("ROOT") or str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import os, tempfile
os.environ["GRAPHSAFE_SEARCH_DB"] = tempfile.mkdtemp()
from hypothesis import strategies as st
from harness import Case, Result
from harness import search as S
from harness.backends import get_backend
be = get_backend("cpu")
BUDGET = dataclasses.replace(S.PROFILES["default"], seconds=3600.0)
SPACES = {
    "combine": {"T": range(0, 97), "K": range(1, 9), "H": range(1, 265)},
    "block": {"T": range(1, 257), "H": range(1, 129)},
    "routing": {"T": range(1, 65), "E": range(1, 17), "H": range(1, 33)},
    "gemm": {"T": range(2, 65), "E": range(2, 17), "topk": range(1, 5), "N": range(1, 161), "K": range(32, 289, 32)},
    "strategies": {"T": st.integers(1, 256), "H": st.integers(1, 128)},
    "large": {"T": range(1, 4097), "H": range(1, 8193)},
    "mapped": {"T": st.integers(1, 256).map(lambda v: 2 * v), "H": st.integers(1, 64)},
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
    ("combine", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0),
    ("combine", "K>=2 and H%64==63", lambda s: s["K"] >= 2 and s["H"] % 64 == 63),
    ("combine", "T%16==15 and K%2==0 and H%8==0", lambda s: s["T"] % 16 == 15 and s["K"] % 2 == 0 and s["H"] % 8 == 0),
    ("block", "T%128==97", lambda s: s["T"] % 128 == 97),
    ("block", "T%64==33", lambda s: s["T"] % 64 == 33),
    ("block", "T==256", lambda s: s["T"] == 256),
    ("block", "H%64==63", lambda s: s["H"] % 64 == 63),
    ("block", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0),
    ("block", "T%16==7 and H%16==9", lambda s: s["T"] % 16 == 7 and s["H"] % 16 == 9),
    ("routing", "E>T and E%4==3", lambda s: s["E"] > s["T"] and s["E"] % 4 == 3),
    ("routing", "T==64", lambda s: s["T"] == 64),
    ("routing", "H==32 and E==16", lambda s: s["H"] == 32 and s["E"] == 16),
    ("routing", "T%32==17 and H%8==0", lambda s: s["T"] % 32 == 17 and s["H"] % 8 == 0),
    ("gemm", "N%64==1 and N>64", lambda s: s["N"] % 64 == 1 and s["N"] > 64),
    ("gemm", "T%16==15 and N%8==0", lambda s: s["T"] % 16 == 15 and s["N"] % 8 == 0),
    ("gemm", "K==288 and topk>=2", lambda s: s["K"] == 288 and s["topk"] >= 2),
    ("strategies", "T%64==33", lambda s: s["T"] % 64 == 33),
    ("strategies", "T%128==97", lambda s: s["T"] % 128 == 97),
    ("strategies", "H%64==63 and T>1", lambda s: s["H"] % 64 == 63 and s["T"] > 1),
    ("large", "T%64==33", lambda s: s["T"] % 64 == 33),
    ("large", "T%128==97", lambda s: s["T"] % 128 == 97),
    ("large", "H%256==255", lambda s: s["H"] % 256 == 255),
    ("large", "T%1024==513", lambda s: s["T"] % 1024 == 513),
    ("large", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0),
    ("large", "H>4096 and H%16==1", lambda s: s["H"] > 4096 and s["H"] % 16 == 1),
    ("mapped", "T%128==66", lambda s: s["T"] % 128 == 66),
    ("mapped", "T%256==130", lambda s: s["T"] % 256 == 130),
    ("mapped", "T%64==34 and H%8==0", lambda s: s["T"] % 64 == 34 and s["H"] % 8 == 0),
]
def make(seed, device, **kw): return {}
seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
only = sys.argv[2] if len(sys.argv) > 2 else ""
for index, (space, label, pred) in enumerate(BUGS):
    if only and only not in (space, label):
        continue
    found, checks = 0, []
    for seed in range(seeds):
        # One case name per bug and seed: the example database must not hand one bug's sizes to the next.
        case = Case(f"fake{index}-{seed}", make, lambda: None, sizes=SPACES[space])
        def run_check(bound, pred=pred):
            sizes = bound.make_inputs.keywords
            v = "uninitialized" if pred(sizes) else "pass"
            return Result(case=bound.name, expected="pass", verdict=v, backend="cpu")
        r = S.search(case, be, run_check, seed=seed, budget=BUDGET)
        if r.verdict != "pass":
            found += 1
            import re
            m = re.search(r"(\d+) sizes checked", r.detail)
            checks.append(int(m.group(1)) if m else -1)
    med = statistics.median(checks) if checks else "-"
    print(f"{space:10} {label:32} found {found}/{seeds}  median sizes checked {med}", flush=True)
