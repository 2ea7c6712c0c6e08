"""Tracebacks from the tasks, shown in the user's own terms.

Functions of the job file travel to the tasks pickled by value (cloudpickle), and cloudpickle drops
their file name on purpose (``<dynamic-code>``), so a failing user function's frame said neither where
it is nor what the line holds. The driver runs the job file as ``__main__``: a frame of a function that
``__main__`` defines is mapped back to that file, with its source line, as Python would have shown it.
"""

from __future__ import annotations

import linecache
import re
import sys
import types
from typing import Any

_DYNAMIC = re.compile(r'^(\s*)File "<dynamic-code>", line (\d+), in (\S+)$', re.MULTILINE)


def _main_file() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path if isinstance(path, str) and linecache.getlines(path) else None


def _defined_in_main(name: str, line: int) -> bool:
    """Whether ``__main__`` defines a function (or a method of a class) called ``name`` whose body can
    hold ``line``; lambdas count when the line is in the file (their name is ``<lambda>``)."""
    main = sys.modules.get("__main__")
    if name == "<lambda>":
        return True
    candidates: list[Any] = []
    for value in vars(main).values() if main else ():
        if isinstance(value, types.FunctionType):
            candidates.append(value)
        elif isinstance(value, type):
            candidates += [v for v in vars(value).values() if isinstance(v, types.FunctionType)]
    return any(f.__name__ == name and f.__code__.co_firstlineno <= line for f in candidates)


def map_user_frames(text: str, main_file: str | None = None) -> str:
    """``text`` with each ``<dynamic-code>`` frame of a ``__main__`` function pointing at the job file,
    followed by its source line."""
    main_file = main_file or _main_file()
    if not text or main_file is None or "<dynamic-code>" not in text:
        return text
    lines = linecache.getlines(main_file)

    def replace(m: re.Match) -> str:
        indent, line, name = m.group(1), int(m.group(2)), m.group(3)
        if not 1 <= line <= len(lines) or not _defined_in_main(name, line):
            return m.group(0)
        return f'{indent}File "{main_file}", line {line}, in {name}\n{indent}  {lines[line - 1].strip()}'

    return _DYNAMIC.sub(replace, text)


# -- engine frames -------------------------------------------------------------------------------
# A traceback a user reads is about their code: the frames of streamjob itself, of PySpark, py4j,
# cloudpickle and click, of runpy (which ran the job file) and Java's (a Spark error's stack) are hidden
# unless `streamjob run -v` asks for them; a last line says how many were.
_FRAME = re.compile(r'^(\s*)File "([^"]+)", line \d+, in .*$')
_JAVA_FRAME = re.compile(r"^\s+(at [\w$.<>/]+\(.*\)|\.\.\. \d+ more)\s*$")


def _engine_roots() -> tuple[str, ...]:
    import importlib.util
    import os

    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    roots = [os.path.join(package, "runtime") + os.sep, os.path.join(package, "operator") + os.sep]
    for name in ("pyspark", "py4j", "cloudpickle", "click", "runpy"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin and spec.submodule_search_locations:
            roots.append(os.path.dirname(origin) + os.sep)
        elif origin:
            roots.append(origin)
    return tuple(roots)


def is_engine_file(path: str, roots: tuple[str, ...]) -> bool:
    if path.startswith("<frozen runpy") or path == "<frozen runpy>":
        return True
    if "/pyspark.zip/" in path or "/py4j-" in path:  # Spark's Python workers import them from zips
        return True
    return path.startswith(roots)


def hide_engine_frames(text: str, roots: tuple[str, ...] | None = None) -> str:
    """``text`` without the engine's Python frames (each with its source lines) and Java's stack lines."""
    if not text:
        return text
    roots = _engine_roots() if roots is None else roots
    out: list[str] = []
    hidden = 0
    skipping_indent: int | None = None  # inside a hidden frame: its lines are indented deeper than this
    for line in text.split("\n"):
        if skipping_indent is not None:
            if line.strip() and len(line) - len(line.lstrip()) > skipping_indent and not _FRAME.match(line):
                continue  # the hidden frame's source line (and its ^^^ marks)
            skipping_indent = None
        m = _FRAME.match(line)
        if m and is_engine_file(m.group(2), roots):
            hidden += 1
            skipping_indent = len(m.group(1))
            continue
        if _JAVA_FRAME.match(line):
            hidden += 1
            continue
        out.append(line)
    if not hidden:
        return text
    result = "\n".join(out).rstrip("\n")
    return f"{result}\n({hidden} frames of streamjob, PySpark, runpy and Java hidden; `streamjob run -v` shows them)"
