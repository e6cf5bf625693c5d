"""results.csv: the one writer and the one reader of a run's rows.

The writer appends each finished case's rows and flushes them to disk at once, so a run that dies mid-way
keeps every result already written. The reader turns the CSV text back into typed columns; every report
(summary.md, report.html, junit, baselines) reads runs through it.

What a run survives (README "In CI"):
- A report dir is claimed with a lock (`claim_run_dir`): a second run into it while the first runs fails at
  once naming the first (pid, host, start time); a dir that already holds a run's reports is refused, never
  overwritten. The default dir, graphsafe-runs/<time>-<host>/ (the runs folder: graphsafe.config), gets a
  -2, -3 ... suffix when taken.
- While the run goes, results.csv's first line is a `# graphsafe run in progress ...` status line that names
  the planned cases. A run that finishes every case rewrites the file without it (plain CSV); a run that stops
  early (SIGINT, SIGTERM, an error) rewrites it as `# graphsafe run INCOMPLETE ...` with the cases that never
  ran. A run killed outright (SIGKILL, power) leaves the in-progress line: readers say so.
- Each case's rows go to disk in one write and an fsync; a partial last record (killed mid-write, disk full)
  is dropped by the reader with a note, never read as a row.

Error cells: an empty CSV cell means "not applicable" (case-level rows such as a capture failure) and becomes
NaN when read; `inf` means NaN/Inf was found in an output and stays inf. A literal "nan" in the CSV is read
as inf, never as "not applicable": a NaN error means a NaN was found.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import pandas as pd

from graphsafe import verdicts as V
from graphsafe.records import Result, Row
from graphsafe.reports.atomic import ReportWriteError, write_atomic

# Public contract: at least case, backend, replay, eager_error, graph_error, threshold, verdict, expected,
# seed. New columns go at the end.
COLUMNS: tuple[str, ...] = (
    "case",
    "family",
    "backend",
    "device",
    "pattern",
    "replay",
    "seed_a",
    "seed",
    "eager_error",
    "graph_error",
    "graph_vs_eager",
    "threshold",
    "bit_exact",
    "nonfinite",
    "poisoned",
    "row_verdict",
    "verdict",
    "expected",
    "status",
    "detail",
    "capture_ms",
    "replay_ms",
    "eager_ms",
    "phase",
    "limits",
    # The finding of a row that is not pass (graphsafe.findings): appended, so earlier readers keep working.
    "output",
    "mismatches",
    "first_mismatch",
    "carried_state",
    "detector",
    "finding",
)


def default_run_dir(root: Path = Path("graphsafe-runs")) -> Path:
    """<root>/<time>-<host>/ (default graphsafe-runs/ under the working directory): one folder per run, sortable
    by time."""
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname()}"


# The files a run writes into its dir: any of them there means the dir holds another run's reports.
REPORT_FILES: tuple[str, ...] = ("results.csv", "summary.md", "junit.xml", "report.html", "fingerprint.json")
LOCK_FILE = ".graphsafe.lock"


class RunDirError(Exception):
    """The report dir cannot take this run (a file, unwritable, taken by another run, holds reports)."""


class RunDirClaim:
    """An exclusive claim on a report dir for one run: an fcntl lock on DIR/.graphsafe.lock, held until
    `release` (the kernel drops it when the process dies, so a killed run never blocks the next one)."""

    def __init__(self, run_dir: Path, handle: IO[str], created: bool) -> None:
        self.run_dir = run_dir
        self._handle = handle
        self._created = created

    def release(self) -> None:
        """Unlock; a dir this claim created that got nothing but the lock file is removed again."""
        if self._handle.closed:
            return
        with contextlib.suppress(OSError):
            if self._created and [p.name for p in self.run_dir.iterdir()] == [LOCK_FILE]:
                (self.run_dir / LOCK_FILE).unlink()
                self.run_dir.rmdir()
        self._handle.close()


def claim_run_dir(run_dir: Path | None, root: Path = Path("graphsafe-runs")) -> RunDirClaim:
    """Create and lock the run's report dir; RunDirError with one line when it cannot be this run's.

    Chosen policy: refuse, never overwrite, never nest. A --report-dir that holds a run's reports is refused
    (the user picks another or deletes it); without --report-dir the run gets a fresh default dir."""
    if run_dir is not None:
        return _claim(run_dir, created=not run_dir.exists())
    base = default_run_dir(root)
    for attempt in range(1, 1000):
        candidate = base if attempt == 1 else base.with_name(f"{base.name}-{attempt}")
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunDirError(f"cannot create report dir {str(candidate)!r}: {exc.strerror or exc}") from None
        return _claim(candidate, created=True)
    raise RunDirError(f"no free report dir name next to {str(base)!r}")


def _claim(run_dir: Path, created: bool) -> RunDirClaim:
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--report-dir {str(run_dir)!r} is a file, not a directory")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(run_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held for the whole run)
    except OSError as exc:
        raise RunDirError(f"cannot write to report dir {str(run_dir)!r}: {exc.strerror or exc}") from None
    try:
        _lock(handle)
    except BlockingIOError:
        handle.seek(0)
        other = handle.read().strip() or "a run that has not written its name yet"
        handle.close()
        raise RunDirError(
            f"report dir {str(run_dir)!r} is in use by another graphsafe run ({other}); "
            "wait for it or choose another --report-dir"
        ) from None
    present = [name for name in REPORT_FILES if (run_dir / name).exists()]
    if present:
        handle.close()
        raise RunDirError(
            f"report dir {str(run_dir)!r} already holds a run's reports ({', '.join(present)}); "
            "graphsafe never overwrites results: choose another --report-dir or remove that one"
        )
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(_run_identity() + "\n")
        handle.flush()
    except OSError as exc:  # a full disk before anything ran: the dir cannot take the run
        with contextlib.suppress(OSError):  # closing flushes the same unwritten text again
            handle.close()
        raise RunDirError(f"cannot write to report dir {str(run_dir)!r}: {exc.strerror or exc}") from None
    return RunDirClaim(run_dir, handle, created)


def _lock(handle: IO[str]) -> None:
    """Exclusive, non-blocking: BlockingIOError when another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: msvcrt locks one byte the same way
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            raise BlockingIOError from None
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _run_identity() -> str:
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return f"pid {os.getpid()} on host {socket.gethostname()}, started {started}"


