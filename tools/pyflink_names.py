"""The public names of PyFlink's DataStream-side modules, read from the ``apache-flink`` wheel of PyPI.

    python tools/pyflink_names.py              # download the wheels, write runtime/api/pyflink_names.json
    python tools/pyflink_names.py --docs       # only rewrite docs/api/pyflink-unsupported.md's table of unsupported names

The wheel is downloaded (``pip download --no-deps``), never installed: it is large and pins old
dependencies. Its files are read from the zip and parsed with ``ast``: a module's ``__all__`` is
its public names; a module without one (``watermark_strategy``, ``configuration``,
``connectors/base``) contributes the classes and functions it defines whose names do not start
with ``_``. Two releases are read, the newest 1.20.x and the newest 2.x (see VERSIONS), and their
names united: 1.20 is what most published PyFlink programs are written against (2.0 removed
``TimeCharacteristic``, the legacy state backends, ``ExternalizedCheckpointCleanup``), 2.x added
the async functions and a few schemas. Each name records the releases that have it.

Classes that are generic in PyFlink (``Generic[...]`` or a subscripted generic base, nested
classes included, e.g. ``ProcessWindowFunction.Context``) are listed too: a program may subscript
them in annotations (``ProcessWindowFunction.Context[TimeWindow]``), so ours must accept it.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "runtime", "api", "pyflink_names.json")
# The newest releases of the 1.20 and 2.x lines PyPI served when the list was made
# (`pip index versions apache-flink`); change them and rerun to follow new releases.
VERSIONS = ("1.20.5", "2.3.0")

# The modules of the DataStream API (and the pyflink.common parts it uses); connectors/* and
# formats/* are globbed in the wheel.
MODULES = (
    "pyflink/datastream/__init__.py",
    "pyflink/datastream/functions.py",
    "pyflink/datastream/state.py",
    "pyflink/datastream/window.py",
    "pyflink/datastream/time_characteristic.py",
    "pyflink/datastream/checkpointing_mode.py",
    "pyflink/common/__init__.py",
    "pyflink/common/typeinfo.py",
    "pyflink/common/time.py",
    "pyflink/common/watermark_strategy.py",
    "pyflink/common/serialization.py",
    "pyflink/common/configuration.py",
)
GLOBS = ("pyflink/datastream/connectors/", "pyflink/datastream/formats/")


def module_name(path: str) -> str:
    name = path[:-len(".py")].replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def public_names(tree: ast.Module) -> list[str]:
    """``__all__`` (deduplicated, in order), else the public classes and functions defined here."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(dict.fromkeys(ast.literal_eval(node.value)))
    return [n.name for n in tree.body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and not n.name.startswith("_")]


def _is_generic_base(base: ast.expr) -> bool:
    # Generic[T], or a generic class subscripted: WindowAssigner[T, CountWindow], Function[IN]
    return isinstance(base, ast.Subscript)


def generic_classes(tree: ast.Module, module: str) -> list[str]:
    """Qualified names (module.Class[.Nested]) of the classes declared generic."""
    out: list[str] = []

    def visit(body: list, prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                qualified = f"{prefix}.{node.name}"
                if any(_is_generic_base(b) for b in node.bases):
                    out.append(qualified)
                visit(node.body, qualified)

    visit(tree.body, module)
    return out


def read_wheel(path: str) -> tuple[dict[str, list[str]], list[str]]:
    """module -> public names, and the generic classes, of one wheel."""
    names: dict[str, list[str]] = {}
    generic: list[str] = []
    with zipfile.ZipFile(path) as wheel:
        members = set(wheel.namelist())
        paths = [m for m in MODULES if m in members]
        paths += sorted(m for m in members if m.endswith(".py") and m.startswith(GLOBS) and "/tests/" not in m
                        and m.count("/") == 3)
        for p in paths:
            tree = ast.parse(wheel.read(p).decode("utf-8"), p)
            module = module_name(p)
            found = public_names(tree)
            if found:
                names[module] = found
            generic += generic_classes(tree, module)
        # Generic classes anywhere in the DataStream package count (a public name re-exported by
        # pyflink.datastream may be defined in data_stream.py, state_backend.py, ...).
        for p in sorted(m for m in members if m.startswith(("pyflink/datastream/", "pyflink/common/"))
                        and m.endswith(".py") and "/tests/" not in m and m not in paths):
            generic += generic_classes(ast.parse(wheel.read(p).decode("utf-8"), p), module_name(p))
    return names, generic


def download(version: str, into: str) -> str:
    subprocess.run([sys.executable, "-m", "pip", "download", f"apache-flink=={version}", "--no-deps",
                    "--only-binary", ":all:", "-d", into, "-q"], check=True)
    found = glob.glob(os.path.join(into, f"apache_flink-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download gave no apache_flink-{version} wheel in {into}")
    return found[0]


def _top_class(qualified: str) -> str:
    """The top-level class of ``module.Class[.Nested]`` (modules are lower case, classes are not)."""
    return next(p for p in qualified.split(".") if p[:1].isupper())


def build(versions: tuple[str, ...]) -> dict:
    modules: dict[str, dict[str, list[str]]] = {}
    generic: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in versions:
            names, gen = read_wheel(download(v, tmp))
            for module, found in names.items():
                for name in found:
                    modules.setdefault(module, {}).setdefault(name, []).append(v)
            for g in gen:
                generic.setdefault(g, []).append(v)
    # Only generic classes that are public (re-exported anywhere) or nested in one: not the internals.
    public = {n for per in modules.values() for n in per}
    generic = {g: vs for g, vs in generic.items() if _top_class(g) in public}
    # Names in every release are listed plainly; the others say which releases have them.
    return {
        "source": "apache-flink wheels of PyPI, read by tools/pyflink_names.py (the modules' __all__)",
        "versions": list(versions),
        "modules": {m: sorted(n) for m, n in sorted(modules.items())},
        "only_in": {f"{m}.{n}": vs for m, per in sorted(modules.items()) for n, vs in sorted(per.items())
                    if len(vs) < len(versions)},
        "generic": sorted(generic),
    }


# The documentation page that holds the table of PyFlink names streamjob does not have.
DOCS_PAGE = os.path.join("docs", "api", "pyflink-unsupported.md")


def write_docs_table() -> None:
    sys.path.insert(0, ROOT)
    from streamjob.runtime.api import pyflink_names

    path = os.path.join(ROOT, DOCS_PAGE)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = pyflink_names.replace_readme_table(text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="append", help=f"apache-flink release(s) to read (default: {VERSIONS})")
    parser.add_argument("--docs", "--readme", dest="docs", action="store_true",
                        help=f"only rewrite {DOCS_PAGE}'s table from the data")
    args = parser.parse_args()
    if not args.docs:
        data = build(tuple(args.version or VERSIONS))
        with open(OUT, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"{sum(len(n) for n in data['modules'].values())} names of {len(data['modules'])} modules "
              f"({', '.join(data['versions'])}) -> {os.path.relpath(OUT, ROOT)}")
    write_docs_table()


if __name__ == "__main__":
    main()
