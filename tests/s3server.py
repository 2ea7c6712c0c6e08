"""A real S3 API server for tests: moto's server in a subprocess on 127.0.0.1, and a TCP proxy
in front of it that the test can take down and bring back (the store "fails" for the job while
the server keeps its objects, as a real outage of the network path or the service would).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import boto3

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds (servers tests start)."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class MotoServer:
    """``python -m moto.server`` on a free port; stopped by ``close`` (and with the test process)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, **CREDENTIALS})
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("moto's S3 server did not start")
                time.sleep(0.1)

    def client(self, endpoint: str | None = None):
        return boto3.client("s3", endpoint_url=endpoint or self.url, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def close(self) -> None:
        stop_process(self.proc)


class Proxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``down()`` refuses and cuts every connection,
    ``up()`` accepts again on the same port."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._running = True
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self) -> None:
        self._running = False
        self.down()

    def _accept(self, listener: socket.socket) -> None:
        while self._running:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