# ---------------------------------------------------------------------------------------------- status line

STATUS_PREFIX = "# graphsafe run "
IN_PROGRESS = "in progress"
INCOMPLETE = "INCOMPLETE"
STATUS_KEY = "graphsafe.status"  # DataFrame.attrs: the status line's fields, absent for a complete run
NOTES_KEY = "graphsafe.notes"  # DataFrame.attrs: what the reader dropped or doubts, one sentence each


def status_line(state: str, fields: dict[str, Any]) -> str:
    """`# graphsafe run <state>: <sentence>` then a tab and the fields as JSON (what readers parse)."""
    return f"{STATUS_PREFIX}{state}: {fields['sentence']}\t{json.dumps(fields, sort_keys=True)}\n"


def parse_status_line(line: str) -> dict[str, Any]:
    text = line[len(STATUS_PREFIX) :]
    state = INCOMPLETE if text.startswith(INCOMPLETE) else IN_PROGRESS
    _, _, payload = text.partition("\t")
    try:
        fields = json.loads(payload) if payload.strip() else {}
    except json.JSONDecodeError:
        fields = {}
    if not isinstance(fields, dict):
        fields = {}
    fields["state"] = state
    fields.setdefault("sentence", text.partition("\t")[0].strip())
    return fields


def completeness_sentence(status: dict[str, Any] | None) -> str | None:
    """One line for the first line of every report; None for a complete run."""
    if not status:
        return None
    never = status.get("never_ran") or []
    if status.get("state") == INCOMPLETE:
        return (
            f"INCOMPLETE run: {status.get('reason', 'stopped early')}; {status.get('finished', '?')} of "
            f"{status.get('planned', '?')} cases finished, {len(never)} never ran"
        )
    return (
        f"INCOMPLETE run: results.csv still says the run is in progress ({status.get('run', 'unknown run')}): "
        f"it is still running or was killed; {status.get('finished', '?')} of {status.get('planned', '?')} cases "
        f"finished, {len(never)} not (yet) run"
    )


