"""``import pyflink...`` where PyFlink is not installed: an error that says how to port the line.

A PyFlink program runs here after changing its imports (``pyflink.datastream`` -> ``streamjob.runtime``,
see ``pyflink_names``). A finder at the end of ``sys.meta_path`` sees the name ``pyflink`` only when
no other finder found it, i.e. when PyFlink is not installed (an installed PyFlink imports as usual).
It raises ``PyFlinkImportError`` (a ModuleNotFoundError, so ``except ImportError`` still works) naming
the line, its streamjob form and the whole module mapping. Installed by ``import streamjob.runtime``
(and so by ``streamjob run`` before it runs the job file).
"""

from __future__ import annotations

import importlib.abc
import linecache
import os
import sys
from typing import Any


class PyFlinkImportError(ModuleNotFoundError):
    """A job imports ``pyflink``; the message says what to import from streamjob instead."""


def _importing_line() -> tuple[str, int, str] | None:
    """(file, line number, text) of the import statement being run: the first frame outside the
    import system and this module."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen") or name == __file__ or f"{os.sep}importlib{os.sep}" in name):
            return name, frame.f_lineno, linecache.getline(name, frame.f_lineno).strip()
        frame = frame.f_back
    return None


def message(fullname: str, where: tuple[str, int, str] | None = None) -> str:
    from .pyflink_names import ELSEWHERE, mapping_text, port_imports, streamjob_module

    lines = [f"No module named {fullname!r}: this is streamjob, which runs PyFlink DataStream programs with their "
             f"imports changed to streamjob's."]
    if where is not None:
        filename, lineno, text = where
        head = f"{filename}, line {lineno}: {text}"
        module = text.split()[1] if text.startswith(("from pyflink", "import pyflink")) and len(text.split()) > 1 else ""
        outside = next((why for prefix, why in ELSEWHERE.items()
                        if module == prefix or module.startswith(prefix + ".")), None)
        if outside is not None:
            lines.append(f"{head}\n  {module}: {outside}.")
        elif text.startswith("from pyflink") and streamjob_module(module) is not None:
            lines.append(f"{head}\n  write instead: {port_imports(text)}")
        elif text.startswith("import pyflink"):
            lines.append(f"{head}\n  import the names instead, e.g. `from streamjob.runtime import "
                         f"StreamExecutionEnvironment`")
        else:
            lines.append(head)
    lines.append("Module mapping:\n" + mapping_text())
    return "\n".join(lines)


class _PyFlinkFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname != "pyflink" and not fullname.startswith("pyflink."):
            return None
        raise PyFlinkImportError(message(fullname, _importing_line()), name=fullname)


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _PyFlinkFinder) for f in sys.meta_path):
        sys.meta_path.append(_PyFlinkFinder())


__all__ = ["PyFlinkImportError", "install", "message"]
