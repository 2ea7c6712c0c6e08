"""Whether the Kubernetes API server can be reached, in the operator's words.

Without an API server the operator can do nothing, so ``/healthz`` says so (503, with the reason) for
as long as it lasts, and the log says it once per retry in one line: kopf's own records of a refused
connection carry the aiohttp connection key and, at the end, two chained tracebacks of the socket call.
``unreachable_reason`` (pure) turns an exception into that line's reason; ``ApiServerHealth`` probes
``GET /version`` in the background; ``OneLineConnectionErrors`` is a logging filter for kopf's records.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

PROBE_INTERVAL_S = 5.0
PROBE_TIMEOUT_S = 5.0


def unreachable_reason(error: BaseException | None) -> str | None:
    """Why the API server could not be reached ("connection refused", "unknown host", ...), None when
    ``error`` (or what caused it) is not a connection failure but an answer of the server."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, TimeoutError) or type(error).__name__ in ("ServerTimeoutError", "ConnectionTimeoutError"):
            return "no answer (timed out)"
        import socket

        if isinstance(error, socket.gaierror):
            return "unknown host"
        if type(error).__name__ in ("ClientConnectorError", "ClientConnectorCertificateError",
                                    "ClientConnectorSSLError", "ServerDisconnectedError", "ClientOSError"):
            inner = error.__cause__ or getattr(error, "os_error", None)
            found = unreachable_reason(inner) if inner is not None and inner is not error else None
            return found or _short(str(error))
        if isinstance(error, ConnectionError):
            return _short(str(error)) or "connection failed"
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _short(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()[:200]


class ApiServerHealth:
    """The latest probe's outcome: ``ok`` and, when not, ``reason``."""

    def __init__(self, host: str | None = None):
        self.host = host
        self.ok = False
        self.reason: str | None = "not checked yet"
        self.checked: float | None = None

    def doc(self) -> tuple[int, dict[str, Any]]:
        if self.ok:
            return 200, {"status": "ok"}
        where = f" at {self.host}" if self.host else ""
        return 503, {"status": "unhealthy", "reason": f"cannot reach the Kubernetes API server{where}: {self.reason}"}

    async def probe_forever(self, kube_factory: Any, interval: float = PROBE_INTERVAL_S) -> None:
        kube = None
        try:
            while True:
                try:
                    if kube is None:
                        kube = kube_factory()
                        self.host = kube.config.host
                    await asyncio.wait_for(kube._call("GET", "/version"), PROBE_TIMEOUT_S)
                    self.ok, self.reason = True, None
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - any failure is a reason to report, not to stop probing
                    self.ok = False
                    self.reason = unreachable_reason(e) or _short(f"{type(e).__name__}: {e}")
                self.checked = time.time()
                await asyncio.sleep(interval)
        finally:
            if kube is not None:
                # Its HTTP session, closed here: left to the garbage collector at the operator's stop, asyncio
                # logs "ERROR Unclosed client session" on every shutdown.
                await asyncio.shield(kube.close())


_ATTEMPT = re.compile(r"^Request attempt #(\d+)/(\d+) failed; (.*?): (\w+) (\S+)(?: -> (.*))?$", re.S)


class OneLineConnectionErrors(logging.Filter):
    """kopf's records of an unreachable API server, as one line each, without tracebacks; the /api
    and /apis requests of one attempt are one line."""

    def __init__(self) -> None:
        super().__init__()
        self._last: tuple | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kopf"):
            return True
        message = record.getMessage()
        m = _ATTEMPT.match(message)
        if m:
            attempt, total, what, _method, url, detail = m.groups()
            reason = _reason_in_text(detail or what)
            server = re.sub(r"^(https?://[^/]+).*$", r"\1", url)
            key = (attempt, total, server, reason)
            if key == self._last:
                return False
            self._last = key
            self._set(record, f"cannot reach the Kubernetes API server at {server} ({reason}); "
                              f"attempt {attempt}/{total}, retrying")
            return True
        exc = record.exc_info[1] if record.exc_info else None
        reason = unreachable_reason(exc)
        if reason is not None:
            head = message.split(":", 1)[0]
            self._set(record, f"{head}: cannot reach the Kubernetes API server ({reason})")
            record.exc_info, record.exc_text = None, None
        return True

    @staticmethod
    def _set(record: logging.LogRecord, text: str) -> None:
        record.msg, record.args = text, None


def _reason_in_text(text: str) -> str:
    if "Connect call failed" in text or "Connection refused" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text or "Temporary failure in name" in text:
        return "unknown host"
    if "TCP closed" in text:
        return "connection closed"
    if "Timeout" in text or "timed out" in text:
        return "no answer (timed out)"
    return _short(text.split("(", 1)[0]) or "connection failed"
