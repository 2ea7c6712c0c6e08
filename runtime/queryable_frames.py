"""The frames queryable state lookups travel in: a 4-byte big-endian length, then that many bytes of a
UTF-8 JSON object. Spoken by the job manager's proxy port (cluster/query_proxy.py), by each subtask's
lookup port (task/queryable.py) and by ``QueryableStateClient``. Pure encoding and a blocking read; no
state of its own."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, Iterator

from .sockets import recv_exact

HEADER = struct.Struct(">I")
MAX_FRAME = 16 << 20


class FrameError(ValueError):
    """Bytes that are not a frame of this protocol: the connection cannot be trusted past them."""


def encode(doc: dict) -> bytes:
    body = json.dumps(doc, separators=(",", ":"), default=str).encode()
    return HEADER.pack(len(body)) + body


def split(buf: bytearray) -> Iterator[dict]:
    """The whole frames at the start of ``buf``, decoded, each removed from it as it is taken (a partial
    one stays); FrameError at the first that is not a frame, after those before it."""
    while len(buf) >= 4:
        (n,) = HEADER.unpack_from(buf)
        if n > MAX_FRAME:
            raise FrameError(f"a frame of {n} bytes: at most {MAX_FRAME} (is this client speaking the queryable "
                             f"state protocol? 4-byte big-endian length, then JSON)")
        if len(buf) < 4 + n:
            return
        frame = bytes(buf[4:4 + n])
        del buf[:4 + n]
        try:
            doc = json.loads(frame)
        except ValueError as e:
            raise FrameError(f"a frame that is not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise FrameError(f"a frame that is not a JSON object: {frame[:100]!r}")
        yield doc


def recv(sock: socket.socket) -> dict:
    """One frame, read blocking (ConnectionError: the peer closed the connection)."""
    (n,) = HEADER.unpack(recv_exact(sock, 4, "a frame"))
    if n > MAX_FRAME:
        raise FrameError(f"a frame of {n} bytes: at most {MAX_FRAME}")
    doc: Any = json.loads(recv_exact(sock, n, "a frame"))
    if not isinstance(doc, dict):
        raise FrameError(f"a frame that is not a JSON object: {str(doc)[:100]}")
    return doc


__all__ = ["FrameError", "HEADER", "MAX_FRAME", "encode", "recv", "split"]
