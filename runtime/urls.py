"""Checks of storage URLs that every layer makes alike (configuration, checkpoint storage, savepoints)."""

from __future__ import annotations


def file_host_problem(url: str) -> str | None:
    """A file:// URL naming another host (file://otherhost/tmp/x): fsspec would write under the working
    directory (<cwd>/otherhost/tmp/x) while the job reports the URL. Only file:///path and
    file://localhost/path are local files."""
    protocol, _, rest = url.partition("://")
    if protocol.lower() not in ("file", "local") or rest.startswith("/"):
        return None
    host = rest.split("/", 1)[0]
    if host.lower() == "localhost":
        return None
    return (f"{url!r} names the host {host!r}: a file:// URL is a path on this machine, written file:///path "
            f"(three slashes) or file://localhost/path; for shared storage use s3:// or a mounted path")
