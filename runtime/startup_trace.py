"""Where the start-up time goes: timestamps of named moments, for ``bench/startup.py --breakdown``.

Off unless ``STREAMJOB_STARTUP_TRACE`` names a file; then every process of the job (the driver,
and the Spark Python workers, which inherit the driver's environment through the JVM) appends
``<epoch seconds> <pid> <event>`` lines to it. One ``os.environ`` look-up per moment when off:
the moments are a handful per job, never per record.
"""

from __future__ import annotations

import os
import time

TRACE_ENV = "STREAMJOB_STARTUP_TRACE"
_process_noted: set[int] = set()


def process_start_time() -> float | None:
    """When this process was started (epoch seconds, 10 ms resolution; Linux only)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22, starttime, after the comm field
        # starttime counts clock ticks since boot; /proc/stat's btime is whole seconds (up to 1 s off),
        # so the boot is placed from the clock since boot instead.
        since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - since_start
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def mark(event: str) -> None:
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    now = time.time()
    pid = os.getpid()
    lines = []
    if pid not in _process_noted:  # the first moment of a process also says when the process began
        _process_noted.add(pid)
        began = process_start_time()
        if began is not None:
            lines.append(f"{began:.6f} {pid} process start\n")
    lines.append(f"{now:.6f} {pid} {event}\n")
    with open(path, "a") as f:  # one short append per line: concurrent processes do not interleave within one
        f.write("".join(lines))
