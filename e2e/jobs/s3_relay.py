"""A TCP relay in front of the object store, for the e2e suite's storage-outage test.

    /opt/streamjob/entrypoint.sh driver run /opt/streamjob/e2e/jobs/s3_relay.py LISTEN_PORT TARGET_URL

Runs as a pod of the streamjob image (through its entrypoint, as every pod the suite creates):
`streamjob run` executes this file as a script, and it never builds a job, so no Spark starts.
A StreamJob whose spec.s3.endpoint is this pod reaches its store through it; deleting the pod
is an outage of the network path to storage (connections refused or timing out), while the
store itself and everything in it stay as they were.

It listens on $STREAMJOB_BIND_HOST if set (the pod's own address where pods share a host, as
streamjob's own servers do), else on every address.
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.parse


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(listen_port: int, host: str, port: int) -> None:
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        except (OSError, asyncio.TimeoutError):
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    bind = os.environ.get("STREAMJOB_BIND_HOST") or None  # None: every address
    server = await asyncio.start_server(handle, bind, listen_port)
    print(f"relaying {bind or '*'}:{listen_port} -> {host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    listen, target = int(sys.argv[1]), urllib.parse.urlsplit(sys.argv[2])
    asyncio.run(serve(listen, target.hostname, target.port or (443 if target.scheme == "https" else 80)))
