"""What a connector implements.

A source is a picklable description; each subtask asks it for a reader of its
share (``create_reader``). A reader's ``poll`` returns a batch, ``None`` when
nothing is there yet (``wakeup_at`` says when to ask again), or ``END`` when
its share is exhausted. A sink likewise hands each subtask a writer.
"""

from __future__ import annotations

from typing import Any

from ..api.functions import RuntimeContext
from ..batch import Batch
from ..config import Options


class _End:
    def __repr__(self) -> str:
        return "END"


END = _End()


class Source:
    default_name = "Source"

    def create_reader(self, ctx: RuntimeContext) -> "SourceReader":
        raise NotImplementedError


class SourceReader:
    def poll(self) -> Batch | None | _End:
        raise NotImplementedError

    def wakeup_at(self, now: float) -> float:
        return now + 0.01

    def close(self) -> None:
        pass


class Sink:
    default_name = "Sink"

    def create_writer(self, ctx: RuntimeContext) -> "SinkWriter":
        raise NotImplementedError


class SinkWriter:
    def write(self, batch: Batch) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """End of input: make everything written so far visible."""

    def close(self) -> None:
        pass


def batch_size_of(ctx: RuntimeContext) -> int:
    return int(ctx.get_job_parameter(Options.BATCH_SIZE, 8192))


def share(ctx: RuntimeContext) -> tuple[int, int]:
    return ctx.get_index_of_this_subtask(), ctx.get_number_of_parallel_subtasks()


__all__ = ["END", "Source", "SourceReader", "Sink", "SinkWriter", "batch_size_of", "share", "Any"]
