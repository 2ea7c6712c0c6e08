"""The web dashboard the job manager serves at ``/``, in real headless Chromium (Debian's ``chromium``,
driven by Playwright), against real jobs on local Spark.

Against a running job with a REST token: the page asks for the token, then shows the job graph with
numbers that change, a completed checkpoint, and its savepoint button takes a savepoint (checked over
the REST API and on disk); its stop button drains the job. Against a failing job run as a user runs it
(``streamjob run job.py``): the exception shows with the user's traceback, user text with markup in it
stays text, and its cancel button cancels.
The page must run without a console error (a CSP violation is one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from jobs import counting

CHROMIUM = "/usr/bin/chromium"
TOKEN = "dashboard-token"
# Set to a path to keep the screenshot of the running job's page (docs/dashboard.png is made this way).
SCREENSHOT = os.environ.get("STREAMJOB_DASHBOARD_SCREENSHOT")


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extras")
    with sync_api.sync_playwright() as p:
        # Playwright's own browser download cannot run here; Debian's build speaks the same protocol.
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    problems: list[str] = []
    # The browser logs every 401 (before the token) and refused connection (after the job) as an error;
    # anything else (a script error, a Content-Security-Policy violation) is a problem.
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
          if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.problems = problems
    yield pg
    context.close()


def rest(url: str, path: str, token: str | None = TOKEN) -> dict:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def rest_url(client) -> str:
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 60
    while (client.job_manager.rest is None or client.job_manager.rest.url is None) and time.monotonic() < deadline:
        time.sleep(0.05)
    return client.job_manager.rest.url


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_dashboard_shows_a_running_job_and_takes_a_savepoint(spark_slots, page, tmp_path):
    from playwright.sync_api import expect

    savepoints = tmp_path / "savepoints"
    env = counting.build(str(tmp_path / "out"), str(tmp_path / "checkpoints"), 10_000_000, 3_000, interval_ms=300,
                         parallelism=2, event_time=True,
                         conf={"rest.auth.token": TOKEN, "execution.checkpointing.savepoint-dir": str(savepoints)})
    client = env.execute_async("counting")
    try:
        url = rest_url(client)
        page.goto(url + "/")
        # The files come without a token; the API does not: the page asks for it once.
        expect(page.locator("#token-form")).to_be_visible()
        page.fill("#token-input", TOKEN)
        page.click("#token-form button[type=submit]")
        expect(page.locator("#token-form")).to_be_hidden()
        expect(page.locator("#job-name")).to_have_text("counting")
        expect(page.locator("#job-state")).to_have_text("RUNNING")
        assert page.evaluate("sessionStorage.getItem('streamjob.rest-token')") == TOKEN

        # -- the job graph: two tasks (the source chained with its watermarks; the keyed process with the sink)
        expect(page.locator("#graph .vertex")).to_have_count(2)
        expect(page.locator("#graph .vertex").nth(1).locator(".op-name")).to_have_text(
            ["KeyedProcess", "Sink: FileSink(jsonl)"])
        expect(page.locator("#graph .edge-label")).to_have_text("HASH('key')")
        expect(page.locator("#graph path.edge")).to_have_count(1)

        # -- live numbers: records in of the keyed process, read twice, grow; its rate, watermark, back pressure
        row = page.locator("#operators tbody tr", has_text="KeyedProcess")
        expect(row.locator("td.records-in")).not_to_have_text("0", timeout=30_000)
        first = number(row.locator("td.records-in").inner_text())
        time.sleep(2.0)
        second = number(row.locator("td.records-in").inner_text())
        assert second > first > 0, (first, second)
        expect(row.locator("td").nth(3)).to_have_text(re.compile(r"^[\d.]+k?/s$"))
        expect(row.locator("td").nth(3)).not_to_have_text("0/s")
        expect(row.locator("td").nth(6)).to_have_text(re.compile(r"^1970-01-01 00:00:\d\d\.\d{3}$"))  # row i at i ms
        expect(row.locator("td").nth(7)).to_have_text(re.compile(r"^(OK|LOW|HIGH) \d+%$"))
        expect(page.locator("#graph .vertex").nth(1).locator(".rate-in").first).to_have_text(re.compile(r"k?/s$"))
        # busy / back-pressured / idle per subtask (Flink's task time metrics), and each vertex's busy share,
        # the colour of its box
        expect(page.locator("#subtasks tbody tr")).to_have_count(4)  # 2 tasks x 2 subtasks
        times = page.locator("#subtasks tbody tr").first.locator("td")
        expect(times.nth(2)).to_have_text(re.compile(r"^\d+$"))
        expect(times.nth(5)).to_have_text(re.compile(r"^(busy|backPressured|idle)$"))
        expect(page.locator("#graph .vertex").nth(1).locator(".busy")).to_have_text(re.compile(r"^busy \d+%$"))
        assert page.locator("#graph .vertex").nth(1).evaluate("e => e.style.background") != ""

        # -- checkpoint history: a completed one with its numbers
        done = page.locator("#checkpoints tbody tr.status-completed").first
        expect(done).to_be_visible(timeout=30_000)
        expect(done.locator("td.status")).to_have_text("COMPLETED")
        expect(done.locator("td").nth(5)).to_have_text(re.compile(r"^[\d.]+ (B|KiB|MiB)$"))
        expect(page.locator("#checkpoint-summary")).to_contain_text("completed, 0 failed")

        # -- the savepoint button: a savepoint completes (over the REST API, and its _metadata is on disk)
        page.click("#btn-savepoint")
        expect(page.locator("#message")).to_contain_text("Savepoint")
        row = page.locator("#savepoints tbody tr.status-completed")
        expect(row).to_have_count(1, timeout=30_000)
        path = row.locator("td.path").inner_text()
        listed = rest(url, "/v1/savepoints")["savepoints"]
        assert [(s["status"], s["path"]) for s in listed] == [("COMPLETED", path)]
        assert path.startswith(f"file://{savepoints}/savepoint-")
        assert os.path.isfile(path.removeprefix("file://") + "/_metadata")
        expect(page.locator("#exceptions")).to_have_text("No task failed.")

        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if SCREENSHOT:
            shutil.copyfile(shot, SCREENSHOT)

        # A reload keeps the token (sessionStorage): no second prompt.
        page.reload()
        expect(page.locator("#job-state")).to_have_text("RUNNING")
        expect(page.locator("#token-form")).to_be_hidden()

        # -- the stop button (after a confirmation): sources end, everything drains, the job finishes
        page.once("dialog", lambda d: d.accept())
        page.click("#btn-stop")
        expect(page.locator("#message")).to_contain_text("Stopping")
        client.get_job_execution_result(60)
        assert client.get_job_status() == "FINISHED"
        assert page.problems == []
    finally:
        if not client._finished.is_set():
            client.cancel()
            try:
                client.get_job_execution_result(60)
            except Exception:  # noqa: BLE001 - canceled on purpose
                pass


class Run:
    """``streamjob run`` of a job file in a subprocess, as a user runs it (the traceback of a function of
    the job file then names that file and line)."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def wait_for(self, words: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if words in line:
                    return line
            assert self.proc.poll() is None, "".join(self.lines)[-3000:]
            time.sleep(0.1)
        raise AssertionError(f"no {words!r} within {timeout} s:\n{''.join(self.lines)[-3000:]}")


