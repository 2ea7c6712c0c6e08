"""The README's first hour is true: its shell commands run, on a fresh clone, as written.

Every ```bash block of README.md and of the documentation site (docs/**/*.md) carries a marker before
it, `<!-- readme-test: KIND (why) -->`: `local` blocks are run here (a `local` block of docs/ must be
one of the README's, which run on the fresh clone); the others say what they need that a test cannot
have here (a cluster: tests/test_readme_walkthrough.py runs the operator walk-through against the
test API server; a Kafka broker, the image, Prometheus writing /etc, placeholders for the reader's own
job, the whole test suite or a benchmark), and the test that covers them, if any.

What runs, in a `git clone` of this checkout (its committed HEAD) in a temporary directory:

* the quick start's first block, verbatim (`python3 -m venv .venv && .venv/bin/pip install -q -e .
  && .venv/bin/streamjob run examples/word_count.py --parallelism 2`), with one concession to
  time and the network: the clone's new venv sees this venv's installed dependencies (a .pth
  line puts them on its path; PySpark alone is ~300 MB to download), so `pip install -e .` finds
  them installed and installs the clone's own streamjob, fetching only its build backend
  (setuptools, into pip's isolated build environment) as on any machine;
* then, with the venv activated as the README says (`. .venv/bin/activate`), the commands of the
  examples table that need no broker: `streamjob run examples/event_time_windows.py -p 2` (to its
  end) and `streamjob run examples/rolling_sum.py -p 2` (endless: Ctrl-C, as the README says, once
  `streamjob list` shows it RUNNING; it must drain and exit 0).

Left out: checkpointed_counts's kill-and-resume and the Kafka example (tests/test_examples.py runs
both as the table describes them, the latter on the real broker), `.venv/bin/pytest` (the whole
suite). Run time: about a minute (three Spark jobs).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").rglob("*.md"))
KINDS = {"local", "suite", "placeholder", "kafka", "bench", "image", "cluster", "prometheus"}
pytestmark = pytest.mark.spark


def bash_blocks(text: str = README) -> list[tuple[str, str]]:
    """(kind, body) of every ```bash block, the kind from the marker right before it ('' if none)."""
    blocks = []
    for match in re.finditer(r"(?:<!-- readme-test: (\w+)[^\n]*-->\n)?```bash\n(.*?)```", text, re.S):
        blocks.append((match.group(1) or "", match.group(2)))
    return blocks


def test_every_shell_block_says_whether_it_runs_here():
    pages = {"README.md": README} | {str(p.relative_to(REPO)): p.read_text() for p in DOCS}
    blocks = {name: bash_blocks(text) for name, text in pages.items()}
    assert sum(len(b) for b in blocks.values()) >= 10
    unmarked = [f"{name}: {body.splitlines()[0]}" for name, b in blocks.items() for kind, body in b
                if kind not in KINDS]
    assert not unmarked, f"shell blocks without a known readme-test marker: {unmarked}"
    assert [kind for kind, _ in blocks["README.md"]].count("local") >= 1
    # The fresh-clone test runs the README's local blocks; one in docs/ is covered only as one of them.
    readme_local = {body.strip() for kind, body in blocks["README.md"] if kind == "local"}
    uncovered = [f"{name}: {body.splitlines()[0]}" for name, b in blocks.items() if name != "README.md"
                 for kind, body in b if kind == "local" and body.strip() not in readme_local]
    assert not uncovered, f"`local` shell blocks of docs/ that no test runs (not the README's): {uncovered}"


def activation() -> str:
    """The README's way to activate the virtualenv (the line every later `streamjob` assumes)."""
    match = re.search(r"activate the virtualenv first,\s+`([^`]+)`", README)
    assert match, "the README no longer says how to activate the virtualenv"
    return match.group(1)


def table_command(example: str) -> str:
    match = re.search(rf"^\| `(streamjob run examples/{example}\.py[^`]*)` \|", README, re.M)
    assert match, f"the examples table has no command for {example}"
    return match.group(1)


def test_the_quick_start_runs_on_a_fresh_clone(tmp_path):
    assert shutil.which("git") and shutil.which("python3")
    clone = tmp_path / "streamjob"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    # The deps of this venv, visible to the clone's (see the module docstring): a venv made now, so
    # that the README's `python3 -m venv .venv` finds it and keeps it.
    subprocess.run(["python3", "-m", "venv", ".venv"], cwd=clone, check=True, timeout=120)
    site = next((clone / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "zz_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1",
               STREAMJOB_STATE_DIR=str(tmp_path / "state"),
               PATH=os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                    if not p.startswith(str(Path(sys.executable).parent))))

    def sh(command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=timeout)

    quick = [body.strip() for kind, body in bash_blocks() if kind == "local"]
    assert quick[0].startswith("python3 -m venv .venv && .venv/bin/pip install -q -e . && "), quick
    r = sh(quick[0])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^\d+> \('to', 4\)$", r.stdout, re.M) and re.search(r"^\d+> \('be', 2\)$", r.stdout, re.M), \
        r.stdout[-3000:]
    activate = activation()
    r = sh(f"{activate} && python -c 'import streamjob.runtime; print(streamjob.runtime.__file__)' && command -v streamjob")
    assert r.returncode == 0, r.stderr
    module, script = r.stdout.split()
    assert module.startswith(str(clone)) and script == str(clone / ".venv" / "bin" / "streamjob"), r.stdout

    # Event time: a bounded job, each window's count printed once.
    r = sh(f"{activate} && {table_command('event_time_windows')}")
    assert r.returncode == 0, r.stderr[-3000:]
    windows = re.findall(r"^\d+> .*'window_end': (\d+)", r.stdout, re.M)
    assert windows and len(windows) == len(set(re.findall(r"^\d+> (.*)$", r.stdout, re.M))), r.stdout[-2000:]

    # The endless rolling sum: Ctrl-C (SIGINT to the foreground process group) once it runs: `streamjob
    # list` says RUNNING (its job manager serves) and records reach the sink (its in-progress file: the
    # tasks run; a Ctrl-C before that ends the run at once, as the README says, with exit 130).
    out_dir = clone / "out" / "rolling_sum"
    proc = subprocess.Popen(["bash", "-c", f"{activate} && exec {table_command('rolling_sum')}"], cwd=clone, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "(RUNNING)" not in sh(f"{activate} && streamjob list", timeout=60).stdout:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "rolling_sum not RUNNING in `streamjob list` within 180 s"
            time.sleep(1)
        while not (out_dir.exists() and any(out_dir.rglob("*"))):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"nothing in {out_dir} within 180 s"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "Stopped by Ctrl-C: every record the sources emitted was processed" in err + out, err[-3000:]
    committed = [p for p in out_dir.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert committed, "no output committed"
