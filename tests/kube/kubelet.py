"""A fake kubelet: runs the Pods stored in the test API server as local processes.

Kubernetes cannot run pods here (no cluster, no container runtime), so for end-to-end tests this
plays the node: it polls the API server (tests/kube/apiserver.py) for Pods and, for each one,

* starts every container's `command` + `args` as a local subprocess (in its own process group),
  with the test's environment plus the container's `env`/`envFrom`, where `valueFrom` resolves
  fieldRef (metadata.name/namespace/uid/labels/annotations, spec.nodeName, status.podIP and
  status.hostIP -> 127.0.0.1), secretKeyRef and configMapKeyRef (data and stringData);
  `python`/`python3` as the command run this interpreter (sys.executable); an image with no
  command runs `images[image]` if given, else the container fails (reason "ContainerCannotRun");
  an image in `unpullable` never starts: the container waits with reason ImagePullBackOff and the
  pod stays Pending, as when a registry has no such image;
* materialises configMap, secret and emptyDir volumes into a temporary directory, and gives each
  container a termination-message file; then rewrites every volumeMount's mountPath (-> that
  directory) and the container's terminationMessagePath (default /dev/termination-log -> that
  file) wherever such a path appears in the command, args, env values, workingDir and in the
  files of the configMap/secret volumes. The message file is also in $STREAMJOB_TERMINATION_LOG.
  With terminationMessagePolicy FallbackToLogsOnError, a failed container's log tail is used;
* reports the pod status through the status subresource: Pending -> Running -> Succeeded/Failed
  (restartPolicy Never semantics: a container is never restarted), podIP/hostIP 127.0.0.1,
  containerStatuses with state.running / state.terminated (exitCode, reason, message);
* on pod deletion: SIGTERM to the process group, SIGKILL after terminationGracePeriodSeconds
  (default 30); `lose(namespace, name)` kills a pod's processes with SIGKILL and marks the pod
  Failed (reason "NodeLost"), as when its node dies.

Each pod gets its own loopback address (127.0.0.10, .11, ...; 127.1.0.10, ... in pytest-xdist worker
gw0, 127.2.0.10 in gw1) as podIP, and STREAMJOB_BIND_HOST tells streamjob's servers to listen only
there, so pods with the same fixed ports coexist.
httpGet readiness probes run against the pod's address (the Ready condition follows them).
Limits: other programs in pods share the host's ports, there is no
Service networking or cluster DNS, no images (only the local interpreter and files), no resource
limits, liveness/startup or exec probes, init containers, restarts or in-cluster credentials ($KUBECONFIG points at the
test API server instead). Logs: `kubelet.logs(namespace, name)`.

Usage::

    with FakeKubelet(kube_api) as kubelet, run_operator(kube_api, module=...):
        ...
"""

from __future__ import annotations

import base64
import datetime
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import kmock

from kube.apiserver import KubeAPI

Body = dict[str, Any]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rewriter(rewrites: dict[str, str]) -> Callable[[str], str]:
    """Replace each path (a whole path component sequence, longest first) anywhere in a string."""
    if not rewrites:
        return lambda value: value
    table = {path.rstrip("/") or "/": target for path, target in rewrites.items()}
    pattern = re.compile("|".join(rf"(?<![\w./-]){re.escape(path)}(?![\w.-])"
                                  for path in sorted(table, key=len, reverse=True)))
    return lambda value: pattern.sub(lambda m: table[m.group(0)], value)


class _Readiness:
    """An httpGet readiness probe, run as the kubelet runs it: every periodSeconds from initialDelaySeconds
    after the start; Ready after one success, not Ready after failureThreshold failures in a row."""

    def __init__(self, probe: Body, container: Body, host: str):
        get = probe["httpGet"]
        port = get["port"]
        if isinstance(port, str) and not port.isdigit():
            port = next(p["containerPort"] for p in container.get("ports", []) if p.get("name") == port)
        self.url = f"{get.get('scheme', 'HTTP').lower()}://{host}:{port}{get.get('path', '/')}"
        self.period, self.timeout = float(probe.get("periodSeconds", 10)), float(probe.get("timeoutSeconds", 1))
        self.failure_threshold = int(probe.get("failureThreshold", 3))
        self.next = time.monotonic() + float(probe.get("initialDelaySeconds", 0))
        self.ready, self.failures = False, 0

    def check(self) -> bool:
        if time.monotonic() >= self.next:
            self.next = time.monotonic() + self.period
            try:
                with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                    ok = 200 <= response.status < 400
            except (OSError, ValueError):
                ok = False
            self.failures = 0 if ok else self.failures + 1
            self.ready = ok or (self.ready and self.failures < self.failure_threshold)
        return self.ready


