"""Bytes for keys and values in the RocksDB backend: compact, and equal keys give equal bytes.

A RocksDB key is ``<key group: 2 bytes big-endian><encoded key>`` so one
subtask's state is a contiguous range per column family and a rescale can cut
it by key group. Keys are encoded *canonically*: Python treats ``1``,
``1.0``, ``True`` and ``numpy.int64(1)`` as the same dict key, and the key
hash (``keygroups.key_hash``) does too, so they must encode to the same bytes.

Encodings start with a one-byte tag; the common types avoid pickle (an int is
9 bytes, a str its UTF-8 plus one)::

    i  int64, big-endian     f  float64      s  UTF-8 str      b  bytes
    n  None                  t  tuple (each element: u32 length + encoding)
    p  pickle (everything else)

Values of states with a TTL are ``TtlValue`` pairs, encoded as ``T`` + the last-access
timestamp (int64 ms) + the value's own encoding, as Flink stores value and timestamp together.

List state is a sequence of frames ``<u32 length><encoded element>``, so
``add`` appends bytes instead of decoding and re-encoding the whole list.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import numpy as np

from .ttl import TtlValue

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE = struct.Struct(">d")
_U32 = struct.Struct(">I")


class StateCodecError(ValueError):
    pass


def _canonical_number(key: Any) -> Any:
    """Equal numbers as one type: bools and integral floats as int (as ``key_hash`` does)."""
    if isinstance(key, (bool, np.bool_)):
        return int(key)
    if isinstance(key, np.integer):
        return int(key)
    if isinstance(key, (float, np.floating)):
        f = float(key)
        if f.is_integer() and _I64_MIN <= f <= _I64_MAX:
            return int(f)
        return f
    return key


def encode_key(key: Any) -> bytes:
    t = type(key)
    if t is str:
        return b"s" + key.encode("utf-8", "surrogatepass")
    if t is int and _I64_MIN <= key <= _I64_MAX:
        return b"i" + key.to_bytes(8, "big", signed=True)
    if t is tuple:
        parts = [b"t"]
        for element in key:
            e = encode_key(element)
            parts.append(_U32.pack(len(e)))
            parts.append(e)
        return b"".join(parts)
    if key is None:
        return b"n"
    canonical = _canonical_number(key)
    if canonical is not key:
        return encode_key(canonical)
    if t is float:
        return b"f" + _DOUBLE.pack(key)
    if t is bytes:
        return b"b" + key
    return b"p" + pickle.dumps(key, protocol=5)


def decode_key(data: bytes | memoryview) -> Any:
    tag = data[0:1]
    body = bytes(data[1:])
    if tag == b"s":
        return body.decode("utf-8", "surrogatepass")
    if tag == b"i":
        return int.from_bytes(body, "big", signed=True)
    if tag == b"t":
        out, pos = [], 0
        while pos < len(body):
            (n,) = _U32.unpack_from(body, pos)
            out.append(decode_key(body[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        return tuple(out)
    if tag == b"n":
        return None
    if tag == b"f":
        return _DOUBLE.unpack(body)[0]
    if tag == b"b":
        return body
    if tag == b"p":
        return pickle.loads(body)
    raise StateCodecError(f"unknown key encoding tag {tag!r}")


def encode_value(value: Any) -> bytes:
    t = type(value)
    if t is int and _I64_MIN <= value <= _I64_MAX:
        return b"i" + value.to_bytes(8, "big", signed=True)
    if t is float:
        return b"f" + _DOUBLE.pack(value)
    if t is str:
        return b"s" + value.encode("utf-8", "surrogatepass")
    if t is TtlValue:
        return b"T" + value[1].to_bytes(8, "big", signed=True) + encode_value(value[0])
    return b"p" + pickle.dumps(value, protocol=5)


def decode_value(data: bytes) -> Any:
    tag = data[0]
    if tag == 0x69:  # i
        return int.from_bytes(data[1:], "big", signed=True)
    if tag == 0x66:  # f
        return _DOUBLE.unpack_from(data, 1)[0]
    if tag == 0x73:  # s
        return data[1:].decode("utf-8", "surrogatepass")
    if tag == 0x70:  # p
        return pickle.loads(data[1:])
    if tag == 0x54:  # T: a TTL state's (value, last-access timestamp)
        return TtlValue((decode_value(data[9:]), int.from_bytes(data[1:9], "big", signed=True)))
    raise StateCodecError(f"unknown value encoding tag {data[:1]!r}")


def frame(value: Any) -> bytes:
    """One list element: u32 length + encoded value."""
    e = encode_value(value)
    return _U32.pack(len(e)) + e


def encode_list(values: list) -> bytes:
    return b"".join(frame(v) for v in values)


def decode_list(data: bytes) -> list:
    out, pos, n = [], 0, len(data)
    while pos < n:
        (size,) = _U32.unpack_from(data, pos)
        out.append(decode_value(data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


def map_prefix(key_group_prefix: bytes, key_bytes: bytes) -> bytes:
    """Map state stores one RocksDB entry per user key: the state key is length-prefixed
    so that the entries of one key form a prefix range no other key can fall into."""
    return key_group_prefix + _U32.pack(len(key_bytes)) + key_bytes


def split_map_key(raw: bytes) -> tuple[bytes, bytes]:
    """RocksDB key of a map entry (without the key-group prefix) -> (key bytes, user key bytes)."""
    (n,) = _U32.unpack_from(raw, 0)
    return raw[4 : 4 + n], raw[4 + n :]
