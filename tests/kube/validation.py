"""The API server's own checks of a Pod that no schema expresses, as kube-apiserver words them.

OpenAPI schemas (kubernetes-validate) check types and required fields; the uniqueness and
reference rules below live in kube-apiserver's Go code (pkg/apis/core/validation: ValidatePodSpec,
validateVolumes, ValidateVolumeMounts, validateContainers). They are the ones a generated pod gets
wrong: Spark adds its own volumes and mounts to an executor pod template (a `spark-local-dir-N`
emptyDir at each SPARK_LOCAL_DIRS entry, `spark-conf-volume-exec` at /opt/spark/conf), so a
template that mounts the same path is refused when Spark creates the executor. The test API
server runs these on every Pod it creates; tests can call them on a manifest directly.
Not covered: resource quantities, probes, security contexts, ports beyond name uniqueness.
"""

from __future__ import annotations

import re
from typing import Any

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_problem(value: Any) -> str | None:
    if not isinstance(value, str) or len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        return "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must " \
               "start and end with an alphanumeric character"
    return None


def pod_problems(pod: dict[str, Any]) -> list[str]:
    """Field errors in kube-apiserver's words ("path: Invalid value: ...: why"); empty when valid."""
    problems: list[str] = []
    name = (pod.get("metadata") or {}).get("name")
    if name and (len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name)):
        problems.append(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain is required')
    spec = pod.get("spec") or {}
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        vname = volume.get("name")
        if (why := _label_problem(vname)) is not None:
            problems.append(f'spec.volumes[{i}].name: Invalid value: "{vname}": {why}')
        elif vname in volumes:
            problems.append(f'spec.volumes[{i}].name: Duplicate value: "{vname}"')
        volumes.add(vname)
    if not spec.get("containers"):
        problems.append("spec.containers: Required value")
    container_names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(kind) or []):
            where = f"spec.{kind}[{i}]"
            cname = container.get("name")
            if (why := _label_problem(cname)) is not None:
                problems.append(f'{where}.name: Invalid value: "{cname}": {why}')
            elif cname in container_names:
                problems.append(f'{where}.name: Duplicate value: "{cname}"')
            container_names.add(cname)
            paths: set[str] = set()
            for j, mount in enumerate(container.get("volumeMounts") or []):
                mwhere = f"{where}.volumeMounts[{j}]"
                if mount.get("name") not in volumes:
                    problems.append(f'{mwhere}.name: Not found: "{mount.get("name")}"')
                path = mount.get("mountPath")
                if not path:
                    problems.append(f"{mwhere}.mountPath: Required value")
                elif path in paths:
                    problems.append(f'{mwhere}.mountPath: Invalid value: "{path}": must be unique')
                paths.add(path)
            ports: set[str] = set()
            for j, port in enumerate(container.get("ports") or []):
                pname = port.get("name")
                if pname and pname in ports:
                    problems.append(f'{where}.ports[{j}].name: Duplicate value: "{pname}"')
                ports.add(pname)
    return problems


def pod_invalid_message(pod: dict[str, Any], problems: list[str]) -> str:
    """The Status message the API server answers a 422 with."""
    detail = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    return f'Pod "{(pod.get("metadata") or {}).get("name", "")}" is invalid: {detail}'
