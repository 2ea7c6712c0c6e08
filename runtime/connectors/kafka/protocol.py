"""A minimal Kafka wire-protocol client for the transaction coordinator requests librdkafka cannot make.

Why it exists: an exactly-once sink pre-commits a transaction at a checkpoint barrier and commits it
once the checkpoint is complete. If the task dies in between, the restored job must commit that
transaction *by its identity* (transactional id, producer id, epoch), as Flink's
``FlinkKafkaInternalProducer.resumeTransaction`` does. librdkafka (confluent-kafka) only commits a
transaction it began itself, and ``init_transactions()`` on the same transactional id *aborts* it. The
wire protocol has no such limit: ``EndTxn(transactional_id, producer_id, producer_epoch, committed)``
sent to the transaction coordinator commits whichever open transaction carries that identity.

What it speaks (each request at the highest version both sides know; ``ApiVersions`` first, on every
connection, as the protocol asks):

=====================  ====  =========  ==================================================================
request                key   versions   used for
=====================  ====  =========  ==================================================================
ApiVersions            18    3          the broker's versions, and its finalized ``transaction.version``
Metadata               3     12         the brokers of the cluster (ListTransactions asks each one)
FindCoordinator        10    4          the transaction coordinator of a transactional id (key type 1)
InitProducerId         22    3, 4       fence a transactional id: its open transaction is aborted
EndTxn                 26    3, 4       commit (or abort) a transaction by id, producer id and epoch
DescribeTransactions   65    0          state, producer id and epoch of transactional ids
ListTransactions       66    0          the transactions a broker coordinates (by state, producer id)
DescribeProducers      61    0          the open transactions on a partition (its leader's producer state)
WriteTxnMarkers        27    1          a commit/abort marker for a hanging transaction (needs ClusterAction)
SaslHandshake          17    1          SASL (PLAIN, SCRAM-SHA-256/512) on SASL_* listeners
SaslAuthenticate       36    2
=====================  ====  =========  ==================================================================

**Transaction version.** Kafka 4.x clusters run transaction protocol version 2 (KIP-890 part 2,
feature ``transaction.version=2``), under which every ``EndTxn`` bumps the producer epoch. The version
is chosen *per request* by the client: the coordinator handles ``EndTxn`` v5 and later with the
version 2 rules, and v0-v4 with the version 1 rules (``TransactionCoordinator.endTransaction`` ->
``endTransactionWithTV1``). librdkafka (2.16 at the time of writing) runs its transactions with the
version 1 requests (``AddPartitionsToTxn`` v0, ``EndTxn`` v1: see ``tests/test_kafka_protocol.py``,
which checks that a commit through librdkafka leaves the epoch unchanged), so the transactions the
sink writes are version 1 transactions, and the resume must speak version 1 too: ``EndTxn`` v4 at
most. That is also what makes the commit idempotent: under version 1 a commit of an already
committed transaction with the same producer id and epoch answers NONE, while under version 2 the
same request (same epoch, not one below the bumped one) answers INVALID_TXN_STATE. So the client
never sends ``EndTxn`` v5+.

Only what the sink needs is implemented: requests are sent one at a time per connection (no
pipelining), and a connection is closed on any error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable

CLIENT_ID = "streamjob-kafka-txn"
CLIENT_VERSION = "1"

# API keys
PRODUCE, METADATA, FIND_COORDINATOR, SASL_HANDSHAKE, API_VERSIONS = 0, 3, 10, 17, 18
INIT_PRODUCER_ID, END_TXN, SASL_AUTHENTICATE, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 22, 26, 36, 65, 66
WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 27, 61

API_NAMES = {PRODUCE: "Produce", METADATA: "Metadata", FIND_COORDINATOR: "FindCoordinator",
             SASL_HANDSHAKE: "SaslHandshake", API_VERSIONS: "ApiVersions", INIT_PRODUCER_ID: "InitProducerId",
             END_TXN: "EndTxn", SASL_AUTHENTICATE: "SaslAuthenticate",
             DESCRIBE_TRANSACTIONS: "DescribeTransactions", LIST_TRANSACTIONS: "ListTransactions",
             WRITE_TXN_MARKERS: "WriteTxnMarkers", DESCRIBE_PRODUCERS: "DescribeProducers"}

# The versions this client can encode, per API. EndTxn stops at 4 on purpose (module docstring).
SUPPORTED = {METADATA: (12,), FIND_COORDINATOR: (4,), INIT_PRODUCER_ID: (3, 4), END_TXN: (3, 4),
             DESCRIBE_TRANSACTIONS: (0,), LIST_TRANSACTIONS: (0,), SASL_HANDSHAKE: (1,), SASL_AUTHENTICATE: (2,),
             # WriteTxnMarkers v2 adds the marker's transaction version; v1 writes the legacy (TV0/TV1)
             # marker, the one librdkafka's version 1 transactions end with.
             DESCRIBE_PRODUCERS: (0,), WRITE_TXN_MARKERS: (1,)}
# From this version on a request has the flexible encoding (compact strings, tagged fields).
FIRST_FLEXIBLE = {METADATA: 9, FIND_COORDINATOR: 3, INIT_PRODUCER_ID: 2, END_TXN: 3, DESCRIBE_TRANSACTIONS: 0,
                  LIST_TRANSACTIONS: 0, SASL_HANDSHAKE: 99, SASL_AUTHENTICATE: 2, API_VERSIONS: 3,
                  DESCRIBE_PRODUCERS: 0, WRITE_TXN_MARKERS: 1}

ERRORS = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 33: "UNSUPPORTED_SASL_MECHANISM",
    29: "TOPIC_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 34: "ILLEGAL_SASL_STATE",
    35: "UNSUPPORTED_VERSION", 42: "INVALID_REQUEST", 47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING", 50: "INVALID_TRANSACTION_TIMEOUT",
    51: "CONCURRENT_TRANSACTIONS", 52: "TRANSACTION_COORDINATOR_FENCED",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 58: "SASL_AUTHENTICATION_FAILED", 90: "PRODUCER_FENCED",
    105: "TRANSACTIONAL_ID_NOT_FOUND", 107: "TRANSACTION_ABORTABLE",
}
# Worth retrying after a short pause: the coordinator is moving, loading, or finishing a transaction.
RETRIABLE = {7, 14, 15, 16, 51, 52}
# A partition's leader is moving (a broker restarting): look the leaders up again before the retry.
LEADER_MOVING = {5, 6}
# Refused by the cluster's ACLs.
AUTHORIZATION = {29, 31, 53}
# The coordinator of the id is elsewhere now: look it up again before the retry.
REFIND = {15, 16, 52}


class KafkaProtocolError(Exception):
    """A broker answered with an error code (``code``, ``name``), or the conversation failed."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code
        self.name = ERRORS.get(code, f"error {code}") if code is not None else None