def cell_text(value: object) -> str:
    """One value as results.csv writes it: None -> "", floats with 9 significant digits, nan/inf spelled."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.9g}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ResultsWriter:
    """Appends each finished case's rows to results.csv and flushes them to disk at once.

    The file is created exclusively (an existing results.csv is never truncated: FileExistsError) and starts
    with the in-progress status line naming `planned`; `close` makes the first line tell how the run ended."""

    def __init__(self, run_dir: Path, planned: Sequence[str] = ()) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "results.csv"
        self.planned = list(planned)
        self.results: list[Result] = []
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.final_status: dict[str, Any] | None = None  # set by close(): None when the run was complete
        self.write_error: str = ""  # why results.csv could not be written or finalized, "" when it could
        self._file = self.path.open("x", newline="", encoding="utf-8")
        self._write(self._status(IN_PROGRESS, "") + _header_text())

    def _status(self, state: str, reason: str) -> str:
        finished = {r.case for r in self.results}
        never = [name for name in self.planned if name not in finished]
        fields: dict[str, Any] = {
            "planned": len(self.planned),
            "finished": len(finished),
            "never_ran": never,
            "run": f"pid {os.getpid()} on host {socket.gethostname()}, started {self.started}",
        }
        if state == IN_PROGRESS:
            fields["sentence"] = f"{fields['run']}; {len(self.planned)} cases planned, listed in never_ran"
        else:
            fields["reason"] = reason
            fields["sentence"] = (
                f"{reason}; {len(finished)} of {len(self.planned)} cases finished; never ran: {' '.join(never)}"
            )
        return status_line(state, fields)

    def add(self, result: Result) -> None:
        status = "ok" if result.ok else "FAIL"
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=COLUMNS)
        for row in result.rows:
            record = dataclasses.asdict(row)
            record.update(verdict=result.verdict, expected=result.expected, status=status)
            writer.writerow({k: cell_text(record.get(k)) for k in COLUMNS})
        self._write(text.getvalue())  # the case's rows in one write: a kill leaves at most one partial record
        self.results.append(result)  # only once on disk: a case whose write failed is listed as not finished

    def _write(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self, stopped: str | None = None) -> dict[str, Any] | None:
        """Close and finalize the first line. `stopped`: why the run ended before its plan (None: it did not).

        Returns the final status fields (None for a complete run). A run that finished fewer cases than
        planned is incomplete even without a reason. Finalizing rewrites the file next to it and renames it
        over results.csv (graphsafe.reports.atomic), so a failure (disk full) leaves the in-progress line,
        which still tells the truth, and sets `write_error`."""
        with contextlib.suppress(OSError):
            self._file.close()
        finished = {r.case for r in self.results}
        missing = [name for name in self.planned if name not in finished]
        if stopped is None and missing:
            stopped = "the run ended before these cases ran"
        first = self._status(INCOMPLETE, stopped) if stopped is not None else ""
        self.final_status = parse_status_line(first.rstrip("\n")) if first else None
        try:
            body = self.path.read_text(encoding="utf-8").partition("\n")[2]
            write_atomic(self.path, first + body, newline="")
        except OSError as exc:
            self.write_error = f"could not finalize {self.path}: {exc.strerror or exc}"
        return self.final_status


def _header_text() -> str:
    text = io.StringIO()
    csv.DictWriter(text, fieldnames=COLUMNS).writeheader()
    return text.getvalue()


# ---------------------------------------------------------------------------------------------- reading

FLOAT_COLUMNS: tuple[str, ...] = (
    "eager_error",
    "graph_error",
    "graph_vs_eager",
    "threshold",
    "capture_ms",
    "replay_ms",
    "eager_ms",
)


def parse_float(value: Any) -> float:
    """One error/timing cell as a float: "" / None -> NaN (not applicable), "nan" -> inf (found), else float."""
    if value is None:
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if not text:
        return math.nan
    if text.lower() in ("nan", "-nan", "+nan"):
        return math.inf
    return float(text)  # raises ValueError on garbage: a corrupt report must not read as "no error"


def _seed_text(value: Any) -> str:
    """Seeds as the exact text to type: 1234.0 (a float column with gaps) -> "1234"; missing -> ""."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _int_or(value: Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


_NORMALIZED = "graphsafe.normalized"  # DataFrame.attrs key set by normalize


