"""Clients that hang up leave no tracebacks: a job manager (REST API, metrics, control channel) in a
process of its own, with real sockets, whose console (stderr) the test reads afterwards.

Probes that give up, scrapers that time out, tabs closed while a request is on its way and task
processes that die mid-message are ordinary events for a job manager; none is an error of it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(__file__)


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client process that is killed or times out does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode()


def test_clients_hanging_up_leave_no_traceback_on_the_job_managers_console(tmp_path):
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "jm_process.py"), f"file://{tmp_path}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        host, port = info["rest"].removeprefix("http://").rsplit(":", 1)
        rest = (host, int(port))
        control = tuple(info["control"])

        for path in ("/v1/job", "/v1/checkpoints", "/metrics"):
            s = socket.create_connection(rest)  # the whole request, then gone before the answer
            s.sendall(get(path))
            reset(s)
            s = socket.create_connection(rest)  # gone in the middle of the request line
            s.sendall(get(path)[:12])
            reset(s)
            # Gone while the server writes: it answers requests the client never reads until the
            # socket buffers are full, then the client resets.
            s = socket.create_connection(rest)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(get(path) * 2000)
            time.sleep(0.3)
            reset(s)
        s = socket.create_connection(rest)  # gone in the middle of a request body
        s.sendall(b"POST /v1/savepoints HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"stop\"")
        time.sleep(0.3)
        reset(s)
        s = socket.create_connection(rest)  # the same, closing its side only
        s.sendall(b"POST /v1/savepoints HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"stop\"")
        time.sleep(0.3)
        s.shutdown(socket.SHUT_WR)
        s.recv(1000)
        s.close()

        # Malformed requests (a port scan, TLS to plain HTTP, a broken header, a 10 MB chunked body with no valid
        # chunk size): a 400 each, and on the console not aiohttp's traceback quoting the request's bytes.
        for data in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\xaa" * 500,
                     b"GET /v1/job HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
                     b"POST /v1/savepoints HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + b"x" * (10 << 20),
                     b"POST /v1/savepoints HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab\r\nzzzz\r\n"):
            s = socket.create_connection(rest)
            s.settimeout(5)
            try:
                s.sendall(data)
                answer = s.recv(100)
            except OSError:
                answer = b""  # answered and reset before all of it was sent
            assert not answer or answer.startswith(b"HTTP/1.0 400 "), (data[:80], answer)
            reset(s)

        # Task connections: one gone mid-message before registering, one registered task killed, one
        # registered task killed in the middle of a message.
        s = socket.create_connection(control)
        s.sendall(b'{"type": "regis')
        reset(s)
        for slot, tail in ((0, b""), (1, b'{"type": "metr')):
            s = socket.create_connection(control, timeout=10)  # a job manager blocked on its console fails here
            s.sendall(json.dumps({"type": "register", "slot": slot, "attempt": 0, "pid": 1}).encode() + b"\n" + tail)
            assert json.loads(s.makefile("rb").readline())["type"] == "deploy"
            reset(s)

        time.sleep(0.5)
        with urllib.request.urlopen(info["rest"] + "/v1/job?peek=true", timeout=5) as response:
            assert response.status == 200  # still serving
        out, err = proc.communicate("", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Error handling request" not in err, err[:3000]
    assert "xxxx" not in err and "Bad Header" not in err and "\\xaa" not in err, err[:3000]
    # A task whose connection drops is a lost task of the attempt: recorded as a failure, not logged as a crash.
    failures = json.loads(out.splitlines()[-1])["failures"]
    assert sorted(failures) == [f"slot {n}/2 raised TaskLost: the task process of slot {n} exited without "
                                f"reporting (killed, or out of memory?)" for n in (1, 2)]
