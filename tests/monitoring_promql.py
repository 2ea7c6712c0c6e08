"""Helpers for the monitoring tests: the shipped rules and dashboard, and the metric names a PromQL
expression reads (a small lexer, not a parser: it removes what cannot be a metric name, and what
is left that looks like an identifier is one; tests/test_dashboard.py also runs every expression
through promtool, which parses it for real)."""

from __future__ import annotations

import json
import os
import re

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
RULES_FILE = os.path.join(ROOT, "helm", "streamjob-operator", "files", "alerts.rules.yaml")
DASHBOARD_FILE = os.path.join(ROOT, "helm", "streamjob-operator", "files", "dashboard.json")

# Metrics only a job with a KafkaSource exports: the rules' use of them is checked against a real
# Kafka job's scrape in tests/test_metrics.py (the dashboard test's job reads no Kafka).
KAFKA_SOURCE_METRICS = {"streamjob_pending_records"}

KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan", "start", "end"}
# Aggregations may be followed by `by (...)` before their parenthesis, so they are not always
# followed by "(" as functions are.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                "topk", "quantile", "limitk", "limit_ratio"}


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(open(RULES_FILE))
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict:
    return json.load(open(DASHBOARD_FILE))


def panels(dash: dict) -> list[dict]:
    """Every panel, rows' nested panels included."""
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def metric_names(expr: str) -> set[str]:
    s = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', " ", expr)  # strings (label values)
    s = re.sub(r"#[^\n]*", " ", s)  # comments
    s = re.sub(r"\$\{[^}]*\}|\$\w+", " ", s)  # Grafana variables ($__rate_interval, ${job})
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries: [5m], [1h:1m]
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", s):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS or word in AGGREGATIONS:
            continue
        names.add(word)
    return names