def normalize(results: pd.DataFrame) -> pd.DataFrame:
    """A copy with every RESULT_COLUMN present and typed: floats for errors/timings, int replay, str others.

    A frame this function returned comes back as it is (marked in DataFrame.attrs), so callers that each
    normalize their input type the rows once per run, not once per caller. Treat the result as read-only."""
    if results.attrs.get(_NORMALIZED):
        return results
    df = results.copy()
    for column in COLUMNS:
        if column not in df.columns:
            df[column] = ""
    for column in FLOAT_COLUMNS:
        df[column] = [parse_float(v) for v in df[column]]
        df[column] = df[column].astype(float)
    df["replay"] = [_int_or(v, -1) for v in df["replay"]]
    for column in ("seed_a", "seed"):
        df[column] = [_seed_text(v) for v in df[column]]
    for column in COLUMNS:
        if column not in FLOAT_COLUMNS and column not in ("replay", "seed_a", "seed"):
            df[column] = ["" if _is_missing(v) else str(v).strip() for v in df[column]]
    df.attrs[_NORMALIZED] = True
    return df


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def results_csv(path: Path | str) -> Path:
    """A run directory or a results.csv (or baseline .csv) path -> the CSV path."""
    path = Path(path)
    return path / "results.csv" if path.is_dir() else path


def read_results(path: Path | str) -> pd.DataFrame:
    """Read results.csv (or a run directory) as text, then type it with `normalize`.

    Every cell is read as text: pandas' default NA parsing would turn "nan" and "" alike into NaN, losing the
    difference between "NaN found" and "not applicable" that the report must keep. A first line
    `# graphsafe run ...` goes to attrs[STATUS_KEY]; a partial last record (a writer killed mid-write or out
    of disk) is dropped with a sentence in attrs[NOTES_KEY].
    """
    raw, status, notes = read_raw(path)
    df = normalize(raw)
    if status and status["state"] == IN_PROGRESS:
        # The line was written before any case ran: what finished is what the rows say.
        seen = set(df["case"])
        status["never_ran"] = [name for name in status.get("never_ran", []) if name not in seen]
        status["finished"] = len(seen)
    df.attrs[STATUS_KEY] = status
    df.attrs[NOTES_KEY] = notes
    return df


def disagreements(path: Path | str, results: Sequence[Result]) -> list[str]:
    """Where results.csv at `path` does not say what the run computed, one line per case and column ([] when
    it agrees): each case's row count, and each row's row_verdict, verdict, expected and status.

    `verify` reads its results.csv back after writing it: every test that reads results from memory would
    pass a writer that always writes `ok`, and CI gates and `report merge` read the file."""
    if not results and not results_csv(path).exists():
        return []  # a run that computed nothing need not have written the file
    try:
        raw, _, _ = read_raw(path)
    except (OSError, ValueError) as exc:
        return [f"{results_csv(path)} could not be read back: {exc}"]
    missing = [c for c in ("case", "row_verdict", "verdict", "expected", "status") if c not in raw.columns]
    if missing:
        return [f"{results_csv(path)} has no column {', '.join(missing)}"]
    written: dict[str, list[dict[str, str]]] = {}
    for record in raw.to_dict("records"):
        written.setdefault(record["case"], []).append(record)
    problems = []
    for result in results:
        rows = written.pop(result.case, [])
        if len(rows) != len(result.rows):
            problems.append(f"case {result.case}: {len(rows)} rows written, {len(result.rows)} computed")
            continue
        for index, (row, record) in enumerate(zip(result.rows, rows, strict=True)):
            computed = dict(row_verdict=row.row_verdict, verdict=result.verdict, expected=result.expected)
            computed["status"] = "ok" if result.ok else "FAIL"
            wrong = [
                f"column {column}: {record[column]!r} written, {value!r} computed"
                for column, value in computed.items()
                if record[column] != value
            ]
            if wrong:  # the first row that disagrees says enough for the case
                problems.append(f"case {result.case} (row {index + 1} of {len(rows)}): {'; '.join(wrong)}")
                break
    problems += [f"case {name}: {len(rows)} rows written, none computed" for name, rows in written.items()]
    return problems


WRITER_CHECK_CASE = "graphsafe.writer_check"