class _Container:
    def __init__(self, name: str, image: str, proc: subprocess.Popen | None, log: str, message_file: str,
                 policy: str, failure: str | None = None, waiting: tuple[str, str] | None = None,
                 readiness: _Readiness | None = None):
        self.name, self.image, self.proc, self.log, self.message_file = name, image, proc, log, message_file
        self.policy, self.failure, self.started, self.waiting = policy, failure, _now(), waiting
        self.readiness = readiness

    def ready(self, state: Body) -> bool:
        return "running" in state and (self.readiness is None or self.readiness.check())

    def state(self) -> Body:
        if self.waiting is not None:  # not started, and the kubelet keeps trying
            return {"waiting": {"reason": self.waiting[0], "message": self.waiting[1]}}
        if self.proc is None:  # could not start at all
            return {"terminated": {"exitCode": 127, "reason": "ContainerCannotRun", "message": self.failure,
                                   "startedAt": self.started, "finishedAt": self.started}}
        code = self.proc.poll()
        if code is None:
            return {"running": {"startedAt": self.started}}
        if code < 0:  # killed by a signal: report it as a shell (and Kubernetes) would, 128 + signal
            code = 128 - code
        with open(self.message_file, errors="replace") as f:
            message = f.read(4096)
        if not message and code != 0 and self.policy == "FallbackToLogsOnError":
            with open(self.log, errors="replace") as f:
                message = "".join(f.readlines()[-80:])[-2048:]
        return {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                               "message": message, "startedAt": self.started, "finishedAt": _now()}}


class _Pod:
    def __init__(self, namespace: str, name: str, uid: str, workdir: str, grace: float):
        self.namespace, self.name, self.uid, self.workdir, self.grace = namespace, name, uid, workdir, grace
        self.containers: list[_Container] = []
        self.reported: tuple | None = None
        self.lost = False


