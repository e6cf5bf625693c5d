"""skipped.csv: the cases a run selected but did not run, each with the reason (a requirement of
`Case.requires` that this machine, backend or environment does not meet).

Written next to results.csv by `graphsafe verify`, read by the nightly comparison
(graphsafe.reports.baseline): a case of the baseline that the new run skipped is listed with its reason
instead of counting as vanished. Two columns, `case` and `reason`; a run that skipped nothing writes the
header alone, so the file's absence means a run made before it existed.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from graphsafe.reports.atomic import write_atomic

FILE = "skipped.csv"
COLUMNS = ("case", "reason")


def write(run_dir: Path, skipped: dict[str, str]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(sorted(skipped.items()))
    return write_atomic(Path(run_dir) / FILE, buffer.getvalue())


def read(run_dir: Path) -> dict[str, str]:
    """{case: reason} of DIR/skipped.csv; empty when the run has none. ValueError for a file that is not one."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    if not rows or tuple(rows[0]) != COLUMNS:
        raise ValueError(f"{path}: not a graphsafe skipped.csv (header must be {','.join(COLUMNS)})")
    return {row[0]: row[1] for row in rows[1:] if len(row) == len(COLUMNS)}


__all__ = ["COLUMNS", "FILE", "read", "write"]
