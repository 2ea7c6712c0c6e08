"""A module imported on first use, for heavy libraries only some jobs need (pandas: ~0.25 s of a
Spark Python worker's start, used only by keyed aggregations and windows)."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for ``name`` until an attribute is read; then imports it (once) and is replaced by it
    in the caller's namespace lookups through ``__getattr__`` (a dictionary look-up per access)."""

    def __init__(self, name: str):
        self._name = name
        self._module: Any = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (loaded)' if self._module is not None else ''}>"
