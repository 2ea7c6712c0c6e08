"""The REST address a `streamjob run` started by a bench announces ("REST API and metrics at URL")."""

from __future__ import annotations

import re
import subprocess
import time


def rest_address(proc: subprocess.Popen, log: list[str], timeout: float = 300.0) -> str:
    """The URL once the job's output (``log``, filled by the caller's reader thread) says it; the output's
    tail in the error if the job ends or does not say it within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (m := re.search(r"REST API and metrics at (http://\S+)", "".join(log))):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the job did not start:\n" + "".join(log)[-3000:])
        time.sleep(0.1)
    return m.group(1)
