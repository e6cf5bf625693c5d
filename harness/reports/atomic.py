"""Writing a report file whole or not at all.

Every report of a run (summary.md, junit.xml, report.html, fingerprint.json, times.csv and results.csv's
final form) goes through `write_atomic`: the text is written to a temporary file in the same folder,
flushed and fsynced, then renamed over the report's name (os.replace, atomic on POSIX and Windows within one
filesystem) and the folder fsynced so the rename itself is on disk. A full disk, a file-size limit or a kill
mid-write therefore leaves either the previous file or none, never one cut short (a plain write_text on a
24 KiB filesystem left report.html cut at 4096 bytes), and the temporary file is removed again.

A failure raises ReportWriteError, an OSError that names the report's path: the CLI turns it into its own
exit code (graphsafe.cli EXIT_REPORTS_NOT_WRITTEN) and prints the path and the reason.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path

# Test hook, deliberately public: when set, called with each report's final path after its temporary file
# is written and fsynced and before it is renamed into place. tests/test_faults_reports.py sets it (in the
# process it runs `graphsafe verify` in) to hold a report write open while it sends SIGINT or SIGTERM; the
# product never sets it.
before_rename: Callable[[Path], None] | None = None


class ReportWriteError(OSError):
    """A report file could not be written completely; `path` names it, `strerror` says why."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = path

    def __str__(self) -> str:
        return f"could not write {self.path}: {self.strerror}"


def write_atomic(path: Path | str, text: str, encoding: str = "utf-8", newline: str | None = None) -> Path:
    """Write `text` to `path` whole (see the module note); ReportWriteError naming `path` when it cannot."""
    path = Path(path)
    descriptor, temporary = -1, ""
    try:
        # Not tempfile.mkstemp: its files are 0600, and a report is as readable as any file the user's umask
        # allows (CI artifacts, a shared run folder).
        name = str(path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"))
        descriptor = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        temporary = name
        with os.fdopen(descriptor, "w", encoding=encoding, newline=newline) as out:
            descriptor = -1  # the file object owns it now
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if before_rename is not None:
            before_rename(path)
        os.replace(temporary, path)
        temporary = ""
        _fsync_folder(path.parent)
    except OSError as exc:
        raise ReportWriteError(path, exc) from exc
    finally:
        if descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(descriptor)
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return path


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX); a platform that cannot open folders (Windows) skips it."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the rename has happened either way
    finally:
        os.close(handle)
