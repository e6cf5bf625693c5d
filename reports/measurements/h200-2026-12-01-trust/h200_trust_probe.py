"""H200 facts for how verdicts are decided: the capture-time table, RNG-aware replay, replay-vs-eager exactness.

Run from the repository root on a GPU machine:
`python reports/measurements/h200-2026-12-01-trust/h200_trust_probe.py OUT_DIR [ENTRY,ENTRY,...]`.
Writes OUT_DIR/capture_table.json (what each host-side action does under capture: the runtime's message and the
harness's classification) and OUT_DIR/rng_replay.json (graph replay vs eager from one generator state).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch

from harness.backends import get_backend
from harness.errors import CaptureError, CaptureSyncError


def capture_table(out_dir: Path, only: list[str]) -> None:
    be = get_backend("gpu")
    dev = be.device
    x = torch.randn(1024, device=dev)
    ids = torch.randint(0, 8, (64,), device=dev)
    pageable = torch.empty(1024)
    pinned = torch.empty(1024).pin_memory()
    probs = torch.softmax(torch.randn(16, 64, device=dev), -1)
    repeats = torch.randint(1, 3, (16,), device=dev)
    a32 = torch.randn(64, 128, device=dev)
    b32 = torch.randn(4, 128, 64, device=dev)
    offs = torch.tensor([16, 32, 48, 64], dtype=torch.int32, device=dev)
    total_repeats = int(repeats.sum())  # output_size must equal it, or the kernel's device-side assert fires

    def event_query() -> torch.Tensor:
        ev = torch.cuda.Event()
        ev.record()
        ev.query()
        return x * 2

    entries = {
        "item": lambda: x.sum().item(),
        "nonzero": lambda: torch.nonzero(x > 0),
        "bool_mask_index": lambda: x[x > 0],
        "masked_select": lambda: torch.masked_select(x, x > 0),
        "d2h_pageable_copy": lambda: pageable.copy_(x),
        "d2h_pageable_to_cpu": lambda: x.cpu(),
        "d2h_pinned_copy_non_blocking": lambda: pinned.copy_(x, non_blocking=True),
        "h2d_pageable_copy": lambda: x.copy_(pageable),
        "h2d_pinned_copy_non_blocking": lambda: x.clone().copy_(pinned, non_blocking=True),
        "cuda_synchronize": lambda: (torch.cuda.synchronize(), x * 2)[1],
        "stream_synchronize": lambda: (torch.cuda.current_stream().synchronize(), x * 2)[1],
        "event_query": event_query,
        "mem_get_info": lambda: (torch.cuda.mem_get_info(), x * 2)[1],
        "allocator_growth_1gib": lambda: torch.empty(1 << 28, device=dev).fill_(1.0)[:1024] + x,
        "bincount": lambda: torch.bincount(ids, minlength=8),
        "bincount_no_minlength": lambda: torch.bincount(ids),
        "grouped_mm_fp32": lambda: torch._grouped_mm(a32, b32, offs=offs),
        "grouped_mm_bf16": lambda: torch._grouped_mm(a32.bfloat16(), b32.bfloat16(), offs=offs),
        "repeat_interleave": lambda: torch.repeat_interleave(x[:16], repeats),
        "repeat_interleave_output_size": lambda: torch.repeat_interleave(
            x[:16], repeats, output_size=total_repeats
        ),
        "histc_range": lambda: torch.histc(x, bins=8, min=-1.0, max=1.0),
        "histc_min_eq_max": lambda: torch.histc(x, bins=8),
        "unique": lambda: torch.unique(ids),
        "multinomial": lambda: torch.multinomial(probs, 1),
        "multinomial_replacement": lambda: torch.multinomial(probs, 4, replacement=True),
        "one_hot_no_classes": lambda: torch.nn.functional.one_hot(ids),
        "one_hot_classes": lambda: torch.nn.functional.one_hot(ids, 8),
    }
    table = {}
    for name, fn in entries.items():
        if only and name not in only:
            continue
        row: dict[str, object] = {}
        try:
            with be.poisoned_allocation(0xFF):
                try:
                    fn()
                    torch.cuda.synchronize()
                    row["eager"] = "ok"
                except Exception as exc:
                    row["eager"] = f"{type(exc).__name__}: {exc}"[:300]
                try:
                    graph = be.capture(fn)
                    graph.replay()
                    torch.cuda.synchronize()
                    graph.release()
                    row["capture"] = "ok"
                except CaptureSyncError as exc:
                    row["capture"] = "capture_sync"
                    row["message"] = str(exc)[:400]
                except CaptureError as exc:
                    row["capture"] = "capture_error"
                    row["message"] = str(exc)[:400]
                except Exception as exc:
                    row["capture"] = f"escaped {type(exc).__name__}"
                    row["message"] = str(exc)[:400]
        except Exception as exc:  # the scope itself failed: record and go on
            row["scope"] = f"{type(exc).__name__}: {exc}"[:400]
        table[name] = row
        print(name, row, flush=True)
    (out_dir / f"capture_table{'_part' if only else ''}.json").write_text(json.dumps(table, indent=1))


def rng_replay(out_dir: Path) -> None:
    """Raw torch: capture a random op, replay from a snapshot of the generator, restore it, run eagerly."""
    dev = torch.device("cuda")
    x = torch.randn(4096, device=dev)
    logits = torch.randn(16, 64, device=dev)
    ops = {
        "dropout": lambda: torch.nn.functional.dropout(x, 0.5, training=True),
        "rand_like": lambda: torch.rand_like(x),
        "multinomial": lambda: torch.multinomial(torch.softmax(logits, -1), 1),
        "gumbel": lambda: torch.argmax(
            logits - torch.log(-torch.log(torch.rand_like(logits).clamp(1e-10, 1 - 1e-7))), -1
        ),
    }
    report = {}
    for name, fn in ops.items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        results = {}
        for restore in (True, False):
            state = torch.cuda.get_rng_state()
            g.replay()
            torch.cuda.synchronize()
            graph_out = out.clone()
            if restore:
                torch.cuda.set_rng_state(state)
            eager = fn()
            results["restored" if restore else "not_restored"] = bool(torch.equal(graph_out, eager))
        second = out.clone()
        g.replay()
        results["two_replays_differ"] = not torch.equal(second, out)
        report[name] = results
        print(name, results, flush=True)
    (out_dir / "rng_replay.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else []
    out.mkdir(parents=True, exist_ok=True)
    for step in (lambda o: rng_replay(o), lambda o: capture_table(o, only)):
        try:
            step(out)
        except Exception:
            traceback.print_exc()