class BrokersUnreachable(KafkaProtocolError):
    """No bootstrap server answered (retried until the client's timeout: a broker may be restarting)."""


def error_name(code: int) -> str:
    return ERRORS.get(code, f"error {code}")


# -- encoding ------------------------------------------------------------------------------------

def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class Writer:
    """Request body builder; ``flexible`` selects compact strings and arrays (KIP-482)."""

    def __init__(self, flexible: bool):
        self.flexible = flexible
        self.parts: list[bytes] = []

    def int8(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">b", v))
        return self

    def int16(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> "Writer":
        self.parts.append(struct.pack(">q", v))
        return self

    def boolean(self, v: bool) -> "Writer":
        return self.int8(1 if v else 0)

    def string(self, s: str | None) -> "Writer":
        if s is None:
            self.parts.append(uvarint(0) if self.flexible else struct.pack(">h", -1))
            return self
        data = s.encode()
        self.parts.append(uvarint(len(data) + 1) if self.flexible else struct.pack(">h", len(data)))
        self.parts.append(data)
        return self

    def bytes_(self, data: bytes) -> "Writer":
        self.parts.append(uvarint(len(data) + 1) if self.flexible else struct.pack(">i", len(data)))
        self.parts.append(data)
        return self

    def array(self, items: list | None, each: Callable[["Writer", Any], Any]) -> "Writer":
        if items is None:
            self.parts.append(uvarint(0) if self.flexible else struct.pack(">i", -1))
            return self
        self.parts.append(uvarint(len(items) + 1) if self.flexible else struct.pack(">i", len(items)))
        for item in items:
            each(self, item)
        return self

    def tags(self) -> "Writer":
        """No tagged fields (flexible versions end every structure with their count)."""
        if self.flexible:
            self.parts.append(uvarint(0))
        return self

    def build(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """Response body parser (same encodings as ``Writer``)."""

    def __init__(self, data: bytes, flexible: bool, pos: int = 0):
        self.data = data
        self.flexible = flexible
        self.pos = pos

    def _take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def array(self, each: Callable[["Reader"], Any]) -> list:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        return [each(self) for _ in range(max(n, 0))]

    def tags(self) -> dict[int, bytes]:
        """Tagged fields, raw (tag -> bytes); empty for non-flexible versions."""
        if not self.flexible:
            return {}
        fields = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            fields[tag] = self.data[self.pos:self.pos + size]
            self.pos += size
        return fields


# -- connections -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Security:
    """The client properties (librdkafka / Java names) that decide how to connect."""

    protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    mechanism: str = "PLAIN"  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    username: str | None = None
    password: str | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    check_hostname: bool = True

    @staticmethod
    def from_properties(props: dict[str, Any]) -> "Security":
        protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security.protocol {protocol!r} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
        mechanism = str(props.get("sasl.mechanism", props.get("sasl.mechanisms", "PLAIN"))).upper()
        if protocol.startswith("SASL") and mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError(f"sasl.mechanism {mechanism!r}: the transaction client of the Kafka sink speaks PLAIN, "
                             "SCRAM-SHA-256 and SCRAM-SHA-512")
        algorithm = str(props.get("ssl.endpoint.identification.algorithm", "https")).lower()
        return Security(protocol, mechanism, props.get("sasl.username"), props.get("sasl.password"),
                        props.get("ssl.ca.location"), props.get("ssl.certificate.location"),
                        props.get("ssl.key.location"), props.get("ssl.key.password"), algorithm != "none")


class Connection:
    """One TCP (or TLS) connection to one broker, ``ApiVersions`` done, SASL authenticated."""

    def __init__(self, host: str, port: int, security: Security = Security(), timeout_s: float = 10.0):
        self.address = f"{host}:{port}"
        self.correlation = 0
        sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            if security.protocol in ("SSL", "SASL_SSL"):
                context = ssl.create_default_context(cafile=security.ca_location)
                context.check_hostname = security.check_hostname
                if security.certificate_location:
                    context.load_cert_chain(security.certificate_location, security.key_location,
                                            security.key_password)
                sock = context.wrap_socket(sock, server_hostname=host)
            self.sock = sock
            self.versions = self._api_versions()
            if security.protocol.startswith("SASL"):
                self._authenticate(security)
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionError(f"broker {self.address} closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def send(self, api_key: int, version: int, body: bytes) -> Reader:
        """One request and its response; returns a reader positioned after the response header."""
        self.correlation += 1
        flexible = version >= FIRST_FLEXIBLE.get(api_key, 99)
        client_id = CLIENT_ID.encode()
        # Request header v1 (api key, version, correlation id, nullable client id as an int16 string),
        # v2 adds (empty) tagged fields for flexible requests. The client id stays a classic string
        # in v2 too: the header keeps the old encoding for compatibility with brokers' parsers.
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client_id)) + client_id
        if flexible:
            header += uvarint(0)
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._recv(4))[0]
        data = self._recv(size)
        reader = Reader(data, flexible)
        if reader.int32() != self.correlation:
            raise KafkaProtocolError(f"broker {self.address}: response to another request (correlation id)")
        # Response header v1 (flexible) has tagged fields after the correlation id, except for
        # ApiVersions, whose response header is always v0 so that any client can read it.
        if flexible and api_key != API_VERSIONS:
            reader.tags()
        return reader

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` that this client encodes and the broker accepts."""
        lo, hi = self.versions.get(api_key, (0, -1))
        usable = [v for v in SUPPORTED[api_key] if lo <= v <= hi]
        if not usable:
            raise KafkaProtocolError(
                f"broker {self.address} accepts {API_NAMES.get(api_key, api_key)} versions {lo}-{hi}, the Kafka "
                f"sink's transaction client speaks {SUPPORTED[api_key]}: Kafka 3.0 or later is needed")
        return max(usable)

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        body = Writer(True).string(CLIENT_ID).string(CLIENT_VERSION).tags().build()
        r = self.send(API_VERSIONS, 3, body)
        code = r.int16()
        if code:
            raise KafkaProtocolError(f"broker {self.address}: ApiVersions v3 failed: {error_name(code)} "
                                     "(Kafka 2.4 or later is needed)", code)

        def entry(r: Reader) -> tuple[int, int, int]:
            key, lo, hi = r.int16(), r.int16(), r.int16()
            r.tags()
            return key, lo, hi

        versions = {key: (lo, hi) for key, lo, hi in r.array(entry)}
        r.int32()  # throttle time
        tags = r.tags()
        self.features = {}
        if 2 in tags:  # FinalizedFeatures: name, max version level, min version level
            t = Reader(tags[2], True)

            def feature(r: Reader) -> tuple[str, int]:
                name, level = r.string(), r.int16()
                r.int16()
                r.tags()
                return name, level

            self.features = dict(t.array(feature))
        return versions

    def _authenticate(self, security: Security) -> None:
        r = self.send(SASL_HANDSHAKE, 1, Writer(False).string(security.mechanism).build())
        code = r.int16()
        if code:
            offered = r.array(Reader.string)
            raise KafkaProtocolError(f"broker {self.address} refuses SASL mechanism {security.mechanism} "
                                     f"(it offers {offered})", code)
        if security.username is None or security.password is None:
            raise KafkaProtocolError(f"SASL {security.mechanism}: sasl.username and sasl.password are needed")
        if security.mechanism == "PLAIN":
            self._sasl_step(b"\0" + security.username.encode() + b"\0" + security.password.encode())
        else:
            _scram(self, security)

    def _sasl_step(self, token: bytes) -> bytes:
        r = self.send(SASL_AUTHENTICATE, 2, Writer(True).bytes_(token).tags().build())
        code, message = r.int16(), r.string()
        if code:
            raise KafkaProtocolError(f"broker {self.address}: SASL authentication failed: {message or error_name(code)}",
                                     code)
        return r.bytes_() or b""


def _scram(conn: Connection, security: Security) -> None:
    """SCRAM (RFC 5802) over SaslAuthenticate: client-first, server-first, client-final, server-final."""
    digest = hashlib.sha256 if security.mechanism == "SCRAM-SHA-256" else hashlib.sha512
    name = security.mechanism.split("-", 1)[1].replace("-", "").lower()  # sha256 / sha512 for pbkdf2_hmac
    user = security.username.replace("=", "=3D").replace(",", "=2C")  # type: ignore[union-attr]
    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = f"n={user},r={nonce}"
    server_first = conn._sasl_step(("n,," + first_bare).encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields["r"].startswith(nonce):
        raise KafkaProtocolError(f"broker {conn.address}: SCRAM server nonce does not extend the client's")
    salted = hashlib.pbkdf2_hmac(name, security.password.encode(), base64.b64decode(fields["s"]),  # type: ignore[union-attr]
                                 int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    final_bare = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = conn._sasl_step(f"{final_bare},p={proof}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    if server_final != f"v={expected}":
        raise KafkaProtocolError(f"broker {conn.address}: SCRAM server signature does not verify")


# -- the client ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Empty, ...


@dataclass(frozen=True)
class ProducerState:
    """An active producer of a partition, as its leader keeps it (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open on the partition


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: dict[str, list[int]]


def _parse_servers(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in str(servers).split(","):
        item = item.strip()
        if not item:
            continue
        for scheme in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
            if item.upper().startswith(scheme):
                item = item[len(scheme):]
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class TransactionClient:
    """Talks to the transaction coordinators of a cluster. Not thread-safe; cheap to create.

    Every call retries what the protocol says is transient (coordinator loading or moving, a
    transaction still completing) until ``timeout_s`` has passed, then raises with the last error.
    """

    def __init__(self, bootstrap_servers: str, properties: dict[str, Any] | None = None, timeout_s: float = 30.0):
        self.bootstrap = bootstrap_servers
        self.servers = _parse_servers(bootstrap_servers)
        self.security = Security.from_properties(properties or {})
        self.timeout_s = timeout_s
        self._connections: dict[tuple[str, int], Connection] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}

    def close(self) -> None:
        for c in self._connections.values():
            c.close()
        self._connections.clear()

    def __enter__(self) -> "TransactionClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # connections --------------------------------------------------------------------------------
    def _connect(self, address: tuple[str, int]) -> Connection:
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = Connection(address[0], address[1], self.security,
                                                           min(10.0, self.timeout_s))
        return conn

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def _any_broker(self) -> tuple[Connection, tuple[str, int]]:
        """A connection to the first bootstrap server (or known broker) that answers."""
        errors = []
        for address in list(self._connections) + self.servers:
            try:
                return self._connect(address), address
            except (OSError, KafkaProtocolError) as e:
                self._drop(address)
                errors.append(f"{address[0]}:{address[1]}: {e}")
        raise BrokersUnreachable(f"no Kafka broker of {self.bootstrap} answers ({'; '.join(errors)})")

    def _retrying(self, what: str, attempt: Callable[[], Any]) -> Any:
        """Run ``attempt`` until it returns, retrying transient errors (with a growing pause)."""
        deadline = time.monotonic() + self.timeout_s
        pause = 0.02
        while True:
            try:
                return attempt()
            except KafkaProtocolError as e:
                transient = e.code in RETRIABLE or isinstance(e, BrokersUnreachable)
                if not transient or time.monotonic() + pause > deadline:
                    raise
            except (OSError, ConnectionError, struct.error) as e:  # a broker restarting, a closed socket
                for address in list(self._connections):
                    self._drop(address)
                self._coordinators.clear()
                if time.monotonic() + pause > deadline:
                    raise KafkaProtocolError(f"{what}: Kafka at {self.bootstrap} unreachable: {e}") from e
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    # requests ---------------------------------------------------------------------------------------
    def api_versions(self) -> dict[int, tuple[int, int]]:
        return self._retrying("ApiVersions", lambda: self._any_broker()[0].versions)

    def finalized_features(self) -> dict[str, int]:
        """The cluster's finalized feature levels, e.g. ``{"transaction.version": 2, ...}``."""
        return self._retrying("ApiVersions", lambda: dict(self._any_broker()[0].features))

    def brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every broker (Metadata for no topic)."""

        def attempt() -> list[tuple[int, str, int]]:
            conn, _ = self._any_broker()
            v = conn.version(METADATA)
            body = (Writer(True).array([], lambda w, t: None)  # no topics: just the brokers
                    .boolean(False).boolean(False).tags().build())
            r = conn.send(METADATA, v, body)
            r.int32()  # throttle

            def broker(r: Reader) -> tuple[int, str, int]:
                node, host, port = r.int32(), r.string(), r.int32()
                r.string()  # rack
                r.tags()
                return node, host, port

            return r.array(broker)

        return self._retrying("Metadata", attempt)

    def find_coordinator(self, transactional_id: str, refresh: bool = False) -> tuple[str, int]:
        """The (host, port) of the broker that coordinates ``transactional_id``'s transactions."""
        if not refresh and transactional_id in self._coordinators:
            return self._coordinators[transactional_id]

        def attempt() -> tuple[str, int]:
            conn, _ = self._any_broker()
            v = conn.version(FIND_COORDINATOR)
            # v4+: key type 1 (transaction), the keys as a batch (one here)
            body = Writer(True).int8(1).array([transactional_id], Writer.string).tags().build()
            r = conn.send(FIND_COORDINATOR, v, body)
            r.int32()  # throttle

            def coordinator(r: Reader) -> tuple[str, int, str, int, int, str | None]:
                key, node, host, port = r.string(), r.int32(), r.string(), r.int32()
                code, message = r.int16(), r.string()
                r.tags()
                return key, node, host, port, code, message  # type: ignore[return-value]

            (_key, _node, host, port, code, message), = r.array(coordinator)
            if code:
                raise KafkaProtocolError(f"FindCoordinator({transactional_id}): {error_name(code)}"
                                         f"{': ' + message if message else ''}", code)
            return host, port

        address = self._retrying("FindCoordinator", attempt)
        self._coordinators[transactional_id] = address
        return address

    def _to_coordinator(self, transactional_id: str, what: str, request: Callable[[Connection], Any]) -> Any:
        """Send ``request`` to the coordinator of ``transactional_id``; rediscover it when it moved."""

        def attempt() -> Any:
            address = self.find_coordinator(transactional_id)
            try:
                return request(self._connect(address))
            except KafkaProtocolError as e:
                if e.code in REFIND:
                    self._coordinators.pop(transactional_id, None)
                raise

        return self._retrying(what, attempt)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool = True) -> None:
        """Commit (or abort) the transaction of ``transactional_id`` with this producer id and epoch.

        Idempotent: a transaction already committed with the same identity answers NONE (the
        version 1 rules, see the module docstring). Raises ``KafkaProtocolError`` with the broker's
        code otherwise: PRODUCER_FENCED (the id has a newer epoch: re-initialized, or the
        coordinator aborted the transaction after ``transaction.timeout.ms``), INVALID_TXN_STATE
        (it was aborted), INVALID_PRODUCER_ID_MAPPING (the coordinator does not know the id).
        """

        def request(conn: Connection) -> None:
            v = conn.version(END_TXN)
            body = (Writer(True).string(transactional_id).int64(producer_id).int16(producer_epoch)
                    .boolean(commit).tags().build())
            r = conn.send(END_TXN, v, body)
            r.int32()  # throttle
            code = r.int16()
            if code:
                raise KafkaProtocolError(
                    f"EndTxn({'commit' if commit else 'abort'} {transactional_id}, producer id {producer_id}, "
                    f"epoch {producer_epoch}): {error_name(code)}", code)

        self._to_coordinator(transactional_id, "EndTxn", request)

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int = 60_000) -> tuple[int, int]:
        """What ``init_transactions()`` does: fence every earlier producer of ``transactional_id``
        (bump its epoch) and abort its open transaction. Returns the new (producer id, epoch).
        While the abort completes the coordinator answers CONCURRENT_TRANSACTIONS: retried."""

        def request(conn: Connection) -> tuple[int, int]:
            v = conn.version(INIT_PRODUCER_ID)
            body = (Writer(True).string(transactional_id).int32(transaction_timeout_ms)
                    .int64(-1).int16(-1)  # no expected producer id / epoch: a fresh start, as init_transactions
                    .tags().build())
            r = conn.send(INIT_PRODUCER_ID, v, body)
            r.int32()  # throttle
            code, pid, epoch = r.int16(), r.int64(), r.int16()
            if code:
                hint = (" (larger than the broker's transaction.max.timeout.ms?)" if code == 50 else "")
                raise KafkaProtocolError(f"InitProducerId({transactional_id}): {error_name(code)}{hint}", code)
            return pid, epoch

        return self._to_coordinator(transactional_id, "InitProducerId", request)

    def describe_transactions(self, transactional_ids: list[str]) -> dict[str, TransactionDescription]:
        """The coordinator's view of each id (ids it does not know are left out)."""
        out: dict[str, TransactionDescription] = {}
        for tid in transactional_ids:
            def request(conn: Connection, tid: str = tid) -> TransactionDescription | None:
                r = conn.send(DESCRIBE_TRANSACTIONS, conn.version(DESCRIBE_TRANSACTIONS),
                              Writer(True).array([tid], Writer.string).tags().build())
                r.int32()  # throttle

                def state(r: Reader) -> tuple[int, TransactionDescription]:
                    code, txn_id, st = r.int16(), r.string(), r.string()
                    timeout, _start, pid, epoch = r.int32(), r.int64(), r.int64(), r.int16()

                    def topic(r: Reader) -> tuple[str, list[int]]:
                        name, parts = r.string(), r.array(Reader.int32)
                        r.tags()
                        return name, parts  # type: ignore[return-value]

                    topics = dict(r.array(topic))
                    r.tags()
                    return code, TransactionDescription(txn_id, st, pid, epoch, timeout, topics)  # type: ignore[arg-type]

                (code, desc), = r.array(state)
                if code == 105:  # TRANSACTIONAL_ID_NOT_FOUND
                    return None
                if code:
                    raise KafkaProtocolError(f"DescribeTransactions({tid}): {error_name(code)}", code)
                return desc

            desc = self._to_coordinator(tid, "DescribeTransactions", request)
            if desc is not None:
                out[tid] = desc
        return out

    def list_transactions(self, states: tuple[str, ...] = ("Ongoing",),
                          producer_ids: list[int] | None = None) -> list[TransactionListing]:
        """Transactions in ``states`` (all states: empty) on every broker of the cluster (each
        coordinates its own), only those of ``producer_ids`` if given."""
        out: list[TransactionListing] = []
        for _node, host, port in self.brokers():
            def attempt(address: tuple[str, int] = (host, port)) -> list[TransactionListing]:
                conn = self._connect(address)
                body = (Writer(True).array(list(states), Writer.string)
                        .array(list(producer_ids or []), Writer.int64).tags().build())
                r = conn.send(LIST_TRANSACTIONS, conn.version(LIST_TRANSACTIONS), body)
                r.int32()  # throttle
                code = r.int16()
                if code:
                    raise KafkaProtocolError(f"ListTransactions on {address[0]}:{address[1]}: {error_name(code)}",
                                             code)
                r.array(Reader.string)  # unknown state filters

                def listing(r: Reader) -> TransactionListing:
                    tid, pid, st = r.string(), r.int64(), r.string()
                    r.tags()
                    return TransactionListing(tid, pid, st)  # type: ignore[arg-type]

                return r.array(listing)

            out.extend(self._retrying("ListTransactions", attempt))
        return out


    # partitions ------------------------------------------------------------------------------------
    def partition_leaders(self, topics: list[str]) -> dict[tuple[str, int], tuple[str, int] | None]:
        """(topic, partition) -> (host, port) of its leader, None while it has none (Metadata v12)."""

        def attempt() -> dict[tuple[str, int], tuple[str, int] | None]:
            conn, _ = self._any_broker()
            v = conn.version(METADATA)

            def topic_req(w: Writer, name: str) -> None:
                w.parts.append(bytes(16))  # no topic id: by name
                w.string(name).tags()

            body = Writer(True).array(list(topics), topic_req).boolean(False).boolean(False).tags().build()
            r = conn.send(METADATA, v, body)
            r.int32()  # throttle

            def broker(r: Reader) -> tuple[int, tuple[str, int]]:
                node, host, port = r.int32(), r.string(), r.int32()
                r.string()  # rack
                r.tags()
                return node, (host, port)  # type: ignore[return-value]

            nodes = dict(r.array(broker))
            r.string()  # cluster id
            r.int32()  # controller id
            out: dict[tuple[str, int], tuple[str, int] | None] = {}

            def partition(r: Reader) -> tuple[int, int, int]:
                code, index, leader = r.int16(), r.int32(), r.int32()
                r.int32()  # leader epoch
                r.array(Reader.int32), r.array(Reader.int32), r.array(Reader.int32)  # replicas, isr, offline
                r.tags()
                return code, index, leader

            def topic(r: Reader) -> None:
                code, name = r.int16(), r.string()
                r.pos += 16  # topic id
                r.int8()  # internal
                parts = r.array(partition)
                r.int32()  # authorized operations
                r.tags()
                if code:
                    raise KafkaProtocolError(f"Metadata({name}): {error_name(code)}", code)
                for _code, index, leader in parts:
                    out[(name, index)] = nodes.get(leader)  # type: ignore[index]

            r.array(topic)
            return out

        return self._retrying("Metadata", attempt)

    def describe_producers(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], list[ProducerState]]:
        """The active producers of each partition, asked of its leader (a leaderless partition is
        asked again until it has one or the client's timeout passes)."""
        return self._to_leaders("DescribeProducers", partitions, self._describe_producers)

    def _describe_producers(self, conn: Connection, partitions: list[tuple[str, int]]) -> dict:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)

        def topic_req(w: Writer, item: tuple[str, list[int]]) -> None:
            w.string(item[0]).array(item[1], Writer.int32).tags()

        r = conn.send(DESCRIBE_PRODUCERS, conn.version(DESCRIBE_PRODUCERS),
                      Writer(True).array(sorted(by_topic.items()), topic_req).tags().build())
        r.int32()  # throttle
        out: dict[tuple[str, int], Any] = {}

        def producer(r: Reader) -> ProducerState:
            pid, epoch = r.int64(), r.int32()
            r.int32(), r.int64()  # last sequence, last timestamp
            coordinator_epoch, start = r.int32(), r.int64()
            r.tags()
            return ProducerState(pid, epoch, coordinator_epoch, start)

        def topic(r: Reader) -> None:
            name = r.string()

            def partition(r: Reader) -> None:
                index, code, message = r.int32(), r.int16(), r.string()
                producers = r.array(producer)
                r.tags()
                out[(name, index)] = (KafkaProtocolError(  # type: ignore[index]
                    f"DescribeProducers({name}-{index}) on {conn.address}: {error_name(code)}"
                    f"{': ' + message if message else ''}", code) if code else producers)

            r.array(partition)
            r.tags()

        r.array(topic)
        return out

    def write_txn_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          partitions: list[tuple[str, int]]) -> None:
        """Write a commit (or abort) marker of producer id/epoch to each partition, at its leader:
        what the coordinator does at the end of a transaction (and ``kafka-transactions.sh abort``
        for a hanging one). The broker refuses it (CLUSTER_AUTHORIZATION_FAILED) unless the client
        may ClusterAction on the cluster."""

        def request(conn: Connection, parts: list[tuple[str, int]]) -> dict:
            by_topic: dict[str, list[int]] = {}
            for t, p in parts:
                by_topic.setdefault(t, []).append(p)

            def topic_req(w: Writer, item: tuple[str, list[int]]) -> None:
                w.string(item[0]).array(item[1], Writer.int32).tags()

            def marker(w: Writer, _: Any) -> None:
                (w.int64(producer_id).int16(producer_epoch).boolean(commit)
                 .array(sorted(by_topic.items()), topic_req).int32(coordinator_epoch).tags())

            r = conn.send(WRITE_TXN_MARKERS, conn.version(WRITE_TXN_MARKERS),
                          Writer(True).array([None], marker).tags().build())
            out: dict[tuple[str, int], Any] = {}
            what = f"WriteTxnMarkers({'commit' if commit else 'abort'}, producer id {producer_id}, epoch {producer_epoch})"

            def result(r: Reader) -> None:
                r.int64()

                def topic(r: Reader) -> None:
                    name = r.string()

                    def partition(r: Reader) -> None:
                        index, code = r.int32(), r.int16()
                        r.tags()
                        out[(name, index)] = (KafkaProtocolError(  # type: ignore[index]
                            f"{what} on {name}-{index}: {error_name(code)}", code) if code else None)

                    r.array(partition)
                    r.tags()

                r.array(topic)
                r.tags()

            r.array(result)
            return out

        self._to_leaders("WriteTxnMarkers", partitions, request)

    def _to_leaders(self, what: str, partitions: list[tuple[str, int]],
                    request: Callable[[Connection, list[tuple[str, int]]], dict]) -> dict:
        """Send ``request`` for each partition to its leader; partitions whose leader moved (or had
        none) are asked again after a fresh leader lookup. Raises the first other partition error."""
        results: dict[tuple[str, int], Any] = {}
        todo = list(partitions)

        def attempt() -> dict:
            leaders = self.partition_leaders(sorted({t for t, _ in todo}))
            by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
            moving = None
            for tp in todo:
                leader = leaders.get(tp)
                if leader is None:
                    moving = KafkaProtocolError(f"{what}: {tp[0]}-{tp[1]} has no leader", 5)
                else:
                    by_leader.setdefault(leader, []).append(tp)
            for leader, parts in by_leader.items():
                try:
                    answers = request(self._connect(leader), parts)
                except (OSError, ConnectionError, struct.error):
                    self._drop(leader)
                    raise
                for tp in parts:
                    answer = answers.get(tp)
                    if isinstance(answer, KafkaProtocolError):
                        if answer.code in LEADER_MOVING:
                            moving = answer
                            continue
                        raise answer
                    results[tp] = answer
                    todo.remove(tp)
            if todo:
                raise KafkaProtocolError(str(moving), 7)  # retried (as REQUEST_TIMED_OUT) until the timeout
            return results

        return self._retrying(what, attempt)


__all__ = ["KafkaProtocolError", "TransactionClient", "TransactionDescription", "TransactionListing", "Connection",
           "Security", "error_name", "ProducerState"]
