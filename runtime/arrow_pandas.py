"""pyarrow without pandas, until something imports pandas.

pyarrow asks whether pandas is installed the first time it converts a Python sequence
(``pa.array(list)``, ``RecordBatch.from_pylist``: whether the object is a pandas Series), and that
question imports pandas: ~37 MB of every task worker's memory (W1 at p=2: a third of a worker's
own pages) and ~0.25 s, in jobs none of whose operators use pandas. A pandas object cannot exist
before pandas is imported, so the answer "no pandas" is true until then: ``defer`` makes pyarrow
note that answer without importing it, and has pyarrow look again (``_PandasAPIShim.compat``) the
moment anything imports pandas (a keyed aggregation, a user's function, pyarrow's own dataset
module), so from then on pyarrow knows pandas' types exactly as it would have.

It relies on pyarrow's shim (``pyarrow.lib._pandas_api``, pyarrow 19-29); without one it does
nothing and pyarrow imports pandas as before.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any


class _Refuse(importlib.abc.MetaPathFinder):
    """Makes ``import pandas`` fail, for pyarrow's one look while ``defer`` runs."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ImportError("deferred by streamjob", name=name)
        return None


class _LookAgain(importlib.abc.MetaPathFinder):
    """When pandas is first imported: loads it as usual, then has pyarrow look again."""

    def __init__(self, shim: Any):
        self.shim = shim

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pandas":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)  # the finders after this one: the real pandas
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenLookAgain(spec.loader, self.shim)
        return spec


class _ThenLookAgain(importlib.abc.Loader):
    def __init__(self, loader: Any, shim: Any):
        self.loader = loader
        self.shim = shim

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # pandas sees its own loader, as without
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.shim.compat  # noqa: B018 - pyarrow imports pandas (now in sys.modules) and its compat module

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def defer() -> bool:
    """Have pyarrow answer "no pandas" until pandas is imported (see the module). Call it after
    importing pyarrow and before any conversion; True if pyarrow's pandas import was deferred."""
    if "pandas" in sys.modules or any(isinstance(f, _LookAgain) for f in sys.meta_path):
        return False
    try:
        from pyarrow import lib

        shim = lib._pandas_api
        type(shim).have_pandas  # noqa: B018 - the shim as this module knows it
        type(shim).compat  # noqa: B018
    except (ImportError, AttributeError):
        return False
    refuse = _Refuse()
    sys.meta_path.insert(0, refuse)
    try:
        had = shim.have_pandas  # pyarrow tries `import pandas` once (refused) and notes it has none
    finally:
        sys.meta_path.remove(refuse)
    if had:  # pyarrow had looked already (and found pandas): nothing to defer
        return False
    sys.meta_path.insert(0, _LookAgain(shim))
    return True
