"""TCP between slots: one connection per ordered pair of slots.

Slot ``i`` opens a connection to every other slot ``j`` and sends its data for
``j`` on it; ``j`` sends credits for those channels back on the same socket.
Everything is non-blocking and driven by the slot's single loop (``poll``), so
a slot never blocks on a peer: a full socket just leaves bytes queued, and the
credits bound how many.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections import deque
from typing import Any

from ..sockets import recv_exact
from .channels import InputChannel, OutputChannel
from .wire import ARROW, ARROW_STAMPED, CREDIT, CREDIT_GRANT, EVENT, HEADER, HELLO, PICKLE, decode, encode_batch, encode_event, frame

_RECV_SIZE = 1 << 20
_IOV_MAX = 64


class PeerLost(ConnectionError):
    def __init__(self, slot: int, detail: str):
        super().__init__(f"lost the connection to slot {slot}: {detail}")
        self.slot = slot


class Connection:
    def __init__(self, transport: "Transport", sock: socket.socket, peer: int, outgoing: bool):
        self.transport = transport
        self.sock = sock
        self.peer = peer
        self.outgoing = outgoing  # data from this slot to peer flows on it
        self._out: deque[memoryview] = deque()
        self.out_bytes = 0
        self._in = bytearray()
        self._want_write = False
        self._shutdown_requested = False
        self._write_shut = False
        self.closed = False

    # -- writing -------------------------------------------------------------
    def send(self, parts: list) -> None:
        if self.closed:
            # Only credits can still be sent after the peer is done (it has
            # consumed everything it needed); data to a lost peer already raised.
            return
        for p in parts:
            mv = memoryview(p).cast("B")
            if mv.nbytes:
                self._out.append(mv)
                self.out_bytes += mv.nbytes
        self.try_write()

    def try_write(self) -> None:
        out = self._out
        while out:
            bufs = [out[i] for i in range(min(len(out), _IOV_MAX))]
            try:
                sent = self.sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                raise PeerLost(self.peer, f"send failed: {e}") from e
            self.out_bytes -= sent
            while sent:
                head = out[0]
                if sent >= head.nbytes:
                    sent -= head.nbytes
                    out.popleft()
                else:
                    out[0] = head[sent:]
                    sent = 0
        self._set_write_interest(bool(out))
        if not out and self._shutdown_requested and not self._write_shut:
            self._write_shut = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def shutdown_write(self) -> None:
        """Send FIN once every queued byte is out; keep reading until the peer's FIN."""
        self._shutdown_requested = True
        self.try_write()

    def _set_write_interest(self, want: bool) -> None:
        if want != self._want_write:
            self._want_write = want
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.transport.selector.modify(self.sock, events, self)

    # -- reading -------------------------------------------------------------
    def on_readable(self) -> bool:
        try:
            data = self.sock.recv(_RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            self.closed = True
            self.transport.on_closed(self, f"receive failed: {e}")
            return True
        if not data:
            self.closed = True
            self.transport.on_closed(self, "closed by peer")
            return True
        buf = self._in
        buf += data
        pos = 0
        size = len(buf)
        hsize = HEADER.size
        while size - pos >= hsize:
            length, kind, edge = HEADER.unpack_from(buf, pos)
            if size - pos - hsize < length:
                break
            start = pos + hsize
            payload = bytes(buf[start : start + length])
            pos = start + length
            self.transport.on_frame(self, kind, edge, payload)
        if pos:
            del buf[:pos]
        return True


class Transport:
    def __init__(self, slot: int, host: str, initial_credits: int):
        self.slot = slot
        self.initial_credits = initial_credits
        self.selector = selectors.DefaultSelector()
        self.server = socket.create_server((host, 0), backlog=128)
        self.address = self.server.getsockname()[:2]
        self.out_conns: dict[int, Connection] = {}
        self.in_conns: dict[int, Connection] = {}
        self.inputs: dict[tuple[int, int], InputChannel] = {}
        self.outputs: dict[tuple[int, int], OutputChannel] = {}

    # -- wiring ----------------------------------------------------------------
    def input_channel(self, edge: int, peer: int, input_index: int, source_subtask: int | None = None) -> InputChannel:
        """From slot ``peer``, which runs subtask ``source_subtask`` (default: ``peer``) of the edge's source;
        the two differ when slot sharing groups give the source's group slots of its own."""
        ch = InputChannel(edge, peer if source_subtask is None else source_subtask, input_index)

        def return_credit(n: int, edge: int = edge, src: int = peer) -> None:
            self.in_conns[src].send(frame(CREDIT_GRANT, edge, CREDIT.pack(n)))

        ch.return_credit = return_credit
        self.inputs[(edge, peer)] = ch
        return ch

    def output_channel(self, edge: int, peer: int, batch_size: int, buffer_timeout_ms: int) -> OutputChannel:
        """To slot ``peer`` (which runs the target's subtask)."""
        def deliver(item: Any, is_data: bool, edge: int = edge, dst: int = peer) -> None:
            if is_data:
                kind, payload = encode_batch(item)
            else:
                kind, payload = EVENT, encode_event(item)
            self.out_conns[dst].send(frame(kind, edge, payload))

        ch = OutputChannel(deliver, batch_size, buffer_timeout_ms)
        self.outputs[(edge, peer)] = ch
        return ch

    def connect(self, addresses: list[tuple[str, int]], timeout: float = 60.0) -> None:
        """Open connections to every other slot and accept theirs; then grant credits."""
        deadline = time.monotonic() + timeout
        peers = [j for j in range(len(addresses)) if j != self.slot]
        for j in peers:
            sock = socket.create_connection(tuple(addresses[j]), timeout=max(1.0, deadline - time.monotonic()))
            sock.sendall(b"".join(bytes(p) for p in frame(HELLO, 0, CREDIT.pack(self.slot))))
            self._adopt(sock, j, outgoing=True)
        self.server.settimeout(max(1.0, deadline - time.monotonic()))
        while len(self.in_conns) < len(peers):
            try:
                sock, _ = self.server.accept()
            except socket.timeout:
                missing = sorted(set(peers) - set(self.in_conns))
                raise PeerLost(missing[0], f"slots {missing} did not connect within {timeout:.0f}s") from None
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            header = recv_exact(sock, HEADER.size, "handshake")
            length, kind, _ = HEADER.unpack(header)
            if kind != HELLO or length != CREDIT.size:
                sock.close()
                continue
            (peer,) = CREDIT.unpack(recv_exact(sock, length, "handshake"))
            self._adopt(sock, peer, outgoing=False)
        self.server.close()
        for (edge, src), _ch in self.inputs.items():
            self.in_conns[src].send(frame(CREDIT_GRANT, edge, CREDIT.pack(self.initial_credits)))

    def _adopt(self, sock: socket.socket, peer: int, outgoing: bool) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, sock, peer, outgoing)
        (self.out_conns if outgoing else self.in_conns)[peer] = conn
        self.selector.register(sock, selectors.EVENT_READ, conn)

    # -- events ----------------------------------------------------------------
    def on_frame(self, conn: Connection, kind: int, edge: int, payload: bytes) -> None:
        if kind == CREDIT_GRANT:
            (n,) = CREDIT.unpack(payload)
            self.outputs[(edge, conn.peer)].add_credits(n)
        elif kind in (ARROW, ARROW_STAMPED, PICKLE, EVENT):
            self.inputs[(edge, conn.peer)].push(decode(kind, payload))
        else:
            raise PeerLost(conn.peer, f"unexpected frame kind {kind}")

    def on_closed(self, conn: Connection, detail: str) -> None:
        self.selector.unregister(conn.sock)
        conn.sock.close()
        if conn.outgoing:
            unfinished = [k for k, ch in self.outputs.items() if k[1] == conn.peer and not (ch.closed and ch.is_idle())]
        else:
            unfinished = [k for k, ch in self.inputs.items() if k[1] == conn.peer and not _has_end(ch)]
        if unfinished:
            raise PeerLost(conn.peer, detail)

    def poll(self, timeout: float) -> bool:
        """Move bytes: read what arrived, write what is queued. True if anything happened."""
        if not self.selector.get_map():  # parallelism 1 without a job manager: nothing to wait on
            if timeout > 0:
                time.sleep(timeout)
            return False
        events = self.selector.select(timeout)
        for key, mask in events:
            conn: Connection = key.data
            if conn.closed:
                continue
            if mask & selectors.EVENT_WRITE:
                conn.try_write()
            if mask & selectors.EVENT_READ:
                conn.on_readable()
        return bool(events)

    def finish(self, timeout: float) -> None:
        """Close gracefully: every slot half-closes and reads until its peers have too.

        Closing a socket with unread bytes makes the kernel send RST, which can
        drop data the peer has not read yet (its last batches, its
        EndOfPartition), so each side waits for the other's FIN.
        """
        conns = list(self.out_conns.values()) + list(self.in_conns.values())
        for conn in conns:
            conn.shutdown_write()
        deadline = time.monotonic() + timeout
        while any(not c.closed for c in conns) and time.monotonic() < deadline:
            self.poll(0.05)
        self.close()

    def pending_bytes(self) -> int:
        return sum(c.out_bytes for c in self.out_conns.values()) + sum(c.out_bytes for c in self.in_conns.values())

    def close(self) -> None:
        for conn in list(self.out_conns.values()) + list(self.in_conns.values()):
            if not conn.closed:
                conn.closed = True
                try:
                    self.selector.unregister(conn.sock)
                except (KeyError, ValueError):
                    pass
                conn.sock.close()
        try:
            self.server.close()
        except OSError:
            pass
        self.selector.close()


def _has_end(ch: InputChannel) -> bool:
    from .events import EndOfPartition

    return ch.finished or any(isinstance(i, EndOfPartition) for i in ch.queue)


