# syntax=docker/dockerfile:1
# One image for the StreamJob operator, a job's driver (job manager) and Spark executors:
# Debian 12, Python 3.11, Java 17 (headless JRE), PySpark and streamjob in a virtualenv.
#
#   docker build -t streamjob:0.1.0 .          (Docker with BuildKit, anywhere)
#   docker/build-image.sh                      (buildah, no registry: the base image from debootstrap)
#
# The operator's pods run it as UID 185 with a read-only root filesystem and an emptyDir on /tmp
# (operator/resources.py: IMAGE_UID, TMP_DIR, ENTRYPOINT): everything that writes at run time is
# pointed at /tmp below.
#
# Few steps after the big ones, on purpose: with buildah's vfs storage (docker/build-image.sh)
# every step that follows a layer of a gigabyte costs a copy of that gigabyte.

# -- python: the Debian base plus the system Python, shared by both stages ---------------------------
# The venv made in the builder links to /usr/bin/python3, so builder and final image must have
# the very same interpreter: both start from this stage.
FROM debian:bookworm-slim AS python
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*

# -- requirements: the runtime dependencies, read from pyproject.toml -------------------------------
# A stage of its own so that the builder's dependency layer depends on this list alone: an edit to
# pyproject.toml elsewhere (the test extra, pytest's options) yields the same file, and the builder's
# COPY of an unchanged file and the pip install after it come from the layer cache (BuildKit and
# buildah key a COPY by its content), instead of reinstalling PySpark.
FROM python AS requirements
COPY pyproject.toml /tmp/
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /requirements.txt

# -- builder: /opt/streamjob with the venv (PySpark, the other dependencies, streamjob) ---------------
FROM python AS builder
ENV PATH=/opt/streamjob/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# python3-venv (ensurepip) is needed only here; the final image gets the finished venv.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/streamjob/venv
# Behind a TLS-intercepting proxy pip needs the proxy's CA: pass a whole CA bundle (PEM) as the
# optional build secret ca-certificates, e.g. docker build --secret
# id=ca-certificates,src=/etc/ssl/certs/ca-certificates.crt (docker/build-image.sh passes this
# machine's). A secret, so it lands in no layer.
# Dependencies first, from their list alone (the requirements stage): this layer (PySpark is
# ~450 MB) stays cached while streamjob's sources or the rest of pyproject.toml change. The pip
# cache mount keeps what pip caches (downloads, wheels built from sdists) for builds that do redo it.
COPY --from=requirements /requirements.txt /tmp/requirements.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca-certificates,required=false \
    if [ -s /run/secrets/ca-certificates ]; then export PIP_CERT=/run/secrets/ca-certificates; fi \
    && pip install -r /tmp/requirements.txt
# The build context is an allowlist (.dockerignore): sources, examples, the entrypoint.
COPY . .
# --no-deps: the dependencies are all there; a missing one fails `pip check` instead of being
# fetched unseen. pip compiles bytecode at install: the root filesystem is read-only at run time.
# The examples are the files examples/k8s/ runs (spec.job.file: /opt/streamjob/examples/...); the
# e2e jobs are what e2e/ runs on a cluster (E2E_JOBS_DIR, /opt/streamjob/e2e/jobs).
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca-certificates,required=false \
    if [ -s /run/secrets/ca-certificates ]; then export PIP_CERT=/run/secrets/ca-certificates; fi \
    && pip install --no-deps . \
    && pip check \
    && install -D -m 755 docker/entrypoint.sh /opt/streamjob/entrypoint.sh \
    && install -D -m 644 -t /opt/streamjob/examples examples/*.py \
    && install -D -m 644 -t /opt/streamjob/e2e/jobs e2e/jobs/*.py

# -- the image ----------------------------------------------------------------------------------------
FROM python
# The JRE's postinst links its man page into /usr/share/man/man1, which slim images leave out
# (the link is dropped again by dpkg's path-exclude). The JRE's directory is named after the
# architecture (java-17-openjdk-amd64, -arm64): a fixed link gives JAVA_HOME one value everywhere.
# UID/GID 185 (Spark images' convention): the operator's pods use runAsUser 185.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
    && /usr/lib/jvm/java-17/bin/java -version \
    && groupadd --system --gid 185 streamjob \
    && useradd --system --uid 185 --gid 185 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin streamjob

# HOME, the working directory and Spark's scratch space are /tmp, the one writable place in the
# operator's pods (an emptyDir): Spark writes spark-warehouse/derby.log to the working directory
# and ~/.ivy2 caches to HOME. On Kubernetes executors Spark sets SPARK_LOCAL_DIRS to its own
# volume, overriding this. Bytecode was compiled at install, so Python writes none at run time.
ENV PATH=/opt/streamjob/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    PYSPARK_PYTHON=/opt/streamjob/venv/bin/python3 \
    PYSPARK_DRIVER_PYTHON=/opt/streamjob/venv/bin/python3 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    HOME=/tmp \
    TMPDIR=/tmp \
    SPARK_LOCAL_DIRS=/tmp
WORKDIR /tmp
# No CMD: the role is always given (the operator's pods: command entrypoint.sh, args
# driver|executor); without one the entrypoint prints its usage. Before the ARGs: the steps after
# them are redone at every build (each a copy of this stage with buildah's vfs storage).
ENTRYPOINT ["/opt/streamjob/entrypoint.sh"]

# What the image was built from, for people (cat /etc/streamjob-build) and for
# docker/build-image.sh, which passes both and tells a stale image by the hash label. Other builds
# may leave them empty. A RUN, not only the LABEL: buildah's layer cache keys a RUN by the
# arguments' values but a LABEL by its text alone, so a LABEL straight after ARG would be reused
# with an old hash. The RUN's new layer makes the steps after it run again.
ARG STREAMJOB_VERSION=""
ARG STREAMJOB_SOURCE_HASH=""
RUN printf 'version=%s\nsource-hash=%s\n' "$STREAMJOB_VERSION" "$STREAMJOB_SOURCE_HASH" >/etc/streamjob-build
LABEL org.opencontainers.image.title="streamjob" \
      org.opencontainers.image.description="StreamJob operator, job driver and Spark executor (Python 3.11, Java 17, PySpark)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$STREAMJOB_VERSION" \
      io.streamjob.source-hash="$STREAMJOB_SOURCE_HASH"

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd. After the RUN
# above, which writes /etc as root.
USER 185:185

# Last, as the one big step of this stage; owned by root, so UID 185 cannot change it.
COPY --from=builder /opt/streamjob /opt/streamjob