class FakeKubelet:
    """Runs the pods of `api` (all namespaces, or one) as local processes. See the module doc."""

    def __init__(self, api: KubeAPI, *, namespace: str | None = None, images: dict[str, list[str]] | None = None,
                 commands: dict[str, list[str]] | None = None, interval: float = 0.1, node_name: str = "fake-node",
                 unpullable: set[str] | frozenset[str] = frozenset()):
        self.api, self.namespace, self.images, self.unpullable = api, namespace, images or {}, set(unpullable)
        self.commands = commands or {}  # a path in the image -> what runs it here (an entrypoint script)
        # Pods get 127.<block>.x.y. Each pytest-xdist worker (PYTEST_XDIST_WORKER=gw0, gw1, ...) has a
        # block of its own, so pods of two kubelets in parallel workers never share an address (and
        # their fixed ports); a run without xdist keeps 127.0.x.y.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        block = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
        self._ips = (f"127.{block}.{n // 250}.{n % 250 + 2}" for n in itertools.count(8))
        self._pod_ips: dict[str, str] = {}  # uid -> its own loopback address
        self.interval, self.node_name = interval, node_name
        self._pods: dict[str, _Pod] = {}  # by uid: a re-created pod with the same name is a new pod
        self._by_name: dict[tuple[str, str], _Pod] = {}  # the latest pod of each name, also when done
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self._root = tempfile.TemporaryDirectory(prefix="fake-kubelet-")

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            pods, self._pods = list(self._pods.values()), {}
        for pod in pods:
            self._kill(pod, signal.SIGKILL)
        self._root.cleanup()

    # -- test controls --
    def lose(self, namespace: str, name: str) -> None:
        """The pod's node dies: SIGKILL its processes; the pod becomes Failed (reason NodeLost)."""
        pod = self._find(namespace, name)
        if not any(c.proc is not None and c.proc.poll() is None for c in pod.containers):
            # Losing a pod whose processes had already ended shows nothing a test could mean to show.
            raise AssertionError(f"pod {namespace}/{name} has no running container left to lose")
        pod.lost = True
        self._kill(pod, signal.SIGKILL)
        self._report(pod)

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        pod = self._find(namespace, name)
        c = next(c for c in pod.containers if container in (None, c.name))
        with open(c.log, errors="replace") as f:
            return f.read()

    def pid(self, namespace: str, name: str) -> int | None:
        proc = self._find(namespace, name).containers[0].proc
        return None if proc is None else proc.pid

    def _find(self, namespace: str, name: str) -> _Pod:
        with self._lock:
            return self._by_name[namespace, name]

    # -- the sync loop --
    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sync()
            except Exception as e:  # keep the node alive; the test sees the effects (or not)
                print(f"fake kubelet: {e!r}", file=sys.stderr)

    def _sync(self) -> None:
        pods = {p["metadata"]["uid"]: p for p in self.api.objects.list("v1/pods", self.namespace)}
        for uid, body in pods.items():
            if body["metadata"].get("deletionTimestamp"):
                self._delete(uid)
            elif uid not in self._pods and body.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                self._start(body)
        for uid in set(self._pods) - set(pods):  # deleted from the API server
            self._delete(uid)
        with self._lock:
            running = list(self._pods.values())
        for pod in running:
            self._report(pod)

    def _start(self, body: Body) -> None:
        meta, spec = body["metadata"], body.get("spec", {})
        workdir = tempfile.mkdtemp(prefix=f"{meta['namespace']}-{meta['name']}-", dir=self._root.name)
        pod = _Pod(meta["namespace"], meta["name"], meta["uid"], workdir,
                   float(spec.get("terminationGracePeriodSeconds", 30)))
        with self._lock:
            self._pods[pod.uid] = self._by_name[pod.namespace, pod.name] = pod
        # Each pod gets its own loopback address (all of 127.0.0.0/8 reaches this host), and its
        # processes listen only there (STREAMJOB_BIND_HOST), as if it had its own network namespace:
        # pods using the same fixed ports do not collide.
        ip = self._pod_ips[pod.uid] = next(self._ips)
        self.api.objects.patch("v1/pods", pod.namespace, pod.name, subresource="status", patch={"status": {
            "phase": "Pending", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": _now()}})
        # Volumes become local directories; their mountPaths (and each container's termination
        # message path) are rewritten in the command, args, env, and the volumes' own files.
        # An emptyDir mounted where the host has a writable directory of that path (/tmp) stays the
        # host's: it is scratch space either way, and rewriting /tmp would also rewrite every other
        # path under it (a test's own tmp_path in the job's arguments).
        dirs = {v["name"]: os.path.join(workdir, "volumes", v["name"]) for v in spec.get("volumes", [])
                if not ("emptyDir" in v and self._host_scratch(spec, v["name"]))}
        containers = spec.get("containers", [])
        rewrites = [self._rewrites(c, dirs, workdir) for c in containers]
        self._fill_volumes(body, dirs, _rewriter({k: v for r in rewrites for k, v in r.items()}))
        for container, container_rewrites in zip(containers, rewrites):
            pod.containers.append(self._run_container(body, container, _rewriter(container_rewrites), workdir))
        self._report(pod)

    @staticmethod
    def _host_scratch(spec: Body, volume: str) -> bool:
        paths = [m["mountPath"] for c in spec.get("containers", []) for m in c.get("volumeMounts", [])
                 if m["name"] == volume]
        return bool(paths) and all(os.path.isdir(p) and os.access(p, os.W_OK) for p in paths)

    @staticmethod
    def _rewrites(container: Body, dirs: dict[str, str], workdir: str) -> dict[str, str]:
        """mountPath -> local directory (or file, with subPath); terminationMessagePath -> local file."""
        rewrites = {m["mountPath"]: os.path.join(dirs[m["name"]], m.get("subPath", "")).rstrip("/")
                    for m in container.get("volumeMounts", []) if m["name"] in dirs}
        path = container.get("terminationMessagePath", "/dev/termination-log")
        rewrites[path] = os.path.join(workdir, f"{container['name']}.termination-log")
        return rewrites

    def _run_container(self, pod: Body, container: Body, rewrite: Callable[[str], str], workdir: str) -> _Container:
        name = container["name"]
        log = os.path.join(workdir, f"{name}.log")
        message_file = os.path.join(workdir, f"{name}.termination-log")
        open(message_file, "w").close()
        command = [*(container.get("command") or self.images.get(container.get("image", ""), [])),
                   *container.get("args", [])]
        if command and command[0] in self.commands:
            command = [*self.commands[command[0]], *command[1:]]
        policy = container.get("terminationMessagePolicy", "File")
        if container.get("image") in self.unpullable:
            open(log, "w").close()
            return _Container(name, container["image"], None, log, message_file, policy, waiting=(
                "ImagePullBackOff", f'Back-off pulling image "{container["image"]}"'))
        if not command:
            open(log, "w").close()
            return _Container(name, container.get("image", ""), None, log, message_file, policy,
                              failure="the fake kubelet runs no images: give a command (or FakeKubelet(images=))")
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        env = {**os.environ, "HOSTNAME": pod["metadata"]["name"], "STREAMJOB_TERMINATION_LOG": message_file,
               "STREAMJOB_BIND_HOST": self._pod_ips[pod["metadata"]["uid"]],
               # the image's tools (streamjob, python) are this interpreter's
               "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
        if self.api.kubeconfig:
            env["KUBECONFIG"] = self.api.kubeconfig
        env.update({k: rewrite(v) for k, v in self._env(pod, container).items()})
        cwd = rewrite(container.get("workingDir", workdir))
        with open(log, "wb") as out:
            proc = subprocess.Popen([rewrite(arg) for arg in command], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=cwd if os.path.isdir(cwd) else workdir, start_new_session=True)
        probe = container.get("readinessProbe")
        readiness = _Readiness(probe, container, self._pod_ips[pod["metadata"]["uid"]]) \
            if probe and "httpGet" in probe else None
        return _Container(name, container.get("image", ""), proc, log, message_file, policy, readiness=readiness)

    def _env(self, pod: Body, container: Body) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            ref = source.get("configMapRef") or source.get("secretRef")
            data = self._data("v1/configmaps" if "configMapRef" in source else "v1/secrets", namespace, ref["name"])
            env.update({source.get("prefix", "") + k: v for k, v in data.items()})
        for var in container.get("env", []):
            if "valueFrom" not in var:
                env[var["name"]] = str(var.get("value", ""))
                continue
            frm = var["valueFrom"]
            if "fieldRef" in frm:
                env[var["name"]] = self._field(pod, frm["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in frm or "configMapKeyRef" in frm:
                ref = frm.get("secretKeyRef") or frm.get("configMapKeyRef")
                data = self._data("v1/secrets" if "secretKeyRef" in frm else "v1/configmaps", namespace, ref["name"])
                if ref["key"] in data:
                    env[var["name"]] = data[ref["key"]]
                elif not ref.get("optional"):
                    raise KeyError(f"{ref['name']} has no key {ref['key']!r}")  # the pod stays Pending
        return env

    def _field(self, pod: Body, path: str) -> str:
        meta = pod["metadata"]
        if path.startswith(("metadata.labels['", "metadata.annotations['")):
            kind, key = path[len("metadata."):].split("['", 1)
            return (meta.get(kind) or {}).get(key.rstrip("']"), "")
        return {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
                "spec.nodeName": self.node_name,
                "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName", ""),
                "status.podIP": self._pod_ips.get(meta["uid"], "127.0.0.1"),
                "status.hostIP": "127.0.0.1"}.get(path, "")

    def _data(self, resource: str, namespace: str, name: str) -> dict[str, str]:
        obj = self.api.objects.get(resource, namespace, name) or {}
        data = dict(obj.get("data") or {})
        if resource == "v1/secrets":  # secret data is base64; stringData is plain (no server merges it)
            data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update(obj.get("stringData") or {})
        return data

    def _fill_volumes(self, pod: Body, dirs: dict[str, str], rewrite: Callable[[str], str]) -> None:
        """configMap / secret volumes -> files; emptyDir (and anything else) -> an empty directory."""
        for volume in pod.get("spec", {}).get("volumes", []):
            if volume["name"] not in dirs:
                continue  # the host's own scratch directory
            os.makedirs(dirs[volume["name"]], exist_ok=True)
            source = volume.get("configMap") or volume.get("secret")
            if source is None:
                continue
            name = source.get("name") or source.get("secretName")
            data = self._data("v1/configmaps" if "configMap" in volume else "v1/secrets",
                              pod["metadata"]["namespace"], name)
            for item in source.get("items") or [{"key": k, "path": k} for k in data]:
                target = os.path.join(dirs[volume["name"]], item["path"])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w") as f:
                    f.write(rewrite(data.get(item["key"], "")))

    # -- status and termination --
    def _report(self, pod: _Pod) -> None:
        states = [c.state() for c in pod.containers]
        statuses = [{"name": c.name, "image": c.image, "imageID": "", "restartCount": 0, "state": state,
                     "started": "running" in state, "ready": c.ready(state)}
                    for c, state in zip(pod.containers, states)]
        codes = [state.get("terminated", {}).get("exitCode") for state in states]
        if pod.lost:
            phase = "Failed"
        elif any("waiting" in state for state in states):
            phase = "Pending"
        elif states and None not in codes:
            phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        else:
            phase = "Running" if states else "Pending"
        status: Body = {"phase": phase, "containerStatuses": statuses, "conditions": [
            {"type": "Ready", "status": "True" if phase == "Running" and all(s["ready"] for s in statuses) else "False",
             "lastTransitionTime": _now()}]}
        if pod.lost:
            status.update(reason="NodeLost",
                          message=f"Node {self.node_name} which was running pod {pod.name} is unresponsive")
        # Write only changes: compare without the timestamps that move on every call.
        comparable = (phase, pod.lost, [(s["name"], next(iter(s["state"])), s["ready"], code)
                                        for s, code in zip(statuses, codes)])
        if comparable == pod.reported:
            return
        try:
            self.api.objects.patch("v1/pods", pod.namespace, pod.name, {"status": status}, subresource="status")
            pod.reported = comparable
        except kmock.KubernetesError:
            pass  # deleted meanwhile
        if phase in ("Succeeded", "Failed"):
            with self._lock:
                self._pods.pop(pod.uid, None)

    def _delete(self, uid: str) -> None:
        with self._lock:
            pod = self._pods.pop(uid, None)
        if pod is not None:  # SIGTERM now, SIGKILL after the grace period (in the background)
            self._kill(pod, signal.SIGTERM)
            threading.Thread(target=self._reap, args=(pod,), daemon=True, name=f"reap-{pod.name}").start()

    def _reap(self, pod: _Pod) -> None:
        deadline = time.monotonic() + pod.grace
        for c in pod.containers:
            if c.proc is not None:
                try:
                    c.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self._kill(pod, signal.SIGKILL)
                    c.proc.wait()

    @staticmethod
    def _kill(pod: _Pod, sig: int) -> None:
        for c in pod.containers:
            if c.proc is not None and c.proc.poll() is None:
                # The whole container: its session (it was started in a session of its own), as a pod's
                # cgroup goes whole. The job's Spark JVM runs in a process group of its own (so a signal to
                # the driver's group is one graceful stop), but in the container's session.
                for pid in [c.proc.pid] + _session_members(c.proc.pid):
                    try:
                        os.killpg(pid, sig) if pid == c.proc.pid else os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                if sig == signal.SIGKILL:
                    c.proc.wait()


def _session_members(sid: int) -> list[int]:
    """Processes of session ``sid`` (from /proc), the session leader excluded."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == sid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if int(stat[stat.rindex(b")") + 2:].split()[3]) == sid:
                found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found
