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
