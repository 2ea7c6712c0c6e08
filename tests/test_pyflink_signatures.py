"""Every PyFlink call shape works on streamjob: the parameters of each public PyFlink callable that
streamjob has under the same name are accepted by streamjob's, by position and by keyword, with
the same defaults. No Spark, no network: these run in a second.

PyFlink's signatures come from runtime/api/pyflink_signatures.json, which tools/pyflink_signatures.py
reads from the apache-flink 1.20 wheel (ast over its source, not installed). A PyFlink name is found
in streamjob as the pyflink import shim maps it (``pyflink_names.streamjob_module``); names streamjob
does not have are the business of tests/test_pyflink_names.py and test_pyflink_api.py.

The rules, for each PyFlink parameter in order:
* a positional one is streamjob's parameter at the same place with the same name (PyFlink programs
  pass them by keyword too), unless streamjob takes ``*args`` there;
* a keyword-only one is a parameter of streamjob's of the same name, or ``**kwargs``;
* ``*args`` / ``**kwargs`` are taken by streamjob too;
* a PyFlink default is a default of streamjob's, equal to it where PyFlink's is a literal;
and streamjob's parameters PyFlink does not have have a default (or are ``*args`` / ``**kwargs``);
placed after PyFlink's positional ones (else the names above differ), or keyword-only: streamjob
may accept more, never less.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
import zipfile
from pathlib import Path

import pytest

from streamjob.runtime import PyFlinkNotSupported
from streamjob.runtime.api import pyflink_names

ROOT = Path(__file__).parents[1]
DATA = json.loads((ROOT / "runtime" / "api" / "pyflink_signatures.json").read_text())
sys.path.insert(0, str(ROOT / "tools"))
import pyflink_signatures as signatures_tool  # noqa: E402  (tools/pyflink_signatures.py)

_MISSING = object()

# PyFlink callable (its exported name, ".method") -> why streamjob's signature differs on purpose.
ALLOWED: dict[str, str] = {
    "pyflink.common.TypeInformation.__init__":
        "programs get type information from Types.*(), never construct it: PyFlink's is an abstract base "
        "taking nothing, streamjob's holds the type's name and its Arrow type",
    "pyflink.datastream.StreamExecutionEnvironment.execute_async":
        "job_name=None names the job after the program's file, as execute() does here; PyFlink's "
        "'Flink Streaming Job' would give every async job the same name in the dashboard and REST API",
    "pyflink.datastream.connectors.Source.__init__":
        "PyFlink's Source wraps a Java source (a class name or JavaObject); streamjob's is the base class "
        "of its Python sources, which take their own arguments",
    "pyflink.datastream.connectors.Sink.__init__":
        "PyFlink's Sink wraps a Java sink (a class name or JavaObject); streamjob's is the base class "
        "of its Python sinks, which take their own arguments",
}


def _streamjob(exported: str):
    module, _, name = exported.rpartition(".")
    target = pyflink_names.streamjob_module(module)
    if target is None:
        return _MISSING
    try:
        return getattr(importlib.import_module(target), name)
    except (AttributeError, PyFlinkNotSupported):
        return _MISSING


def _static(cls, dotted: str):
    """The attribute ``dotted`` (``Nested.method``) of ``cls`` as stored (staticmethod, classmethod or
    function), without running ``__getattr__`` (streamjob's refusals of unsupported calls)."""
    obj = cls
    *nested, name = dotted.split(".")
    for part in nested:
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return _MISSING
        if not inspect.isclass(obj):
            return _MISSING
    try:
        raw = inspect.getattr_static(obj, name)
    except AttributeError:
        return _MISSING
    if name == "__init__" and raw is object.__init__:
        return _MISSING if not inspect.isclass(obj) else raw
    return raw


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return _MISSING


def _same_default(pyflink: str, ours) -> bool:
    value = _literal(pyflink)
    if value is _MISSING:
        return True  # an expression (Duration.of_millis(0), Types.STRING()): that there is a default is enough
    return type(value) is type(ours) and value == ours if isinstance(value, bool) or isinstance(ours, bool) \
        else value == ours


def compare(pyflink: list, kind: str, raw) -> list[str]:
    """What keeps a PyFlink call shape from working with streamjob's callable ``raw``."""
    if raw is object.__init__:
        return ["streamjob's class takes no arguments"] if pyflink else []
    ours_kind = "staticmethod" if isinstance(raw, staticmethod) else \
        "classmethod" if isinstance(raw, classmethod) else "method"
    fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if isinstance(fn, property) or not callable(fn):
        return [f"streamjob's is not callable ({type(fn).__name__})"]
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []  # a builtin without a signature: nothing to compare
    problems = []
    if kind in ("method", "classmethod") or ours_kind != "staticmethod":
        if ours_kind == "staticmethod" and kind == "method":
            pass  # a staticmethod called on an instance takes the same arguments
        elif kind == "staticmethod" and ours_kind == "method":
            problems.append("PyFlink's is a staticmethod, streamjob's needs an instance")
            params = params[1:]
        else:
            params = params[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
    var_kw = next((p for p in params if p.kind == p.VAR_KEYWORD), None)
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    matched: set[str] = set()
    index = 0
    for name, pkind, default in pyflink:
        if pkind in ("positional_only", "positional_or_keyword"):
            if index < len(positional):
                ours = positional[index]
                if pkind == "positional_or_keyword" and ours.name != name:
                    problems.append(f"parameter {index + 1} is {name!r} in PyFlink, {ours.name!r} here")
            elif var_pos is not None:
                index += 1
                continue
            else:
                problems.append(f"PyFlink's parameter {name!r} (position {index + 1}) is missing")
                index += 1
                continue
            index += 1
        elif pkind == "keyword_only":
            ours = by_name.get(name)
            if ours is None:
                if var_kw is None:
                    problems.append(f"PyFlink's keyword-only {name!r} is missing")
                continue
        elif pkind == "var_positional":
            if var_pos is None:
                problems.append(f"PyFlink takes *{name}, streamjob does not")
            continue
        else:
            if var_kw is None:
                problems.append(f"PyFlink takes **{name}, streamjob does not")
            continue
        matched.add(ours.name)
        if default is not None:
            if ours.default is inspect.Parameter.empty:
                problems.append(f"{name!r} has the default {default} in PyFlink, none here")
            elif not _same_default(default, ours.default):
                problems.append(f"{name!r} has the default {default} in PyFlink, {ours.default!r} here")
    for p in params:
        if p.name in matched or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            problems.append(f"streamjob's extra parameter {p.name!r} has no default")
    return problems


def _internal(params: list) -> bool:
    """A constructor or method over Java objects (``j_...`` parameters): PyFlink's plumbing, which
    programs never call (they get these objects from other calls)."""
    return any(name.startswith("j_") for name, _, _ in params)


def mismatches() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, entry in DATA["callables"].items():
        for exported in entry["exported"]:
            ours = _streamjob(exported)
            if ours is _MISSING:
                continue
            if entry["type"] == "function":
                if not _internal(entry["params"]):
                    problems = compare(entry["params"], "staticmethod", ours)
                    if problems:
                        out[exported] = problems
                continue
            if not inspect.isclass(ours):
                continue  # a PyFlink class that is a function or an alias here: constructed alike
            for method, m in entry["methods"].items():
                if _internal(m["params"]):
                    continue
                raw = _static(ours, method)
                if raw is _MISSING:
                    continue
                problems = compare(m["params"], m["kind"], raw)
                if problems:
                    out[f"{exported}.{method}"] = problems
            break  # one exported name of a class is enough: they are the same class in streamjob
    return out


def test_every_pyflink_call_shape_is_accepted_by_streamjobs_signature():
    found = mismatches()
    unexpected = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not unexpected, "PyFlink call shapes streamjob refuses:\n" + "\n".join(
        f"  {k}: {'; '.join(v)}" for k, v in sorted(unexpected.items()))
    stale = sorted(k for k in ALLOWED if k not in found)
    assert not stale, f"allowed mismatches that are gone (drop them from ALLOWED): {stale}"
    for key, why in ALLOWED.items():
        assert why and not why.endswith("."), key


def test_the_comparison_sees_renamed_missing_and_positional_extra_parameters():
    def ours_renamed(self, alignment_timeout): ...
    def ours_extra(self, a, extra=1): ...
    def ours_ok(self, a, b=None, *, extra=1): ...
    def ours_default(self, a, b=5): ...

    pyflink = [["a", "positional_or_keyword", None], ["b", "positional_or_keyword", "None"]]
    assert compare([["alignment_timeout_ms", "positional_or_keyword", None]], "method", ours_renamed) == [
        "parameter 1 is 'alignment_timeout_ms' in PyFlink, 'alignment_timeout' here"]
    assert compare(pyflink, "method", ours_extra) == [
        "parameter 2 is 'b' in PyFlink, 'extra' here", "'b' has the default None in PyFlink, 1 here"]
    assert compare(pyflink, "method", ours_ok) == []
    assert compare(pyflink, "method", ours_default) == ["'b' has the default None in PyFlink, 5 here"]
    assert compare([["x", "positional_or_keyword", None]], "staticmethod", staticmethod(lambda x: x)) == []
    assert compare(pyflink[:1], "method", ours_extra) == []  # a trailing extra with a default: any call works
    def ours_required(self, a, extra): ...
    assert compare(pyflink[:1], "method", ours_required) == ["streamjob's extra parameter 'extra' has no default"]


def test_pyflinks_type_variables_import_from_the_modules_streamjob_mirrors():
    import typing

    assert DATA["typevars"]["pyflink.datastream.functions"] == ["W", "W2", "IN", "IN1", "IN2", "OUT", "KEY"]
    for module, names in DATA["typevars"].items():
        target = importlib.import_module(pyflink_names.streamjob_module(module))
        for name in names:
            value = getattr(target, name)
            assert isinstance(value, typing.TypeVar) and value.__name__ == name, f"{module}.{name}"
    # base classes defined outside __all__ that programs annotate or subclass with
    from streamjob.runtime import AppendingState, Function, MapFunction, MergingState, ReducingState, State

    assert issubclass(MapFunction, Function) and issubclass(ReducingState, MergingState)
    assert issubclass(MergingState, AppendingState) and issubclass(AppendingState, State)


def test_the_signatures_tool_reads_callables_and_follows_reexports_from_a_wheel(tmp_path):
    wheel = tmp_path / "apache_flink-9.9.9-cp311-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pyflink/datastream/__init__.py",
                   "from pyflink.datastream.data_stream import KeyedStream\n__all__ = ['KeyedStream']\n")
        z.writestr("pyflink/datastream/data_stream.py",
                   "from typing import TypeVar\nT = TypeVar('T')\n"
                   "class DataStream(object):\n    def __init__(self, j_data_stream):\n        pass\n"
                   "    def map(self, func, output_type=None):\n        pass\n"
                   "    def _hidden(self):\n        pass\n"
                   "class KeyedStream(DataStream):\n    def sum(self, position_to_sum=0):\n        pass\n"
                   "    @staticmethod\n    def of(*args, key: str = 'k', **kw):\n        pass\n"
                   "    @property\n    def prop(self):\n        pass\n"
                   "    class Context(object):\n        def timestamp(self):\n            pass\n")
        z.writestr("pyflink/datastream/functions.py", "from typing import TypeVar\nKEY = TypeVar('KEY')\n"
                                                      "__all__ = ['helper']\ndef helper(a, /, b):\n    pass\n")
    data = signatures_tool.read_wheel(str(wheel))
    assert data["version"] == "9.9.9" and data["typevars"] == {"pyflink.datastream.functions": ["KEY"]}
    keyed = data["callables"]["pyflink.datastream.data_stream:KeyedStream"]
    assert keyed["exported"] == ["pyflink.datastream.KeyedStream"]
    assert keyed["methods"] == {
        "__init__": {"kind": "method", "params": [["j_data_stream", "positional_or_keyword", None]]},
        "map": {"kind": "method", "params": [["func", "positional_or_keyword", None],
                                             ["output_type", "positional_or_keyword", "None"]]},
        "sum": {"kind": "method", "params": [["position_to_sum", "positional_or_keyword", "0"]]},
        "of": {"kind": "staticmethod", "params": [["args", "var_positional", None],
                                                  ["key", "keyword_only", "'k'"], ["kw", "var_keyword", None]]},
        "Context.timestamp": {"kind": "method", "params": []}}
    assert data["callables"]["pyflink.datastream.functions:helper"]["params"] == [
        ["a", "positional_only", None], ["b", "positional_or_keyword", None]]
    # the committed data is the tool's output for 1.20, and its text is what the tool writes
    assert DATA["version"] == "1.20.5"
    assert (ROOT / "runtime" / "api" / "pyflink_signatures.json").read_text() == signatures_tool.dumps(DATA)
    sum_ = DATA["callables"]["pyflink.datastream.data_stream:KeyedStream"]["methods"]["sum"]
    assert sum_["params"] == [["position_to_sum", "positional_or_keyword", "0"]]


@pytest.mark.parametrize("call", ["set_aligned_checkpoint_timeout"])
def test_the_issues_example_takes_pyflinks_keyword(call):
    from streamjob.runtime import StreamExecutionEnvironment

    config = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    getattr(config, call)(alignment_timeout=1000)  # PyFlink: set_aligned_checkpoint_timeout(alignment_timeout)
