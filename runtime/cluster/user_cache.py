"""The user's cache folder of the embedded Spark (``~/.cache/streamjob``): files a run keeps for the
next ones (class-data-sharing archives, the JVM's launch commands), and their housekeeping. A file in
use is touched once a day; one no run used for a while goes when a new one is written."""

from __future__ import annotations

import os
import time
from typing import Callable

_DAY_S = 86400


def folder(environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    return os.path.join(environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "streamjob")


def in_use(path: str) -> None:
    """Mark a kept file as used (its modification time; at most once a day, not a write per run)."""
    try:
        if time.time() - os.path.getmtime(path) > _DAY_S:
            os.utime(path)
    except OSError:
        pass


def prune(cache: str, unused: Callable[[str, float, int], bool]) -> None:
    """Remove the files of ``cache`` for which ``unused(name, age in seconds, size)`` is true."""
    now = time.time()
    try:
        names = os.listdir(cache)
    except OSError:
        return
    for name in names:
        path = os.path.join(cache, name)
        try:
            st = os.stat(path)
            if unused(name, now - st.st_mtime, st.st_size):
                os.remove(path)
        except OSError:
            pass
