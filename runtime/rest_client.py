"""A small client of the job manager's REST API (the CLI and the operator use it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request


class RestError(RuntimeError):
    """The API answered with an error, or could not be reached; the message says which."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def base_url(address: str) -> str:
    """``--address`` as a URL: ``HOST:PORT`` (as `streamjob list` is read, without its scheme) means http://."""
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    parts = urllib.parse.urlsplit(address)
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise RestError(f"--address {address!r}: expected the job's REST API as http://HOST:PORT (the URL "
                        f"`streamjob run` and `streamjob list` print)")
    return address


def call(address: str, token: str, method: str, path: str, body: dict | None = None, timeout: float = 30.0) -> dict:
    url = base_url(address) + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error", e.reason)
        except ValueError:
            message = e.reason
        raise RestError(f"{method} {url}: {e.code} {message}", e.code) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RestError(f"cannot reach the job at {address} ({reason}); is it running, and is that the URL "
                        f"`streamjob run` printed?") from None
