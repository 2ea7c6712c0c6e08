"""The shipped Prometheus alerting rules (helm/streamjob-operator/files/alerts.rules.yaml), checked
with the real promtool: syntax (`promtool check rules`), behaviour (`promtool test rules` on the
unit tests in tests/promtool/), and that those unit tests cover every alert both ways.

Metric names the rules use are checked against real scrapes in tests/test_dashboard.py.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest
import yaml

from monitoring_promql import ROOT, RULES_FILE, alert_rules

HERE = os.path.dirname(__file__)
PROMTOOL_TESTS = sorted(glob.glob(os.path.join(HERE, "promtool", "*.test.yaml")))
PROMTOOL = shutil.which("promtool")
RUNBOOK = "https://github.com/streamjob/streamjob/blob/main/docs/operations/runbooks.md#runbook-"
RUNBOOKS_PAGE = os.path.join(HERE, "..", "docs", "operations", "runbooks.md")

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian/Ubuntu: apt-get install prometheus; CI installs it)")


def promtool(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_rules_file_is_plain_rule_file_yaml():
    # The chart embeds the file with .Files.Get into a PrometheusRule's spec: Helm would not render
    # templating inside it, and Prometheus' own templates ({{ $labels.x }}) must reach Prometheus as is.
    text = open(RULES_FILE).read()
    doc = yaml.safe_load(text)
    assert set(doc) == {"groups"}, "top level must be just `groups:` (rule-file format)"
    assert "{{ ." not in text.replace("{{ . }}", ""), "Helm-style {{ .Values... }} templating in the rules file"
    assert "{{-" not in text and "{{ include" not in text and "{{ template" not in text


@needs_promtool
def test_promtool_check_rules():
    proc = promtool("check", "rules", RULES_FILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_every_alert_has_severity_summary_description_and_runbook():
    rules = alert_rules()
    assert len(rules) == len({r["alert"] for r in rules}), "alert names must be unique (runbook anchors)"
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"StreamJob[A-Za-z]+", name), name
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        annotations = rule["annotations"]
        assert annotations["summary"] and "$labels" in annotations["summary"] + annotations["description"], name
        assert "$value" in annotations["summary"] + annotations["description"] or name.endswith(
            ("Down", "Degraded", "NotRunning")), f"{name}: say the value that fired it"
        # docs/operations/runbooks.md's "## Runbook: <Alert>" heading has the anchor runbook-<alert lower
        # case>, on GitHub and in the MkDocs site alike.
        assert annotations["runbook_url"] == RUNBOOK + name.lower(), name


def test_runbook_anchors_exist_in_the_runbooks_page():
    page = open(RUNBOOKS_PAGE).read()
    anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", page, re.M)}
    missing = [r["alert"] for r in alert_rules() if r["annotations"]["runbook_url"].split("#")[1] not in anchors]
    assert not missing, f"docs/operations/runbooks.md has no '## Runbook: <name>' heading for {missing}"
    # and no runbook for an alert that is gone
    names = {r["alert"] for r in alert_rules()}
    stale = [h for h in re.findall(r"^## Runbook: (\S+)$", page, re.M) if h not in names]
    assert not stale, f"runbooks for alerts the rules do not have: {stale}"


def github_anchor(heading: str) -> str:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_github_anchor():
    assert github_anchor("Runbook: StreamJobCheckpointsFailing") == "runbook-streamjobcheckpointsfailing"
    # The documentation site's heading ids (Python-Markdown's toc, as MkDocs uses it) are the same.
    toc = pytest.importorskip("markdown.extensions.toc")
    assert toc.slugify("Runbook: StreamJobCheckpointsFailing", "-") == "runbook-streamjobcheckpointsfailing"


@needs_promtool
def test_promtool_unit_tests_pass():
    assert PROMTOOL_TESTS, "no tests/promtool/*.test.yaml"
    proc = promtool("test", "rules", *PROMTOOL_TESTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(PROMTOOL_TESTS), proc.stdout


def expectations() -> dict[str, dict[str, list[str]]]:
    """alert name -> {"firing": [...], "quiet": [...]}: where the unit tests expect it (file:eval_time)."""
    seen: dict[str, dict[str, list[str]]] = {}
    for path in PROMTOOL_TESTS:
        doc = yaml.safe_load(open(path))
        rule_files = [os.path.normpath(os.path.join(os.path.dirname(path), f)) for f in doc["rule_files"]]
        assert rule_files == [os.path.normpath(RULES_FILE)], f"{path} must test the shipped rules file"
        for group in doc["tests"]:
            for case in group.get("alert_rule_test", []):
                kind = "firing" if case.get("exp_alerts") else "quiet"
                where = f"{os.path.basename(path)}@{case['eval_time']}"
                seen.setdefault(case["alertname"], {"firing": [], "quiet": []})[kind].append(where)
    return seen


def test_every_alert_is_tested_firing_and_not_firing():
    seen = expectations()
    names = {r["alert"] for r in alert_rules()}
    assert not set(seen) - names, f"unit tests for alerts that do not exist: {set(seen) - names}"
    for name in sorted(names):
        assert seen.get(name, {}).get("firing"), f"{name}: no promtool test expects it to fire"
        assert seen.get(name, {}).get("quiet"), f"{name}: no promtool test expects it to stay quiet"


def test_every_alert_with_for_is_tested_just_before_it_fires():
    """The `for` edge: for every alert, some test group expects it quiet less than its `for` (or, without
    one, one evaluation) before the eval_time where it expects it firing."""
    edges: set[str] = set()
    for path in PROMTOOL_TESTS:
        doc = yaml.safe_load(open(path))
        step = seconds(doc.get("evaluation_interval", "1m"))
        for group in doc["tests"]:
            cases = group.get("alert_rule_test", [])
            for case in cases:
                if not case.get("exp_alerts"):
                    continue
                rule = next(r for r in alert_rules() if r["alert"] == case["alertname"])
                window = max(seconds(rule.get("for", "0s")), step)
                fired = seconds(case["eval_time"])
                if any(fired - window <= seconds(c["eval_time"]) < fired for c in cases
                       if c["alertname"] == case["alertname"] and not c.get("exp_alerts")):
                    edges.add(case["alertname"])
    missing = sorted({r["alert"] for r in alert_rules()} - edges)
    assert not missing, f"no quiet expectation within `for` before a firing one for {missing}"


def seconds(duration: str) -> int:
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", duration))


@needs_promtool
@pytest.mark.parametrize("name", [r["alert"] for r in alert_rules()])
def test_unit_tests_catch_an_alert_that_never_fires(name, tmp_path):
    """Mutation check: with this alert's expression replaced by one that is never true, the unit
    tests must fail, so its firing expectations really are checked."""
    doc = yaml.safe_load(open(RULES_FILE))
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                rule["expr"] = "vector(1) == 0"
    mutated_dir = tmp_path / "helm" / "streamjob-operator" / "files"
    mutated_dir.mkdir(parents=True)
    (mutated_dir / "alerts.rules.yaml").write_text(yaml.safe_dump(doc))
    tests_dir = tmp_path / "tests" / "promtool"
    tests_dir.mkdir(parents=True)
    for path in PROMTOOL_TESTS:  # same relative layout, so rule_files points at the mutant
        shutil.copy(path, tests_dir)
    proc = promtool("test", "rules", *sorted(str(p) for p in tests_dir.iterdir()))
    assert proc.returncode != 0, f"the unit tests still pass with {name} never firing"
    assert f"alertname: {name}," in proc.stdout + proc.stderr


@needs_promtool
def test_example_prometheus_config_loads_the_rules():
    proc = promtool("check", "config", os.path.join(ROOT, "examples", "monitoring", "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_example_kubernetes_scrape_configs_honor_labels():
    # Debian's promtool has no Kubernetes service discovery, so this one is only read as YAML.
    doc = yaml.safe_load(open(os.path.join(ROOT, "examples", "monitoring", "prometheus-kubernetes.yml")))
    assert doc["scrape_configs"] and all(c["honor_labels"] is True for c in doc["scrape_configs"])


def test_example_alertmanager_config():
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (Debian: apt-get install prometheus-alertmanager; CI installs it)")
    proc = subprocess.run([amtool, "check-config", os.path.join(ROOT, "examples", "monitoring", "alertmanager.yml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