def test_dashboard_shows_the_users_traceback_and_cancels(page):
    from playwright.sync_api import expect

    job_file = os.path.join(os.path.dirname(__file__), "jobs", "bad_rows.py")
    job = Run(job_file, "--no-progress")
    try:
        url = job.wait_for("REST API and metrics at").rsplit(" at ", 1)[1].strip()
        page.goto(url + "/")  # no token configured: no prompt
        expect(page.locator("#job-name")).to_have_text("<script>alert(1)</script> job")
        expect(page.locator("#token-form")).to_be_hidden()
        expect(page.locator("#checkpoint-summary")).to_have_text(re.compile("^Checkpointing is off"))

        root = page.locator("#exceptions .attempt .failure.root").first
        expect(root).to_be_visible(timeout=30_000)
        expect(root.locator("summary")).to_contain_text(
            "operator '<i>check</i> & parse' (subtask 1/1) raised ValueError: row 40 is <b>not</b> valid "
            "<img src=x onerror=\"document.title='pwned'\">")
        trace = root.locator("pre.traceback").inner_text()
        # the user's own file, line and source line (the job file's function, shipped as <dynamic-code>)
        assert f'File "{job_file}", line 13, in check_row' in trace, trace
        assert 'raise ValueError("row 40 is <b>not</b> valid' in trace, trace
        expect(page.locator("#operators tbody tr").nth(1).locator("td").first).to_have_text("<i>check</i> & parse")
        # user text stayed text: no element came from it
        assert page.locator("img, main b, main i, body script:not([src])").count() == 0
        assert page.title() != "pwned"
        doc = rest(url, "/v1/exceptions", token=None)
        assert doc["history"][0]["root"]["operator"] == "<i>check</i> & parse"

        # -- the cancel button (after a confirmation)
        page.once("dialog", lambda d: d.accept())
        expect(page.locator("#btn-cancel")).to_be_enabled()
        page.click("#btn-cancel")
        expect(page.locator("#message")).to_contain_text("Canceling")
        assert job.proc.wait(60) != 0
        assert "cancel" in "".join(job.lines).lower(), "".join(job.lines)[-3000:]
        assert page.problems == []
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait(30)


