"""PyFlink programs, with only their imports changed, print what real PyFlink prints for them.

The programs of tests/pyflink_parity/ are written for PyFlink (``from pyflink... import``). Their
expected output (tests/pyflink_parity/expected/*.out) was made by running them with real PyFlink
(apache-flink 1.20.5 from PyPI, its local mini cluster, Java 17) by tools/pyflink_expected.py: it is
PyFlink's own output, not ours written down. Here each program's imports are changed the way a
user ports one (``pyflink_names.port_imports``) and it runs on streamjob: `streamjob run` for the
first, in-process on the tests' shared local Spark for the others (the same code path, without a
JVM start each). Lines from several sinks interleave differently from run to run in both systems,
so they are compared sorted; every line is compared whole.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from conftest import run_cli
from streamjob.runtime.api.pyflink_names import port_imports

PROGRAMS = Path(__file__).parent / "pyflink_parity"
EXPECTED = PROGRAMS / "expected"


def ported(name: str, tmp_path: Path) -> Path:
    source = (PROGRAMS / f"{name}.py").read_text()
    assert "from pyflink" in source and "streamjob" not in source  # a PyFlink program as PyFlink runs it
    path = tmp_path / f"{name}.py"
    path.write_text(port_imports(source))
    return path


def expected(name: str) -> list[str]:
    return sorted((EXPECTED / f"{name}.out").read_text().splitlines())


def test_expected_outputs_come_from_real_pyflink():
    assert (EXPECTED / "PYFLINK_VERSION").read_text().strip() == "1.20.5"
    for program in PROGRAMS.glob("*.py"):
        assert (EXPECTED / f"{program.stem}.out").read_text().strip(), program.stem


def test_print_formats_by_streamjob_run(tmp_path):
    """print() of typed and untyped streams: str(value) without a declared type (a Row as its repr),
    +I[a,1] for row types, Java's toString for the rest (true, 1.1E7, (a,1), {x=0, ...})."""
    r = run_cli("run", str(ported("print_formats", tmp_path)), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert sorted(line for line in r.stdout.splitlines() if "> " in line) == expected("print_formats")


def test_semantics_by_streamjob_run(tmp_path):
    """The same program as one `streamjob run`: its first jobs run at parallelism 1, the later ones at 2,
    so the embedded local Spark the first started (no --master) is started again with 2 slots, as
    PyFlink's local mini cluster runs them; user functions' print() reaches the run's stdout."""
    r = run_cli("run", str(ported("semantics", tmp_path)), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == expected("semantics")


@pytest.mark.parametrize("name", ["count_windows", "keyed_co_functions", "names_and_arguments", "collect",
                                  "operator_parallelism", "semantics"])
def test_pyflink_program_prints_what_pyflink_prints(name, tmp_path, spark_slots, capfd):
    runpy.run_path(str(ported(name, tmp_path)), run_name="__main__")
    out = capfd.readouterr().out
    assert sorted(out.splitlines()) == expected(name)
