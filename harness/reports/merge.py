"""Fanning a run out over machines and bringing it back: `verify --shard I/N` and `report merge DIR... --out DIR`.

A shard is a deterministic part of the selected cases: case c is in shard I of N when
sha256(c.name) mod N == I-1. The hash of the name alone (not the order of the suite, not Python's salted
hash()) puts a case in the same shard on every machine, whatever else that machine loaded, so any CI matrix,
Slurm array or Kubernetes indexed Job runs `verify --shard $I/$N` and the shards cover the run exactly once.

`merge` joins the shards' run directories into one: results.csv (every row, once), fingerprint.json (the
first shard's, with the values that differ between shards joined, the shard list and where each came from)
and the reports rendered from the merged rows. It refuses, naming what and where (exit 2 in the CLI):
- a case in two inputs (the shards overlap, or one directory was given twice);
- shards of different N, a shard given twice, or a missing shard, unless --allow-missing-shards;
- inputs from different platforms (graphsafe.reports.baseline.platform_slug: "cpu", "nvidia-h200-sm_90")
  or different sources (fingerprint source_digest), unless --allow-mixed-platforms (or --allow-mixed): one
  report should describe one platform and one version of the code; a comparison across platforms is
  `report compare`;
- inputs that are not shards of one run (`SAME_RUN_KEYS`: commit, case files, seed, replays, rebuilds,
  live graphs, backend, graphsafe version), unless --allow-mixed: shards run with different seeds, or
  with a case file edited between them, would merge into a "run" that never happened. Allowed, each
  difference is a note at the top of every merged report.
A shard whose results.csv says the run stopped early is merged: the merged results.csv opens with the
INCOMPLETE status line naming that shard and every case that never ran, so every report says so first.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from graphsafe.reports import fingerprint as fingerprint_mod
from graphsafe.reports.atomic import write_atomic
from graphsafe.reports.results import (
    COLUMNS,
    FLOAT_COLUMNS,
    INCOMPLETE,
    NOTES_KEY,
    STATUS_KEY,
    cell_text,
    completeness_sentence,
    read_results,
    results_csv,
    status_line,
)
from graphsafe.reports.tables import case_sources

SHARD_KEY = "shard"  # fingerprint key: "I/N" for a shard's run, "" otherwise
MERGED_FROM_KEY = "merged_from"
_SHARD_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class MergeError(Exception):
    """Inputs that must not be merged; the message names the input and the reason."""


@dataclass(frozen=True, order=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, case_name: str) -> bool:
        return shard_index(case_name, self.count) == self.index


def parse_shard(text: str) -> Shard:
    """ "I/N" with 1 <= I <= N; ValueError naming the allowed form otherwise."""
    match = _SHARD_PATTERN.match(text)
    if not match:
        raise ValueError(f"--shard must be I/N (e.g. 1/4), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"--shard {text}: I must be between 1 and N (N >= 1)")
    return Shard(index, count)


def shard_index(case_name: str, count: int) -> int:
    """The 1-based shard of a case among `count`: sha256 of the UTF-8 name, mod count, plus one."""
    digest = hashlib.sha256(case_name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


# ---------------------------------------------------------------------------------------------- merge


@dataclass
class MergedRun:
    out: Path
    rows: pd.DataFrame
    fingerprint: dict[str, str]
    notes: list[str] = field(default_factory=list)  # shown first in every report
    stopped_early: str = ""  # the INCOMPLETE sentence when a shard stopped early

    @property
    def complete(self) -> bool:
        """Every shard there and finished (a merge across platforms, when allowed, is complete)."""
        return not self.stopped_early and not any(n.startswith("shards ") for n in self.notes)


def _platform(fp: dict[str, str]) -> str:
    from graphsafe.reports.baseline import platform_slug  # baseline imports the table model; keep merge light

    return platform_slug(fp) if fp else "unknown"


def _check_shards(inputs: list[tuple[Path, dict[str, str]]], allow_missing: bool) -> list[str]:
    shards: dict[Shard, Path] = {}
    for path, fp in inputs:
        text = fp.get(SHARD_KEY, "")
        if not text:
            continue
        shard = parse_shard(text)
        if shard in shards:
            raise MergeError(f"shard {shard} is in both {shards[shard]} and {path}")
        shards[shard] = path
    counts = {s.count for s in shards}
    if len(counts) > 1:
        raise MergeError(
            "the inputs are shards of different splits: "
            + ", ".join(f"{p} is {s}" for s, p in sorted(shards.items()))
        )
    notes = []
    if counts:
        count = counts.pop()
        missing = sorted(set(range(1, count + 1)) - {s.index for s in shards})
        if missing:
            listed = ", ".join(f"{i}/{count}" for i in missing)
            if not allow_missing:
                raise MergeError(f"shards {listed} are missing (--allow-missing-shards merges what is there)")
            notes.append(f"shards {listed} are missing: their cases are not in this report")
    return notes


# The fingerprint values every shard of one run shares (fingerprint.RUN_SETTING_KEYS are written by
# `verify`); a merge compares them as their labels say. case_files is compared by file name and digest
# (fingerprint.case_file_digest_list), so shards run from different checkout paths still match.
SAME_RUN_KEYS: tuple[tuple[str, str], ...] = (
    ("git_commit", "commit"),
    ("case_files", "case files"),
    ("seed", "--seed"),
    ("replays", "--replays"),
    ("rebuilds", "--rebuilds"),
    ("live_graphs", "--live-graphs"),
    ("backend", "backend"),
    ("graphsafe_version", "graphsafe version"),
)


def _comparable(key: str, value: str) -> object:
    return fingerprint_mod.case_file_digest_list(value) if key == "case_files" else value


def same_run_differences(inputs: Sequence[tuple[Path, dict[str, str]]]) -> list[str]:
    """One sentence per SAME_RUN_KEYS value the inputs do not share, naming each input's value; a key no
    input records (runs written before it existed) is not compared, one input without it is a difference."""
    found = []
    for key, label in SAME_RUN_KEYS:
        if not any(key in fp for _, fp in inputs):
            continue
        values = {path: fp.get(key, f"{fingerprint_mod.NA} (not recorded)") for path, fp in inputs}
        if len({repr(_comparable(key, v)) for v in values.values()}) > 1:
            found.append(f"{label} differs: " + ", ".join(f"{p}: {v}" for p, v in values.items()))
    return found


def _merged_fingerprint(inputs: list[tuple[Path, dict[str, str]]]) -> dict[str, str]:
    """Every key of every input; a key whose values differ gets them all, in input order, joined by ' | '."""
    keys: dict[str, None] = {}
    for _, fp in inputs:
        keys.update(dict.fromkeys(fp))
    merged: dict[str, str] = {}
    for key in keys:
        values = list(dict.fromkeys(fp.get(key, fingerprint_mod.NA) for _, fp in inputs))
        merged[key] = values[0] if len(values) == 1 else " | ".join(values)
    shards = [fp.get(SHARD_KEY, "") for _, fp in inputs]
    merged[SHARD_KEY] = ""
    merged["shards"] = ", ".join(s for s in shards if s)
    merged[MERGED_FROM_KEY] = " | ".join(str(p) for p, _ in inputs)
    # Repro commands load every case file any shard loaded.
    sources: dict[str, None] = {}
    for _, fp in inputs:
        sources.update(dict.fromkeys(case_sources(fp)))
    merged["case_sources"] = shlex.join(sources)
    return merged


def merge_runs(
    inputs: Sequence[Path | str],
    out: Path | str,
    *,
    allow_mixed_platforms: bool = False,
    allow_missing_shards: bool = False,
    allow_mixed: bool = False,
) -> MergedRun:
    """Merge run directories into `out` (results.csv, fingerprint.json); the caller renders the reports.
    `allow_mixed`: merge inputs that differ in platform, sources or any SAME_RUN_KEYS value, each difference
    written as a note; `allow_mixed_platforms`: only platform and sources."""
    if not inputs:
        raise MergeError("no run directories to merge")
    out = Path(out)
    read: list[tuple[Path, dict[str, str], pd.DataFrame]] = []
    for item in inputs:
        path = Path(item)
        if not results_csv(path).is_file():
            raise MergeError(f"{path} has no results.csv (is it a run directory?)")
        if path.resolve() == out.resolve():
            raise MergeError(f"--out {out} is also an input")
        read.append((path, fingerprint_mod.read(path), read_results(path)))
    pairs = [(p, fp) for p, fp, _ in read]

    platforms = {p: _platform(fp) for p, fp in pairs}
    digests = {p: fp.get("source_digest", fingerprint_mod.NA) for p, fp in pairs}
    notes: list[str] = []
    for what, values in (("platforms", platforms), ("sources (source_digest)", digests)):
        if len(set(values.values())) > 1:
            listed = ", ".join(f"{p}: {v}" for p, v in values.items())
            if not (allow_mixed_platforms or allow_mixed):
                raise MergeError(
                    f"the inputs differ in {what}: {listed} (--allow-mixed-platforms merges them)"
                )
            notes.append(f"merged across {what}: {listed}")
    # The backend is part of the platform: --allow-mixed-platforms, which merges platforms, merges it too.
    differences = [
        d for d in same_run_differences(pairs) if not (allow_mixed_platforms and d.startswith("backend "))
    ]
    if differences and not allow_mixed:
        raise MergeError(
            "the inputs are not shards of one run: "
            + "; ".join(differences)
            + " (--allow-mixed merges them and says so at the top of every report)"
        )
    notes = [f"mixed merge: {d}" for d in differences] + notes
    notes = _check_shards(pairs, allow_missing_shards) + notes

    owner: dict[str, Path] = {}
    stopped: list[tuple[Path, dict]] = []
    for path, _, df in read:
        for case in dict.fromkeys(df["case"].tolist()):
            if case in owner:
                raise MergeError(f"case {case!r} is in both {owner[case]} and {path}")
            owner[case] = path
        status = df.attrs.get(STATUS_KEY)
        if completeness_sentence(status):
            stopped.append((path, status))
        notes += [f"{path}: {n}" for n in df.attrs.get(NOTES_KEY) or []]

    rows = pd.concat([df for _, _, df in read], ignore_index=True) if read else pd.DataFrame()
    rows.attrs = {}
    out.mkdir(parents=True, exist_ok=True)
    if (out / "results.csv").exists():
        raise MergeError(f"{out} already holds a results.csv; merge into a new directory")
    status = _merged_status(stopped, rows, read)
    _write_rows(out / "results.csv", rows, status)
    fp = _merged_fingerprint(pairs)
    fp["merge_notes"] = " | ".join(notes)
    fingerprint_mod.write(out, fp)
    merged = read_results(out)
    merged.attrs[NOTES_KEY] = list(notes) + list(merged.attrs.get(NOTES_KEY) or [])
    stopped_early = completeness_sentence(merged.attrs.get(STATUS_KEY)) or "" if status else ""
    return MergedRun(out, merged, fp, notes, stopped_early)


def _merged_status(
    stopped: list[tuple[Path, dict]],
    rows: pd.DataFrame,
    read: list[tuple[Path, dict[str, str], pd.DataFrame]],
) -> dict | None:
    """The status fields of the merged run when a shard stopped early (None when every shard finished):
    the merged results.csv then opens with the INCOMPLETE line every report reads, naming the shards and
    every case that never ran."""
    if not stopped:
        return None
    never = [str(n) for _, status in stopped for n in status.get("never_ran") or []]
    finished = int(rows["case"].nunique()) if len(rows) else 0
    reason = "; ".join(f"shard {p} stopped early ({status.get('reason', 'killed')})" for p, status in stopped)
    sentence = (
        f"{reason}; {finished} of {finished + len(never)} cases finished; never ran: {', '.join(never)}"
    )
    return {
        "state": INCOMPLETE,
        "reason": reason,
        "finished": finished,
        "planned": finished + len(never),
        "never_ran": never,
        "run": "merge of " + ", ".join(str(p) for p, _, _ in read),
        "sentence": sentence,
    }


def _write_rows(path: Path, rows: pd.DataFrame, status: dict | None) -> None:
    """Normalized rows back to results.csv text: NaN (not applicable) -> "", inf stays "inf"; an incomplete
    merge opens with the status line. Written whole or not at all (graphsafe.reports.atomic)."""
    f = io.StringIO(newline="")
    if status:
        f.write(status_line(INCOMPLETE, status))
    writer = csv.DictWriter(f, fieldnames=COLUMNS)
    writer.writeheader()
    for record in rows.to_dict("records"):
        line = {}
        for column in COLUMNS:
            value = record.get(column, "")
            if column in FLOAT_COLUMNS:
                value = "" if isinstance(value, float) and math.isnan(value) else cell_text(float(value))
            line[column] = "" if value is None else str(value)
        writer.writerow(line)
    write_atomic(path, f.getvalue(), newline="")


__all__ = ["MergeError", "MergedRun", "Shard", "merge_runs", "parse_shard", "shard_index"]
