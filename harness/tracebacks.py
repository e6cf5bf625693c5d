"""Where in the user's code an exception came from: "at cases/my_ops.py:42 in my_op".

A capture_sync or an exception names torch's or the harness's frame last (the dispatcher rule that refused
a host read, torch's copy_), which tells a user nothing; the line to fix is the innermost frame in their own
code. `user_frame` walks the exception, its causes and contexts (a CaptureSyncError raised `from` the
runtime's error keeps the op's traceback on the cause) and returns that frame, skipping the harness, torch
and the standard library.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

import torch

from graphsafe.errors import exception_chain

_HARNESS_DIR = Path(__file__).resolve().parent
_SKIPPED_DIRS: tuple[str, ...] = tuple(
    str(p) + os.sep
    for p in {
        _HARNESS_DIR,
        Path(torch.__file__).resolve().parent,
        Path(sysconfig.get_paths()["stdlib"]).resolve(),
    }
)


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):  # <string>, <frozen ...>: no file to open
        return False
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        return False
    return not resolved.startswith(_SKIPPED_DIRS)


def _shown_path(filename: str) -> str:
    """Relative to the working directory when below it (what a user types), else absolute."""
    path = Path(filename).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def user_frame(exc: BaseException) -> str:
    """ "at FILE:LINE in FUNC" for the innermost user frame of the deepest exception that has one; "" if none."""
    for link in reversed(
        exception_chain(exc)
    ):  # the root cause first: its traceback reaches deepest into the op
        frames = traceback.extract_tb(link.__traceback__)
        for frame in reversed(frames):
            if _is_user_file(frame.filename):
                return f"at {_shown_path(frame.filename)}:{frame.lineno} in {frame.name}"
    return ""


def with_user_frame(detail: str, exc: BaseException) -> str:
    """The detail followed by " (at FILE:LINE in FUNC)" when a user frame is known."""
    where = user_frame(exc)
    return f"{detail} ({where})" if where else detail
