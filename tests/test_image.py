"""The real container image: built from the Dockerfile by docker/build-image.sh with buildah (on a
base image made by debootstrap), then run with buildah the way the operator's pods run it: its
entrypoint with a role, as UID 185, with /tmp a fresh writable mount.

The first run builds the image (minutes); later runs reuse it while the source hash it is labelled
with matches the sources, so a stale image is rebuilt, never run. Skipped only when buildah or
debootstrap is missing (CI's .ci/run installs both)."""

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from streamjob.operator import resources

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "docker" / "build-image.sh"
BUILDAH = ["buildah", "--storage-driver", "vfs"]  # the store docker/build-image.sh builds into
RUN = [*BUILDAH, "run", "--isolation", "chroot"]

_missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(bool(_missing), reason=f"{' and '.join(_missing)} not installed "
                                              "(Debian: apt-get install buildah debootstrap; CI's .ci/run does)"),
    # A cold build (base image, PySpark download) takes minutes; a warm one is a hash comparison.
    pytest.mark.timeout(1500),
]


def buildah(*args: str, timeout: float = 120) -> str:
    result = subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"buildah {' '.join(args)}: {result.stderr}"
    return result.stdout


def source_hash() -> str:
    return subprocess.run([str(BUILD_SCRIPT), "--print-hash"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


@pytest.fixture(scope="module")
def built() -> tuple[str, str]:
    """The image's name, built or found up to date by the project's script, and the source hash
    the script saw (taken just before it: the same unless someone edits the sources meanwhile)."""
    sources = source_hash()
    started = time.monotonic()
    result = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=1400)
    assert result.returncode == 0, f"docker/build-image.sh failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    print(f"docker/build-image.sh: {time.monotonic() - started:.0f}s\n{result.stderr[-1500:]}")
    tag = subprocess.run([str(BUILD_SCRIPT), "--print-tag"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return tag, sources


@pytest.fixture(scope="module")
def image(built) -> str:
    return built[0]


@pytest.fixture(scope="module")
def config(image) -> dict:
    return json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["config"]


@pytest.fixture(scope="module")
def container(image):
    """A working container of the image, removed afterwards (only this one: others' are left alone)."""
    name = f"streamjob-test-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--name", name, image)
    yield name
    subprocess.run([*BUILDAH, "rm", name], capture_output=True, timeout=120)


def run_in(container: str, *command: str, env: dict[str, str] | None = None,
           timeout: float = 240) -> subprocess.CompletedProcess:
    """COMMAND in the container as the image's user (USER 185), /tmp a fresh tmpfs like the pods'
    emptyDir."""
    env_args = [arg for key, value in (env or {}).items() for arg in ("--env", f"{key}={value}")]
    return subprocess.run([*RUN, "--mount", "type=tmpfs,destination=/tmp", *env_args, container, "--", *command],
                          capture_output=True, text=True, timeout=timeout)


def test_the_image_is_labelled_with_the_current_sources_and_a_second_build_is_a_no_op(built, config):
    _, sources = built
    assert config["Labels"]["io.streamjob.source-hash"] == sources, "the image is stale"
    if source_hash() != sources:
        pytest.skip("the sources changed while the tests ran (someone is editing them): the next run rebuilds")
    started = time.monotonic()
    again = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr
    assert time.monotonic() - started < 30


def test_the_image_config(image, config):
    assert config["User"] == f"{resources.IMAGE_UID}:{resources.IMAGE_UID}"
    assert config["Entrypoint"] == [resources.ENTRYPOINT]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["HOME"] == resources.TMP_DIR and config["WorkingDir"] == resources.TMP_DIR
    assert config["Labels"]["org.opencontainers.image.version"] == image.split(":")[1]


def test_runs_as_uid_185_and_the_root_filesystem_is_not_writable_for_it(container):
    result = run_in(container, "sh", "-c", "id -u; id -g; touch /opt/streamjob/x 2>/dev/null && echo writable; "
                                           "touch /tmp/x && echo tmp-writable")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(resources.IMAGE_UID), str(resources.IMAGE_UID), "tmp-writable"]


def test_streamjob_version_through_the_entrypoint(container):
    # `driver ARGS` is `streamjob ARGS`, as the operator's driver pods use it.
    result = run_in(container, resources.ENTRYPOINT, "driver", "--version")
    assert result.returncode == 0, result.stderr
    version = subprocess.run([str(BUILD_SCRIPT), "--print-tag"], capture_output=True, text=True,
                             check=True).stdout.strip().split(":")[1]
    assert result.stdout.strip() == f"streamjob, version {version}"


def test_the_operator_role_starts_the_operator_cli(container):
    result = run_in(container, resources.ENTRYPOINT, "operator", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: streamjob operator" in result.stdout


def test_the_entrypoint_without_a_role_prints_its_usage(container):
    result = run_in(container, resources.ENTRYPOINT)
    assert result.returncode == 2
    assert "usage: entrypoint.sh operator" in result.stderr


def test_java_python_and_the_executor_backend_are_in_the_image(container):
    script = ("import os, sys, pyspark, pyarrow, numpy, rocksdict, kopf; "
              "jars = os.path.join(os.path.dirname(pyspark.__file__), 'jars'); "
              "print(sys.version_info[:2]); "
              "print(any(j.startswith('spark-kubernetes_') for j in os.listdir(jars)))")
    result = run_in(container, "python3", "-c", script)
    assert result.returncode == 0, result.stderr
    # Python 3.11 from Debian; the jar holding the executor role's KubernetesExecutorBackend
    assert result.stdout.split("\n")[:2] == ["(3, 11)", "True"]
    java = run_in(container, "sh", "-c", 'exec "$JAVA_HOME/bin/java" -version')
    assert java.returncode == 0 and 'version "17.' in java.stderr, java.stderr


def test_the_jobs_the_manifests_and_the_e2e_suite_run_are_in_the_image(container):
    """examples/k8s/ names /opt/streamjob/examples/*.py; e2e/ runs /opt/streamjob/e2e/jobs/*.py."""
    repo = Path(__file__).resolve().parent.parent
    wanted = sorted([f"/opt/streamjob/examples/{p.name}" for p in (repo / "examples").glob("*.py")]
                    + [f"/opt/streamjob/e2e/jobs/{p.name}" for p in (repo / "e2e" / "jobs").glob("*.py")])
    result = run_in(container, "ls", "-1", *wanted)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == wanted


def test_a_job_runs_to_completion_in_local_mode_and_writes_only_to_tmp(container):
    """examples/word_count.py (as examples/k8s/word-count-local.yaml runs it) on local[2] Spark,
    through the entrypoint's driver role. Then nothing outside /tmp may have changed in the
    container's root filesystem: the pods mount it read-only."""
    mount = buildah("mount", container).strip()
    marker = Path(mount) / "tmp" / ".before-job"  # under /tmp, itself left out of the check
    marker.touch()
    time.sleep(1.1)  # mtimes are compared below
    try:
        result = run_in(container, resources.ENTRYPOINT, "driver", "run", "/opt/streamjob/examples/word_count.py",
                        "--parallelism", "2", "--no-progress")
        assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        counts = [line.split("> ", 1)[1] for line in result.stdout.splitlines() if "> (" in line]
        # The rolling counts of the job's text (each word's running total, once per occurrence).
        for final in ("('to', 4)", "('the', 3)", "('be', 2)", "('or', 2)", "('of', 2)", "('and', 2)"):
            assert final in counts, result.stdout[-3000:]
        assert len(counts) == 39  # one output row per word of the text
        # Files buildah itself puts in place to run a command (resolver, hosts, the container marker).
        runtime_files = {"etc/hosts", "etc/resolv.conf", "etc/hostname", "run/.containerenv"}
        changed = subprocess.run(
            ["find", mount, "-xdev", "-newer", str(marker), "-not", "-path", f"{mount}/tmp", "-not", "-path",
             f"{mount}/tmp/*", "-not", "-path", f"{mount}/proc*", "-not", "-path", f"{mount}/dev*",
             "-not", "-path", f"{mount}/sys*"],
            capture_output=True, text=True, timeout=120, check=True).stdout.split()
        changed = sorted(os.path.relpath(p, mount) for p in changed if os.path.relpath(p, mount) not in runtime_files)
        assert changed in ([], ["."], ["run"], [".", "run"]), f"written outside /tmp: {changed[:20]}"
    finally:
        marker.unlink(missing_ok=True)
        subprocess.run([*BUILDAH, "umount", container], capture_output=True, timeout=60)