def writer_self_check(directory: Path) -> list[str]:
    """Write a known failure (verdict stale_replay, expected pass) through ResultsWriter into a scratch folder
    under `directory`, read it back with `disagreements`, remove it; [] when the writer recorded it.

    A run in which every case got its expected verdict (the built-in suite's) cannot tell an honest writer
    from one that writes `ok` or the expected verdict whatever happened: this known failure can.
    ReportWriteError when the scratch folder cannot be written."""
    row = Row(
        case=WRITER_CHECK_CASE,
        family="graphsafe",
        backend="cpu",
        device="cpu",
        pattern="0xff",
        replay=0,
        seed_a=0,
        seed=1,
        eager_error=0.0,
        graph_error=0.5,
        graph_vs_eager=0.5,
        threshold=1e-5,
        bit_exact=False,
        nonfinite=0,
        poisoned=0,
        row_verdict=V.STALE_REPLAY,
    )
    known = Result(WRITER_CHECK_CASE, expected=V.PASS, verdict=V.STALE_REPLAY, backend="cpu", rows=[row])
    try:
        with tempfile.TemporaryDirectory(prefix=".graphsafe-writer-check-", dir=directory) as scratch:
            writer = ResultsWriter(Path(scratch), planned=[known.case])
            writer.add(known)
            writer.close()
            return disagreements(scratch, [known])
    except ReportWriteError:
        raise
    except OSError as exc:  # a full disk, say: an I/O fault as a report's, never a disagreement
        raise ReportWriteError(directory / ".graphsafe-writer-check", exc) from exc


def check_written(run_dir: Path, results: Sequence[Result]) -> list[str]:
    """What `verify` checks once its reports are written, one line per problem ([] when none): results.csv
    holds what the run computed (`disagreements`), and the writer records a known failure
    (`writer_self_check`). ReportWriteError when the self-check's scratch folder cannot be written."""
    problems = [f"{results_csv(run_dir)} disagrees with the run: {line}" for line in disagreements(run_dir, results)]
    problems += [
        f"the results writer's self-check (a known failure written and read back): {line}"
        for line in writer_self_check(run_dir)
    ]
    return problems


def read_raw(path: Path | str) -> tuple[pd.DataFrame, dict[str, Any] | None, list[str]]:
    """results.csv as text cells, exactly the columns it has, with its status line and the reader's notes."""
    csv_path = results_csv(path)
    text = csv_path.read_text(encoding="utf-8")
    status = None
    if text.startswith(STATUS_PREFIX):
        first, _, text = text.partition("\n")
        status = parse_status_line(first)
    records = list(csv.reader(io.StringIO(text, newline="")))
    notes: list[str] = []
    if not records:  # not even a header: no columns (a reader that needs some says which are missing)
        return pd.DataFrame(dtype=str), status, notes
    header, rows = records[0], records[1:]
    if rows and (len(rows[-1]) != len(header) or not text.endswith("\n")):
        rows.pop()
        notes.append(
            f"{csv_path}: dropped a partial last record (the writer was killed or ran out of disk while "
            "writing it); every complete row before it is kept"
        )
    if status and status["state"] == INCOMPLETE and "case" in header:
        # Rows of a case the writer did not finish writing (the disk filled mid-case): a part of a case's
        # rows would read as a case with fewer replays.
        unfinished = set(status.get("never_ran") or [])
        index = header.index("case")
        kept = [row for row in rows if len(row) <= index or row[index] not in unfinished]
        if len(kept) != len(rows):
            notes.append(
                f"{csv_path}: dropped {len(rows) - len(kept)} rows of cases whose writing did not finish"
            )
            rows = kept
    short = [i for i, row in enumerate(rows) if len(row) != len(header)]
    if short:
        width = len(rows[short[0]])
        line = first_line_where(csv_path, lambda record, _: len(record) == width)
        raise ValueError(
            f"{csv_path}: {len(short)} records do not have the header's {len(header)} fields; the first, "
            f"at line {line if line is not None else '?'}, has {width}: not a results.csv, or corrupted"
        )
    return pd.DataFrame(rows, columns=header, dtype=str), status, notes


def first_line_where(path: Path, matches: Callable[[list[str], list[str]], bool]) -> int | None:
    """The line (1-based, in the file as it is on disk) where the first record after the header for which
    `matches(record, header)` holds begins; None when none does. For error messages: it reads the file again."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    offset = 0
    if text.startswith(STATUS_PREFIX):
        text, offset = text.partition("\n")[2], 1
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    end = 0  # the line the previous record ended on
    for record in reader:
        start, end = end + 1, reader.line_num
        if header is None:
            header = record
        elif matches(record, header):
            return start + offset
    return None
