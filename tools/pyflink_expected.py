"""Run the PyFlink programs of tests/pyflink_parity/ with real PyFlink and keep what they print.

    python -m venv /tmp/pyflink && /tmp/pyflink/bin/pip install apache-flink==1.20.5
    python tools/pyflink_expected.py --python /tmp/pyflink/bin/python [program.py ...]

Each program's standard output is written to tests/pyflink_parity/expected/<program>.out; the
test (tests/test_pyflink_parity.py) runs the same program, its imports changed to streamjob's
(streamjob.runtime.api.pyflink_names.port_imports), with `streamjob run`, and compares. PyFlink
needs Java (11 or 17) and takes ~30 s per program (a local mini cluster and Beam workers).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(ROOT, "tests", "pyflink_parity")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", required=True, help="an interpreter with apache-flink installed")
    parser.add_argument("programs", nargs="*", help="programs to run (default: all of tests/pyflink_parity)")
    args = parser.parse_args()
    version = subprocess.run([args.python, "-c", "import pyflink.version as v; print(v.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(args.python)) + os.pathsep + env.get("PATH", "")  # Beam workers
    for program in args.programs or sorted(glob.glob(os.path.join(PROGRAMS, "*.py"))):
        name = os.path.splitext(os.path.basename(program))[0]
        program = os.path.abspath(program)
        r = subprocess.run([args.python, program], capture_output=True, text=True, env=env, cwd=PROGRAMS, timeout=900)
        if r.returncode != 0:
            sys.exit(f"{name}: PyFlink {version} failed:\n{r.stderr[-4000:]}")
        with open(os.path.join(PROGRAMS, "expected", f"{name}.out"), "w", encoding="utf-8") as f:
            f.write(r.stdout)
        print(f"{name}: {len(r.stdout.splitlines())} lines (PyFlink {version})")
    with open(os.path.join(PROGRAMS, "expected", "PYFLINK_VERSION"), "w", encoding="utf-8") as f:
        f.write(f"{version}\n")


if __name__ == "__main__":
    main()