def test_dashboard_cancel_with_checkpoints_in_flight_completes_nothing_after_it_and_resumes_exactly(page, tmp_path):
    """The cancel button fences the attempt as `streamjob cancel` does (tests/test_stop_resume.py): with a
    checkpoint every 0.3 s and a slow map before the exactly-once FileSink, the checkpoint the job's end names
    is its newest, and resuming it commits every row once."""
    from playwright.sync_api import expect
    from test_stop_resume import JOB, _checkpoint_ids, committed

    rows, out, checkpoints, markers = 3_000, tmp_path / "out", tmp_path / "checkpoints", tmp_path / "markers"
    job = Run(str(JOB), "--no-progress", "--", str(out), str(checkpoints), str(rows), "20", "10", str(markers),
              env={"RETENTION": "RETAIN_ON_CANCELLATION", "CHECKPOINT_MS": "300"})
    try:
        url = job.wait_for("REST API and metrics at", 240).rsplit(" at ", 1)[1].strip()
        deadline = time.monotonic() + 120
        while max(_checkpoint_ids(checkpoints), default=0) < 3:
            assert job.proc.poll() is None and time.monotonic() < deadline, "".join(job.lines)[-3000:]
            time.sleep(0.05)
        page.goto(url + "/")
        expect(page.locator("#job-state")).to_have_text("RUNNING")
        page.once("dialog", lambda d: d.accept())
        page.click("#btn-cancel")
        expect(page.locator("#message")).to_contain_text("Canceling")
        assert job.proc.wait(120) == 1
        text = "".join(job.lines)
        m = re.search(r"Checkpoint (\d+) retained at (\S+/chk-\d+): resume with `", text)
        assert m, text[-3000:]
        assert max(_checkpoint_ids(checkpoints)) == int(m.group(1)), (sorted(_checkpoint_ids(checkpoints)), text[-3000:])
        assert page.problems == []
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait(30)
    before = committed(out)
    assert before == list(range(len(before))) and len(before) < rows
    r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress",
                        "--from-checkpoint", m.group(2), "--", str(out), str(tmp_path / "ck2"), str(rows), "0", "100",
                        str(markers)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert committed(out) == list(range(rows))


def test_dashboard_looks_a_key_up_in_queryable_state(page, tmp_path):
    """A lookup box per queryable state: the value the REST API gives, with where it came from."""
    from playwright.sync_api import expect

    job_file = os.path.join(os.path.dirname(__file__), "jobs", "queryable_counts.py")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps({"user": f"u{i % 4}", "n": i}) + "\n"
                                                      for i in range(400)))
    job = Run(job_file, "--no-progress", "--", str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck"),
              "hashmap", str(tmp_path / "kill"))
    try:
        url = job.wait_for("REST API and metrics at", 240).rsplit(" at ", 1)[1].strip()
        deadline = time.monotonic() + 120

        def counted() -> object:
            try:  # 404 until the function created its state, 503 until every task runs
                return rest(url, "/v1/state/counts?key=u1", token=None).get("value")
            except urllib.error.HTTPError:
                return None

        while counted() != 100:
            assert job.proc.poll() is None and time.monotonic() < deadline, "".join(job.lines)[-3000:]
            time.sleep(0.2)
        page.goto(url + "/")
        form = page.locator('#queryable form[data-name="counts"]')
        expect(form).to_be_visible(timeout=30_000)
        expect(page.locator("#queryable form")).to_have_count(4)  # counts, latest, parity, recent
        form.locator("input").fill("u1")
        form.locator("button").click()
        expect(form.locator("output")).to_have_text(re.compile(r"^100  \(subtask \d, key group \d+, at or after "
                                                               r"checkpoint \d+\)$"))
        form.locator("input").fill("nobody")
        form.locator("button").click()
        expect(form.locator("output")).to_have_text("no value for this key")
        latest = page.locator('#queryable form[data-name="latest"]')
        latest.locator("input").fill("abc")
        latest.locator("button").click()
        expect(latest.locator("output")).to_contain_text("Failed: key 'abc': expected a key of type Integer")
        assert page.problems == []
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait(30)
