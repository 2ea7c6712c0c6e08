"""Live progress (records in/out per second per operator) and the end-of-job summary, on stderr.

PrintSink output goes to stdout, above the live table, so a job's output can be
piped while its progress stays on the terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .task.task_time import backpressure_level


def _rate(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M/s"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k/s"
    return f"{n:.0f}/s"


def _level(ratio: float) -> str:
    return f"{backpressure_level(ratio)} {ratio * 100:.0f}%"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class ProgressDisplay:
    def __init__(self, graph: Any, live: bool | None, summary: bool = True):
        self.graph = graph
        self.err = Console(stderr=True)
        self.out = Console(soft_wrap=True, highlight=False)
        self.live_enabled = self.err.is_terminal if live is None else live
        self.summary_enabled = summary
        self._live: Live | None = None
        self._last: dict[str, list[int]] = {}
        self._last_t = time.monotonic()
        self._rates: dict[str, tuple[float, float]] = {}
        self._task_times: dict = {}  # (task name, subtask) -> busy / back-pressured / idle ms per second
        self._lock = threading.Lock()
        self.started = time.time()
        self.coordinator: Any = None  # the checkpoint coordinator, when checkpointing is on

    def start(self) -> None:
        if self.live_enabled:
            self._live = Live(self._table({}), console=self.err, refresh_per_second=4, transient=True)
            self._live.start()

    def print_lines(self, lines: list[str]) -> None:
        with self._lock:
            text = "\n".join(lines)
            if self._live is not None:
                self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()

    def note(self, text: str) -> None:
        """A status line for the person at the terminal (stderr, not the job's output)."""
        self.err.print(text, markup=False, highlight=False, soft_wrap=True)  # URLs and paths stay whole

    def update(self, totals: dict[str, list[int]], task_times: dict | None = None) -> None:
        """``task_times``: (task name, subtask) -> its busy / back-pressured / idle ms per second."""
        if task_times is not None:
            self._task_times = task_times
        now = time.monotonic()
        dt = now - self._last_t
        if dt >= 0.5:
            for op, (rin, rout) in totals.items():
                prev = self._last.get(op, [0, 0])
                self._rates[op] = ((rin - prev[0]) / dt, (rout - prev[1]) / dt)
            self._last = {k: list(v) for k, v in totals.items()}
            self._last_t = now
        if self._live is not None:
            self._live.update(self._table(totals))

    def _table(self, totals: dict[str, list[int]], final: bool = False, seconds: float | None = None) -> Table:
        title = f"{self.graph.job_name}  parallelism {self.graph.parallelism}"
        if seconds is not None:
            title += f"  {seconds:.1f}s"
        # Job and operator names are the user's: Text, never markup ("[prod] totals" stays whole).
        table = Table(title=Text(title), title_justify="left", expand=False)
        table.add_column("operator")
        table.add_column("records in", justify="right")
        table.add_column("in/s" if not final else "avg in/s", justify="right")
        table.add_column("records out", justify="right")
        table.add_column("out/s" if not final else "avg out/s", justify="right")
        if not final:
            table.add_column("busy", justify="right")  # its task's busiest subtask (busyTimeMsPerSecond)
            table.add_column("back pressure", justify="right")
        task_of = {o: v.name(self.graph) for v in self.graph.tasks for o in v.operators}
        for op_id in self.graph.operator_order():
            name = self.graph.operators[op_id].name
            rin, rout = totals.get(str(op_id), [0, 0])
            if final:
                secs = max(seconds or 0.0, 1e-9)
                r_in, r_out = rin / secs, rout / secs
            else:
                r_in, r_out = self._rates.get(str(op_id), (0.0, 0.0))
            row = [Text(name), f"{rin:,}", _rate(r_in), f"{rout:,}", _rate(r_out)]
            if not final:
                times = [t for (task, _), t in self._task_times.items() if task == task_of.get(op_id)]
                busy = max((t["busyTimeMsPerSecond"] for t in times), default=None)
                bp = max((t["backPressuredTimeMsPerSecond"] for t in times), default=None)
                row += ["" if busy is None else f"{busy / 10:.0f}%", "" if bp is None else _level(bp / 1000)]
            table.add_row(*row)
        line = self.checkpoint_line()
        if line:
            table.caption = Text(line)
            table.caption_justify = "left"
        return table

    def checkpoint_line(self) -> str:
        cc = self.coordinator
        if cc is None:
            return ""
        history = list(cc.history)
        done = [s for s in history if s.status == "COMPLETED"]
        text = f"checkpoints: {cc.counts['COMPLETED']} completed, {cc.counts['FAILED']} failed, {len(cc.pending)} in progress"
        if done:
            s = done[-1].summary()
            text += (f"; last #{s['id']}: {_bytes(s['state_size'])} in {s['duration_ms']:.0f} ms "
                     f"(sync ≤{s['max_sync_ms']:.1f} ms, async ≤{s['max_async_ms']:.0f} ms, "
                     f"alignment ≤{s['max_alignment_ms']:.0f} ms)")
        return text

    def checkpoint_table(self) -> Table | None:
        cc = self.coordinator
        if cc is None or not cc.history:
            return None
        table = Table(title="checkpoints (newest 10; sync/async/align: slowest task)", title_justify="left")
        for col in ("id", "status", "at", "duration", "size", "sync", "async", "align"):
            table.add_column(col, justify="right" if col not in ("status", "at") else "left", no_wrap=True)
        for st in list(cc.history)[-10:]:
            s = st.summary()
            dur = "" if s["duration_ms"] is None else f"{s['duration_ms']:.0f} ms"
            table.add_row(str(s["id"]), Text(s["status"] + (f" ({s['failure']})" if s["failure"] else "")),
                          time.strftime("%H:%M:%S", time.localtime(s["trigger_time"])), dur, _bytes(s["state_size"]),
                          f"{s['max_sync_ms']:.1f} ms", f"{s['max_async_ms']:.0f} ms", f"{s['max_alignment_ms']:.0f} ms")
        return table

    def close(self, totals: dict[str, list[int]], status: str, seconds: float, extra: str = "") -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.summary_enabled:
            self.err.print(self._table(totals, final=True, seconds=seconds))
            cp = self.checkpoint_table()
            if cp is not None:
                self.err.print(cp)
            style = "green" if status == "FINISHED" else "red"
            self.err.print(Text.assemble((f"Job {self.graph.job_name!r} {status.lower()}", style),
                                         f" in {seconds:.1f}s{extra}"))
