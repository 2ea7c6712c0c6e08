"""Object storage settings for fsspec, from the job configuration and the standard AWS chain.

Credentials come from the AWS default chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and
``~/.aws/config``, web identity and instance roles), unless ``s3.access-key`` /
``s3.secret-key`` are configured. The endpoint is ``s3.endpoint``, else the
standard ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` variables, else AWS.
The settings become fsspec's defaults for ``s3://`` in the process that calls
``configure`` (the driver, and every task from the job's configuration), so every
``s3://`` URL the runtime opens uses them.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec

from ..config import Configuration, Options


def s3_options(config: Configuration) -> dict[str, Any]:
    # Tasks and the job manager write the same prefixes from different processes: never trust a
    # cached listing (sweeps and recovery decide from listings).
    opts: dict[str, Any] = {"use_listings_cache": False}
    endpoint = (config.get_string(Options.S3_ENDPOINT) or os.environ.get("AWS_ENDPOINT_URL_S3")
                or os.environ.get("AWS_ENDPOINT_URL"))
    if endpoint:
        opts["endpoint_url"] = endpoint
    key, secret = config.get_string(Options.S3_ACCESS_KEY), config.get_string(Options.S3_SECRET_KEY)
    if key and secret:
        opts["key"], opts["secret"] = key, secret
    client: dict[str, Any] = {
        "connect_timeout": config.get_duration_ms(Options.S3_CONNECT_TIMEOUT) / 1000.0,
        "read_timeout": config.get_duration_ms(Options.S3_READ_TIMEOUT) / 1000.0,
        "retries": {"max_attempts": max(1, config.get_int(Options.S3_MAX_ATTEMPTS)), "mode": "standard"},
    }
    if config.get_bool(Options.S3_PATH_STYLE):
        client["s3"] = {"addressing_style": "path"}
    opts["config_kwargs"] = client
    return opts


def configure(config: Configuration) -> None:
    """Make these settings fsspec's defaults for s3:// in this process."""
    fsspec.config.conf["s3"] = s3_options(config)
