"""What the Kubernetes API server does with a CRD's schema, in miniature, for tests without a cluster.

``structural_problems`` checks the rules of structural schemas; ``apply_defaults``, ``strict_validator``
and ``cel_violations`` are the three steps a create or update goes through: defaulting (with pruning
of nulls), OpenAPI validation with field validation Strict, and the ``x-kubernetes-validations``
rules, evaluated with cel-python. ``iterations`` finds what the rules iterate, whose sizes the API
server's cost estimate needs.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator

import celpy
import jsonschema

# The keys a node of a structural schema may have (JSONSchemaProps, less what structural forbids).
_ALLOWED = {"type", "description", "format", "enum", "default", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "minItems", "maxItems",
            "minProperties", "maxProperties", "items", "properties", "additionalProperties", "required",
            "nullable", "example", "externalDocs", "title",
            "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource",
            "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
            "x-kubernetes-validations"}
_TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def nodes(schema: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every schema node with its path (``.spec.job``, ``.spec.pod.env[*]``, ``.spec.config{*}``)."""
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from nodes(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[*]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{*}}")


def structural_problems(schema: dict) -> list[str]:
    """Where ``schema`` (an openAPIV3Schema) breaks Kubernetes' structural schema rules."""
    problems = []
    for path, node in nodes(schema):
        where = path or "<root>"
        unknown = set(node) - _ALLOWED  # $ref, $defs, anyOf/oneOf/allOf/not (we emit none), ...
        if unknown:
            problems.append(f"{where}: not allowed here: {sorted(unknown)}")
        opaque = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
        if node.get("type") not in _TYPES and not opaque:
            problems.append(f"{where}: no type")
        if node.get("x-kubernetes-preserve-unknown-fields") is False:
            problems.append(f"{where}: x-kubernetes-preserve-unknown-fields must be true or absent")
        extra = node.get("additionalProperties")
        if extra is not None and not isinstance(extra, dict):
            problems.append(f"{where}: additionalProperties must be a schema, not {extra!r}")
        if extra is not None and "properties" in node:
            problems.append(f"{where}: properties and additionalProperties are exclusive")
        if node.get("type") == "array" and not isinstance(node.get("items"), dict):
            problems.append(f"{where}: an array needs one items schema")
        if node.get("default", 0) is None and not node.get("nullable"):
            problems.append(f"{where}: null default of a non-nullable field")
        # Not a structural rule, but a trap: the API server prunes everything inside such an object.
        if (node.get("type") == "object" and path != ".metadata" and not opaque
                and "properties" not in node and "additionalProperties" not in node):
            problems.append(f"{where}: an object without properties keeps nothing")
        if path == ".metadata" and set(node) - {"type"}:
            problems.append(f"{where}: only metadata.name/generateName may be constrained (not done here)")
    return problems


def apply_defaults(obj, schema: dict):
    """A defaulted copy of ``obj``, as the API server defaults it before validation: a null (of a
    non-nullable field) is pruned, an absent field with a default gets it, and defaulting goes on
    inside the defaults it applied (so ``default: {}`` fills the object's own defaults)."""
    obj = copy.deepcopy(obj)
    _default(obj, schema)
    return obj


def _default(value, schema: dict) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, prop in properties.items():
            if value.get(name) is None and not prop.get("nullable"):
                value.pop(name, None)
                if "default" in prop:
                    value[name] = copy.deepcopy(prop["default"])
        for name, item in value.items():
            sub = properties.get(name, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                _default(item, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])


def strict_validator(schema: dict) -> jsonschema.Validator:
    """A validator of ``schema`` that also refuses unknown fields, as field validation Strict does
    (``kubectl apply``'s default): every object that is neither a map nor opaque gets
    ``additionalProperties: false``."""
    schema = copy.deepcopy(schema)
    for _, node in nodes(schema):
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
    return jsonschema.Draft4Validator(schema)  # OpenAPI v3.0 (the API server's): exclusiveMinimum is a flag


@functools.lru_cache(maxsize=None)
def _program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def is_transition_rule(rule: dict) -> bool:
    return re.search(r"\boldSelf\b", rule["rule"]) is not None


def cel_violations(schema: dict, new, old=None) -> list[str]:
    """The messages of the ``x-kubernetes-validations`` rules ``new`` breaks, each rule with ``self``
    bound to the value at its own node. Transition rules (using ``oldSelf``) run, as in the API
    server, only where an old value exists at that node: never on create. ``new`` and ``old``
    should be defaulted first (rules are written against defaulted objects).

    ``schema`` is a resource's openAPIV3Schema and ``new``/``old`` whole objects: the rules at its root
    see ``self`` = the object (apiVersion, kind, metadata, spec, ...), with, as in the API server,
    only ``metadata.name`` and ``metadata.generateName`` of the metadata."""
    messages: list[str] = []
    _check(schema, new, old, messages, view=_root_view)
    return messages


def _root_view(obj):
    """``obj`` as root-level rules see it: of its metadata only name and generateName."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return obj
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "generateName")}
    return {**obj, "metadata": meta}


def _check(schema: dict, new, old, messages: list[str], view=lambda value: value) -> None:
    """``view``: what the rules here see of a value (the root's see less of the metadata)."""
    for rule in schema.get("x-kubernetes-validations", []):
        activation = {"self": celpy.json_to_cel(view(new))}
        if is_transition_rule(rule):
            if old is None:
                continue
            activation["oldSelf"] = celpy.json_to_cel(view(old))
        result = _program(rule["rule"]).evaluate(activation)
        if isinstance(result, celpy.CELEvalError):  # the API server reports it as an error too
            raise result
        if not result:
            messages.append(rule["message"])
    if isinstance(new, dict):
        # The old value of a field is correlated by name (maps: by key).
        old = old if isinstance(old, dict) else {}
        for name, item in new.items():
            sub = schema.get("properties", {}).get(name, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                _check(sub, item, old.get(name), messages)
    elif isinstance(new, list) and isinstance(schema.get("items"), dict):
        # Plain lists have no old items to correlate with (only listType map/set lists do).
        for item in new:
            _check(schema["items"], item, None, messages)


_MACRO = r"\.(?:all|exists_one|exists|map|filter)\("
_TARGET = re.compile(r"\bself((?:\.[A-Za-z_]\w*)*)" + _MACRO)


def iterations(schema: dict) -> Iterator[tuple[str, str, str, dict | None]]:
    """Each list or map a rule iterates (all/exists/exists_one/map/filter), as (rule, the iterated
    ``self.field...`` as the rule names it, its path, its schema node). The node is None where the
    target is no path of fields under the rule's ``self``: what such a rule iterates is unknown."""
    for path, node in nodes(schema):
        for rule in node.get("x-kubernetes-validations", []):
            text = rule["rule"]
            targets = _TARGET.findall(text)
            if len(targets) != len(re.findall(_MACRO, text)):
                yield text, "?", f"{path}?", None
            for fields in targets:
                target = node
                for name in fields.split(".")[1:]:
                    target = target.get("properties", {}).get(name)
                    if target is None:
                        break
                yield text, f"self{fields}", f"{path}{fields}", target
