"""The skeleton: import names, the stdlib's operator module, the console script, no-Java message."""

import os
import subprocess
import sys
from pathlib import Path

import tomllib


ROOT = Path(__file__).parents[1]


def test_stdlib_operator_is_not_shadowed_from_the_repo_root():
    code = "import collections, json, operator; assert operator.__file__.endswith('operator.py'), operator.__file__; " \
           "import streamjob.operator.version, streamjob.runtime; print('ok')"
    for extra in ({}, {"PYTHONPATH": "."}):
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **extra}, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_every_runtime_package_is_listed_for_installation():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"streamjob." + str(p.parent.relative_to(ROOT)).replace("/", ".")
               for p in (ROOT / "runtime").rglob("*.py") if "__pycache__" not in p.parts}
    assert on_disk <= listed, on_disk - listed


def test_public_names_are_importable_from_streamjob_runtime():
    from streamjob.runtime import (  # noqa: F401
        KeyedProcessFunction,
        ProcessFunction,
        StreamExecutionEnvironment,
    )


def test_every_public_name_resolves_and_importing_the_package_loads_none_of_them():
    # The names load on first use (a worker imports the package for its entry module only).
    code = ("import sys, streamjob.runtime as r\n"
            "assert 'streamjob.runtime.api.datastream' not in sys.modules and 'pyarrow' not in sys.modules\n"
            "missing = [n for n in r.__all__ if getattr(r, n, None) is None]\n"
            "assert not missing, missing\n"
            "assert set(r.__all__) <= set(dir(r))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_without_java_the_run_command_says_how_to_fix_it():
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)  # no java on it
    r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(ROOT / "examples" / "word_count.py")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "Java was not found" in r.stderr and "openjdk-17" in r.stderr


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "streamjob"
    r = subprocess.run([str(script) if script.exists() else "streamjob", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "run" in r.stdout


def test_the_dashboard_files_are_package_data():
    """`pip install .` (not editable) must ship the web dashboard: every file the REST server serves."""
    from fnmatch import fnmatch

    from streamjob.runtime.cluster.rest import DASHBOARD_TYPES

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "streamjob.runtime.cluster"]
    files = [f"dashboard/{p.name}" for p in (ROOT / "runtime" / "cluster" / "dashboard").iterdir()]
    assert {"dashboard/index.html", "dashboard/app.js", "dashboard/style.css"} <= set(files)
    for f in files:
        assert any(fnmatch(f, g) for g in globs), f"{f} is not in pyproject's package-data"
        assert any(f.endswith(ext) for ext in DASHBOARD_TYPES), f"{f}: the REST server does not serve this type"
