"""The signatures of PyFlink's public callables, read from the ``apache-flink`` wheel of PyPI.

    python tools/pyflink_signatures.py       # download the 1.20 wheel, write runtime/api/pyflink_signatures.json

For every public name of the modules ``tools/pyflink_names.py`` reads (the DataStream, common, state
and connector modules: ``MODULES`` and ``GLOBS`` there), followed to where it is defined (a module
re-exports most of its names), the tool writes each callable's parameters (name, kind, default as
source text): a function; a class's ``__init__`` and its public methods (static and class methods
too, inherited ones from PyFlink's own bases included); the same for the public classes nested in it
(``StateTtlConfig.Builder``). It also lists the module-level type variables (``KEY = TypeVar('KEY')``),
which programs import though they are in no ``__all__``.

As tools/pyflink_names.py, the wheel is downloaded (``pip download --no-deps``, its download code is
reused), never installed, and read with ``ast``; the wheel is kept in ``--cache`` for the next run.
tests/test_pyflink_signatures.py compares the committed JSON with streamjob's signatures, so the
test needs no network. 1.20 is read (what most published PyFlink programs are written against).
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyflink_names as names_tool  # noqa: E402  (tools/pyflink_names.py: module set, download)

ROOT = names_tool.ROOT
OUT = os.path.join(ROOT, "runtime", "api", "pyflink_signatures.json")
VERSION = "1.20.5"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "streamjob", "pyflink-wheels")

_KINDS = ("positional_only", "positional_or_keyword", "var_positional", "keyword_only", "var_keyword")


def wheel_modules(wheel: zipfile.ZipFile) -> dict[str, ast.Module]:
    """Every module of pyflink.datastream, pyflink.common and pyflink.metrics (not tests), parsed."""
    out = {}
    for m in wheel.namelist():
        if m.endswith(".py") and m.startswith(("pyflink/datastream/", "pyflink/common/", "pyflink/metrics/")) \
                and "/tests/" not in m:
            out[names_tool.module_name(m)] = ast.parse(wheel.read(m).decode("utf-8"), m)
    return out


def selected_modules(wheel: zipfile.ZipFile) -> list[str]:
    """The modules tools/pyflink_names.py reads (their public names are PyFlink's API)."""
    members = set(wheel.namelist())
    paths = [m for m in names_tool.MODULES if m in members]
    paths += sorted(m for m in members if m.endswith(".py") and m.startswith(names_tool.GLOBS)
                    and "/tests/" not in m and m.count("/") == 3)
    return [names_tool.module_name(p) for p in paths]


def _is_package(modules: dict[str, ast.Module], name: str) -> bool:
    return any(m.startswith(name + ".") for m in modules)


def _absolute(module: str, node: ast.ImportFrom, package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if package else parts[:-1]
    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def resolve(modules: dict[str, ast.Module], module: str, name: str, seen: frozenset = frozenset()):
    """(module, node) where ``module.name`` is defined (a ClassDef or FunctionDef), following imports;
    None if it is not a class or function of PyFlink's (a TypeVar, an alias of another package...)."""
    if (module, name) in seen or module not in modules:
        return None
    seen = seen | {(module, name)}
    tree = modules[module]
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return module, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(module, node, _is_package(modules, module))
                    found = resolve(modules, source, alias.name, seen)
                    if found is None and f"{source}.{alias.name}" in modules:
                        return None  # a module, not a callable
                    if found is not None:
                        return found
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> list[list]:
    a = fn.args
    out: list[list] = []
    positional = list(a.posonlyargs) + list(a.args)
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "positional_only" if i < len(a.posonlyargs) else "positional_or_keyword"
        out.append([arg.arg, kind, None if default is None else ast.unparse(default)])
    if a.vararg is not None:
        out.append([a.vararg.arg, "var_positional", None])
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append([arg.arg, "keyword_only", None if default is None else ast.unparse(default)])
    if a.kwarg is not None:
        out.append([a.kwarg.arg, "var_keyword", None])
    if drop_first and out and out[0][1] in ("positional_only", "positional_or_keyword"):
        out = out[1:]
    return out


def _decorators(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for d in fn.decorator_list:
        if isinstance(d, ast.Name):
            names.add(d.id)
        elif isinstance(d, ast.Attribute):
            names.add(d.attr)
    return names


def _method(fn: ast.FunctionDef) -> dict | None:
    """A method's entry; None for properties and setters (attributes, not calls)."""
    decorators = _decorators(fn)
    if decorators & {"property", "setter", "getter", "deleter", "overload"}:
        return None
    kind = "staticmethod" if "staticmethod" in decorators else "classmethod" if "classmethod" in decorators \
        else "method"
    return {"kind": kind, "params": _params(fn, drop_first=kind != "staticmethod")}


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Name):
        return base.id
    return None


def class_methods(modules: dict[str, ast.Module], module: str, cls: ast.ClassDef,
                  seen: frozenset = frozenset()) -> dict[str, dict]:
    """name -> entry of the class's public methods and __init__, its PyFlink bases' first (overridden
    by its own), and of its nested public classes (``Nested.method``)."""
    if (module, cls.name) in seen:
        return {}
    seen = seen | {(module, cls.name)}
    methods: dict[str, dict] = {}
    for base in cls.bases:
        name = _base_name(base)
        found = resolve(modules, module, name) if name else None
        if found is not None and isinstance(found[1], ast.ClassDef):
            methods.update({k: v for k, v in class_methods(modules, found[0], found[1], seen).items()
                            if "." not in k})  # nested classes are not inherited as names we check
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                not node.name.startswith("_") or node.name == "__init__"):
            entry = _method(node)
            if entry is not None:
                methods[node.name] = entry
            else:
                methods.pop(node.name, None)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for k, v in class_methods(modules, module, node, seen).items():
                methods[f"{node.name}.{k}"] = v
    return methods


def typevars(tree: ast.Module) -> list[str]:
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id == "TypeVar":
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return out


def read_wheel(path: str) -> dict:
    with zipfile.ZipFile(path) as wheel:
        modules = wheel_modules(wheel)
        selected = selected_modules(wheel)
    callables: dict[str, dict] = {}
    tvars: dict[str, list[str]] = {}
    for module in selected:
        tree = modules[module]
        found_tvars = typevars(tree)
        if found_tvars:
            tvars[module] = found_tvars
        for name in names_tool.public_names(tree):
            found = resolve(modules, module, name)
            if found is None:
                continue
            where, node = found
            key = f"{where}:{node.name}"
            entry = callables.get(key)
            if entry is None:
                if isinstance(node, ast.ClassDef):
                    entry = {"type": "class", "methods": class_methods(modules, where, node)}
                    # a class without an __init__ of its own or its bases': no entry, as object's
                else:
                    entry = {"type": "function", "params": _params(node, drop_first=False)}
                entry["exported"] = []
                callables[key] = entry
            entry["exported"].append(f"{module}.{name}")
    return {
        "source": f"apache-flink {os.path.basename(path)}, read by tools/pyflink_signatures.py (ast, not installed)",
        "version": os.path.basename(path).split("-")[1],
        "kinds": list(_KINDS),
        "callables": {k: callables[k] for k in sorted(callables)},
        "typevars": tvars,
    }


def dumps(data: dict) -> str:
    """JSON with one line per callable (a diff shows which signature changed)."""
    c = lambda v: json.dumps(v, separators=(", ", ": "))  # noqa: E731
    lines = ["{"]
    for key in ("source", "version", "kinds", "typevars"):
        lines.append(f" {c(key)}: {c(data[key])},")
    lines.append(' "callables": {')
    items = list(data["callables"].items())
    for i, (key, entry) in enumerate(items):
        end = "," if i < len(items) - 1 else ""
        if entry["type"] == "function":
            lines.append(f"  {c(key)}: {c(entry)}{end}")
            continue
        head = {k: v for k, v in entry.items() if k != "methods"}
        lines.append(f"  {c(key)}: {c(head)[:-1]}, \"methods\": {{")
        methods = list(entry["methods"].items())
        for j, (name, m) in enumerate(methods):
            lines.append(f"   {c(name)}: {c(m)}{',' if j < len(methods) - 1 else ''}")
        lines.append(f"  }}}}{end}")
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def wheel_path(version: str, cache: str) -> str:
    os.makedirs(cache, exist_ok=True)
    found = glob.glob(os.path.join(cache, f"apache_flink-{version}-*.whl"))
    return found[0] if found else names_tool.download(version, cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default=VERSION, help=f"apache-flink release to read (default: {VERSION})")
    parser.add_argument("--cache", default=CACHE, help=f"where the wheel is kept (default: {CACHE})")
    parser.add_argument("--wheel", help="read this wheel file instead of downloading one")
    args = parser.parse_args()
    data = read_wheel(args.wheel or wheel_path(args.version, args.cache))
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(dumps(data))
    n = sum(len(e["methods"]) if e["type"] == "class" else 1 for e in data["callables"].values())
    print(f"{n} callables of {len(data['callables'])} classes and functions ({data['version']}) -> "
          f"{os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
