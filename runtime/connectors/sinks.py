"""PrintSink and DiscardingSink."""

from __future__ import annotations

from ..api.types import print_string
from ..batch import num_rows, to_rows
from .base import Sink, SinkWriter


class PrintSink(Sink):
    """Prints every record as Flink does: ``<subtask>> record`` when parallel.

    A record prints as PyFlink's ``print()`` shows it for the stream's type (``type_info``, which
    ``stream.print()`` passes): ``str(record)`` when the stream has no declared type (PyFlink's
    pickled objects), ``+I[a,1]`` for a row type, Java's form for other types (``api.types.print_string``).
    On a cluster the lines go to the job manager's console over the control
    channel, so ``streamjob run`` shows them wherever the tasks run.
    """

    default_name = "Print"

    def __init__(self, sink_identifier: str | None = None, type_info=None):
        self.sink_identifier = sink_identifier
        self.type_info = type_info

    def create_writer(self, ctx) -> "PrintWriter":
        prefix = self.sink_identifier or ""
        if ctx.get_number_of_parallel_subtasks() > 1:
            prefix = f"{prefix}:{ctx.get_index_of_this_subtask() + 1}" if prefix else str(ctx.get_index_of_this_subtask() + 1)
        return PrintWriter(f"{prefix}> " if prefix else "", ctx._printer, self.type_info)


class PrintWriter(SinkWriter):
    def __init__(self, prefix: str, printer, type_info=None):
        self.prefix = prefix
        self.printer = printer
        self.type_info = type_info

    def write(self, batch) -> None:
        prefix, t = self.prefix, self.type_info
        if t is None:  # the common case, one str() per record
            self.printer([f"{prefix}{r}" for r in to_rows(batch)])
        else:
            self.printer([f"{prefix}{print_string(r, t)}" for r in to_rows(batch)])


class DiscardingSink(Sink):
    """Drops every record (for benchmarks and tests of everything before the sink)."""

    default_name = "Discard"

    def create_writer(self, ctx) -> "DiscardingWriter":
        return DiscardingWriter()


class DiscardingWriter(SinkWriter):
    def __init__(self) -> None:
        self.count = 0

    def write(self, batch) -> None:
        self.count += num_rows(batch)
