"""Minimal JSON schemas of the Prometheus Operator kinds the chart renders (monitoring.coreos.com/v1).

kubernetes-validate knows only Kubernetes' own kinds, so ServiceMonitor, PodMonitor and
PrometheusRule are checked against these instead: written by hand from the Prometheus Operator's
API reference, for the fields the chart uses only, and strict (``additionalProperties: false``),
so a misspelt or misplaced field in a template fails the test. They are not the operator's CRDs:
a field the real CRD refuses but these accept (or a newer CRD version's change) is not caught.
"""

from __future__ import annotations

from typing import Any

# Prometheus' duration: units from ms to y, largest first, e.g. 1h30m, 30s (monitoringv1.Duration).
DURATION = {"type": "string",
            "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
DNS_SUBDOMAIN = {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"}

METADATA = {
    "type": "object", "additionalProperties": False, "required": ["name", "namespace"],
    "properties": {"name": DNS_SUBDOMAIN, "namespace": DNS_SUBDOMAIN, "labels": STRING_MAP,
                   "annotations": STRING_MAP},
}
LABEL_SELECTOR = {
    "type": "object", "additionalProperties": False, "minProperties": 1,
    "properties": {
        "matchLabels": STRING_MAP,
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["key", "operator"],
            "properties": {"key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                           "values": {"type": "array", "items": {"type": "string"}}}}},
    },
}
# NamespaceSelector: `any: true` or a list of names (the Prometheus Operator's own type, not a LabelSelector).
NAMESPACE_SELECTOR = {
    "type": "object", "additionalProperties": False, "minProperties": 1,
    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "minItems": 1, "items": DNS_SUBDOMAIN}},
}
ENDPOINT = {
    "type": "object", "additionalProperties": False, "required": ["port"],
    "properties": {"port": {"type": "string", "minLength": 1}, "path": {"type": "string", "pattern": "^/"},
                   "honorLabels": {"type": "boolean"}, "interval": DURATION, "scrapeTimeout": DURATION},
}


def _kind(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": kind},
                           "metadata": METADATA, "spec": spec}}


RULE = {
    "type": "object", "additionalProperties": False, "required": ["expr"],
    # alerting or recording, not both (the Prometheus Operator's validation, and Prometheus').
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {"alert": {"type": "string", "minLength": 1}, "record": {"type": "string", "minLength": 1},
                   "expr": {"type": ["string", "integer"]}, "for": DURATION, "keep_firing_for": DURATION,
                   "labels": STRING_MAP, "annotations": STRING_MAP},
}
RULE_GROUP = {
    "type": "object", "additionalProperties": False, "required": ["name", "rules"],
    "properties": {"name": {"type": "string", "minLength": 1}, "interval": DURATION, "query_offset": DURATION,
                   "limit": {"type": "integer", "minimum": 0}, "labels": STRING_MAP,
                   "partial_response_strategy": {"type": "string"},
                   "rules": {"type": "array", "items": RULE}},
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _kind("ServiceMonitor", {
        "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
        "properties": {"selector": LABEL_SELECTOR, "namespaceSelector": NAMESPACE_SELECTOR,
                       "endpoints": {"type": "array", "minItems": 1, "items": ENDPOINT}},
    }),
    "PodMonitor": _kind("PodMonitor", {
        "type": "object", "additionalProperties": False, "required": ["selector", "podMetricsEndpoints"],
        "properties": {"selector": LABEL_SELECTOR, "namespaceSelector": NAMESPACE_SELECTOR,
                       "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": ENDPOINT}},
    }),
    "PrometheusRule": _kind("PrometheusRule", {
        "type": "object", "additionalProperties": False, "required": ["groups"],
        "properties": {"groups": {"type": "array", "minItems": 1, "items": RULE_GROUP}},
    }),
}
