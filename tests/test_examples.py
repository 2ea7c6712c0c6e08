"""The examples of the README (and docs/index.md) run as it says, and give the results they promise.

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


def test_collatz_steps_loop_until_each_number_reaches_1_and_the_job_ends_by_itself(tmp_path):
    proc = streamjob("run", str(EXAMPLES / "collatz_steps.py"), "-p", "2", "--no-progress", "--", "--up-to", "100",
                     cwd=tmp_path)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    got = {}
    for line in out.splitlines():
        text = line.split("> ", 1)[-1]  # PrintSink: "<subtask>> <record>"
        start, steps = text.split(" reaches 1 in ")
        got[int(start)] = int(steps.split()[0])

    def steps_of(n):
        k = 0
        while n != 1:
            n, k = (n // 2 if n % 2 == 0 else 3 * n + 1), k + 1
        return k

    assert got == {n: steps_of(n) for n in range(1, 101)}


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
    before = {p.name for p in (tmp_path / "out" / "counts").iterdir()}
    # Resumed as the operator redeploys a job its autoscaler had rescaled: the counts (and the files, chained
    # to them) at 3.
    second = streamjob("run", str(EXAMPLES / "checkpointed_counts.py"), "--parallelism", "2", "--no-progress",
                       "--from-checkpoint", str(resume_from), "--conf",
                       "pipeline.jobvertex-parallelism-overrides=count:3", cwd=tmp_path, env=env)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-3000:]
    assert f"Restoring from checkpoint {resume_from.name.split('-')[1]}" in err, err[-3000:]
    written = [p.name.split("-") for p in (tmp_path / "out" / "counts").iterdir() if p.name not in before]
    assert {int(part[-2]) for part in written if not part[0].startswith(".")} == {0, 1, 2}, written

    committed = []
    for path in glob.glob(str(tmp_path / "out" / "counts" / "*")):  # glob skips in-progress (hidden) files
        with open(path) as f:
            committed += [json.loads(line) for line in f]
    assert sorted(r["seq"] for r in committed) == list(range(rows)), "every event once, none twice"
    per_user: dict[int, list[int]] = {}
    for r in committed:
        per_user.setdefault(r["user"], []).append(r["count"])
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in per_user.values()), "counts continue, no gap"


def test_kafka_click_counts_are_exact_on_the_real_broker(kafka_broker, tmp_path):
    """The Operations Playground job of the README's walk-through, bounded: the generator's 3 windows
    of clicks in, 1000 per page and window out (read_committed), each once; --verify agrees."""
    from kafka_util import unique_topic

    generator, job = load_example("kafka_click_generator"), load_example("kafka_click_counts")
    bootstrap, clicks, counts = kafka_broker.bootstrap, unique_topic("input"), unique_topic("output")
    generator.ensure_topics(bootstrap, [clicks, counts])
    start = 1_700_000_010_000  # a window boundary
    assert generator.generate(bootstrap, clicks, windows=3, rate=0, start_ms=start) == 3 * 6 * 1000
    proc = streamjob("run", str(EXAMPLES / "kafka_click_counts.py"), "-p", "2", "--no-progress", "--",
                     "--bootstrap", bootstrap, "--input-topic", clicks, "--output-topic", counts, "--bounded",
                     "--checkpoints", str(tmp_path / "chk"), cwd=tmp_path)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    got = sorted((c["windowStart"], c["windowEnd"], c["page"], c["count"]) for c in job.read_counts(bootstrap, counts))
    assert got == sorted((start + w * 15_000, start + (w + 1) * 15_000, page, 1000)
                         for w in range(3) for page in generator.PAGES)
    verify = subprocess.run([sys.executable, str(EXAMPLES / "kafka_click_counts.py"), "--verify", "--bootstrap",
                             bootstrap, "--output-topic", counts], capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and "3 windows, 18 counts: exact" in verify.stdout, verify.stdout + verify.stderr


def test_kafka_click_counts_verify_finds_what_is_wrong():
    """--verify's check: a count off, a window twice, a page or a whole window missing."""
    check = load_example("kafka_click_counts").check
    good = [{"windowStart": w * 15_000, "page": p, "count": 1000} for w in range(3) for p in "ab"]
    assert check(good, 2) == []
    assert check(good + [good[0]], 2) == ["window 0 of a is in the output twice"]
    assert check([{**c, "count": 999} if c is good[1] else c for c in good], 2) == [
        "window 0 of b: 999 clicks, not 1000"]
    assert check(good[:-1], 2) == ["window 30000: 1 of 2 pages in the output"]
    assert check([c for c in good if c["windowStart"] != 15_000], 2) == ["window 15000: 0 of 2 pages in the output"]
