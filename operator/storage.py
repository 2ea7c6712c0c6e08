"""What the operator can check of a spec's storage before it acts on it: object-store locations.

The API server cannot know whether a bucket exists or a savepoint is there. The operator can
for ``s3://`` (it reaches the same store as the job, with the job's endpoint and credentials);
a ``file://`` path lives in the job's pod (a volume), which the operator cannot see, so the
job itself reports those at start (its termination message names the field). The checks run
once per spec generation; their findings become ``Observation.spec_errors``: the change is
not acted on and the running job keeps its last good spec.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from .model import StreamJobSpec

Check = tuple[str, str, str]  # (field, kind: "directory" | "savepoint", url)


def checks(spec: StreamJobSpec, first_deployment: bool) -> list[Check]:
    """The object-store locations of ``spec`` worth checking now (pure)."""
    found: list[Check] = []
    for field_, url in (("spec.checkpointDir", spec.checkpoint_dir), ("spec.savepointDir", spec.savepoint_dir)):
        if url and url.startswith("s3://"):
            found.append((field_, "directory", url))
    if first_deployment and spec.initial_savepoint_path and spec.initial_savepoint_path.startswith("s3://"):
        found.append(("spec.initialSavepointPath", "savepoint", spec.initial_savepoint_path))
    return found


def s3_options(spec: StreamJobSpec, access_key: str | None, secret_key: str | None) -> dict:
    """s3fs settings as the job's pods get them (spec.s3 and its Secret's keys); short timeouts: a
    check must not hold up the reconcile loop."""
    opts: dict = {"use_listings_cache": False,
                  "config_kwargs": {"connect_timeout": 5, "read_timeout": 10, "retries": {"max_attempts": 2}}}
    s3 = spec.s3
    if s3 is not None and s3.endpoint:
        opts["endpoint_url"] = s3.endpoint
    if s3 is not None and s3.path_style_access:
        opts["config_kwargs"]["s3"] = {"addressing_style": "path"}
    if s3 is not None and s3.region:
        opts["client_kwargs"] = {"region_name": s3.region}
    if access_key and secret_key:
        opts["key"], opts["secret"] = access_key, secret_key
    return opts


def probe(kind: str, url: str, options: dict) -> str | None:
    """Why ``url`` is unusable, or None (blocking: run in a thread)."""
    import s3fs
    from fsspec.asyn import sync

    fs = s3fs.S3FileSystem(**options)
    path = url.removeprefix("s3://").rstrip("/")
    bucket = path.split("/", 1)[0]
    try:
        if kind == "directory":
            # HEAD bucket: an answer from the store (exists.. or not), not a listing of all it holds.
            sync(fs.loop, fs._call_s3, "head_bucket", Bucket=bucket)
        else:
            fs.info(f"{path}/_metadata")
        return None
    except FileNotFoundError:
        return (f"bucket {bucket!r} does not exist" if kind == "directory"
                else f"no savepoint at {url} (no _metadata)")
    except PermissionError as e:
        return f"access to {url} denied: {e}"
    except Exception as e:  # noqa: BLE001 - every way of not reaching the store is the answer
        return f"cannot reach {url}: {type(e).__name__}: {e}"


async def job_s3_options(spec: StreamJobSpec, secret: Callable[[str, str], Awaitable[str | None]]) -> dict:
    """s3fs settings with the job's endpoint and its Secret's credentials (``secret(name, key)``)."""
    s3 = spec.s3
    key = await secret(s3.access_key_id.name, s3.access_key_id.key) if s3 and s3.access_key_id else None
    secret_key = await secret(s3.secret_access_key.name, s3.secret_access_key.key) \
        if s3 and s3.secret_access_key else None
    return s3_options(spec, key, secret_key)


async def spec_errors(spec: StreamJobSpec, first_deployment: bool,
                      secret: Callable[[str, str], Awaitable[str | None]]) -> dict[str, str]:
    """field -> problem, for the checks of ``spec``; ``secret(name, key)`` reads the job's Secrets."""
    todo = checks(spec, first_deployment)
    if not todo:
        return {}
    options = await job_s3_options(spec, secret)
    results = await asyncio.gather(*(asyncio.to_thread(probe, kind, url, options) for _, kind, url in todo))
    return {field_: problem for (field_, _, _), problem in zip(todo, results) if problem}
