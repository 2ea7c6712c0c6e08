"""Blocking socket reads the transport's handshake and the queryable state frames share."""

from __future__ import annotations

import socket


def recv_exact(sock: socket.socket, n: int, during: str = "a read") -> bytes:
    """Exactly ``n`` bytes (ConnectionError: the peer closed the connection first, ``during`` what)."""
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"connection closed during {during}")
        out += chunk
    return bytes(out)


__all__ = ["recv_exact"]
