"""PrintSink and DiscardingSink."""

from __future__ import annotations

from ..api.types import Row
from ..batch import num_rows, to_rows
from .base import Sink, SinkWriter


class PrintSink(Sink):
    """Prints every record as Flink does: ``<subtask>> record`` when parallel.

    On a cluster the lines go to the job manager's console over the control
    channel, so ``streamjob run`` shows them wherever the tasks run.
    """

    default_name = "Print"

    def __init__(self, sink_identifier: str | None = None):
        self.sink_identifier = sink_identifier

    def create_writer(self, ctx) -> "PrintWriter":
        prefix = self.sink_identifier or ""
        if ctx.get_number_of_parallel_subtasks() > 1:
            prefix = f"{prefix}:{ctx.get_index_of_this_subtask() + 1}" if prefix else str(ctx.get_index_of_this_subtask() + 1)
        return PrintWriter(f"{prefix}> " if prefix else "", ctx._printer)


class PrintWriter(SinkWriter):
    def __init__(self, prefix: str, printer):
        self.prefix = prefix
        self.printer = printer

    def write(self, batch) -> None:
        prefix = self.prefix
        # A Row prints as Flink's Java side prints it (+I[Alice, 11]), as a PyFlink job's print() shows.
        self.printer([f"{prefix}{r.to_flink_string() if type(r) is Row else r}" for r in to_rows(batch)])


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
