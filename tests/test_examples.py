"""The README's examples run as it says, and give the results they promise.

examples/event_time_windows.py: every window's count equals the views of that page whose event
time falls in it, however out of order they came. examples/checkpointed_counts.py: the walk-through
of the README (run, kill the whole process tree with SIGKILL, resume from the retained checkpoint)
leaves every event counted exactly once in the committed output.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.spark


def streamjob(*args: str, cwd: Path, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", *args], cwd=cwd,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def load_example(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_event_time_windows_count_each_page_per_window(tmp_path):
    proc = streamjob("run", str(EXAMPLES / "event_time_windows.py"), "--parallelism", "2", "--no-progress",
                     cwd=tmp_path)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    got = {}
    for line in out.splitlines():
        row = ast.literal_eval(line.split("> ", 1)[1])  # PrintSink: "<subtask>> <record>"
        got[row["page"], row["window_end"]] = row["views"]
    example = load_example("event_time_windows")
    assert got == example.expected(example.views())


def _newest_checkpoint(root: Path) -> Path | None:
    done = [Path(p).parent for p in glob.glob(str(root / "*" / "chk-*" / "_metadata"))]
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def test_checkpointed_counts_resume_after_a_kill_exactly_once(tmp_path):
    rows = 30_000
    env = {"ROWS": str(rows), "RATE": "2500"}
    first = streamjob("run", str(EXAMPLES / "checkpointed_counts.py"), "--parallelism", "2", "--no-progress",
                      cwd=tmp_path, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        newest = _newest_checkpoint(tmp_path / "checkpoints")
        if newest is not None and int(newest.name.split("-")[1]) >= 3:
            break
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.2)
    else:
        pytest.fail("no third checkpoint within 120 s")
    os.killpg(first.pid, signal.SIGKILL)  # the CLI, its JVM and the tasks: nothing runs a cleanup
    first.communicate()
    resume_from = _newest_checkpoint(tmp_path / "checkpoints")
    second = streamjob("run", str(EXAMPLES / "checkpointed_counts.py"), "--parallelism", "2", "--no-progress",
                       "--from-checkpoint", str(resume_from), cwd=tmp_path, env=env)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-3000:]
    assert f"Restoring from checkpoint {resume_from.name.split('-')[1]}" in err, err[-3000:]

    committed = []
    for path in glob.glob(str(tmp_path / "out" / "counts" / "*")):  # glob skips in-progress (hidden) files
        with open(path) as f:
            committed += [json.loads(line) for line in f]
    assert sorted(r["seq"] for r in committed) == list(range(rows)), "every event once, none twice"
    per_user: dict[int, list[int]] = {}
    for r in committed:
        per_user.setdefault(r["user"], []).append(r["count"])
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in per_user.values()), "counts continue, no gap"
