"""Rescaling in place: what a request to change a running job's parallelism becomes, and its record.

A rescale is Flink's adaptive scheduler's, done the streamjob way: the job manager waits for the next
completed checkpoint (asking for one at once), ends the attempt, and starts the barrier stage again at
the new parallelism from that checkpoint; key groups, operator state, unaligned channel state and Kafka
splits are redistributed as for any restore at another parallelism. No savepoint, no new driver.

Here only the decisions, no I/O: ``plan`` turns a request (the job's parallelism and/or per-operator
parallelism) into the job graph to run, or a ``RescaleRefused`` saying why not; ``RescaleRequest`` is
what the REST API reports of it. The job manager drives it, the executor applies it.

Parallelism is per task vertex, as in Flink (its unit is the job vertex, a chain): an operator named
in a request takes its chain with it, so the chain stays one task. Two operators of one chain given
different parallelism are refused, naming the chain.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..graph.job_graph import JobDefinitionError, JobGraph

QUEUED, CHECKPOINTING, RESTARTING, COMPLETED, FAILED = "QUEUED", "CHECKPOINTING", "RESTARTING", "COMPLETED", "FAILED"


class RescaleRefused(Exception):
    """The request cannot be carried out; ``status`` is the HTTP status that says why (400: the request
    itself, 409: the job's state or the cluster)."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.status = status


@dataclass
class RescaleRequest:
    """One rescale, from request to outcome."""

    id: str
    parallelism: int | None  # the job's new parallelism (None: unchanged)
    operators: dict[str, int]  # as asked: operator key -> parallelism
    before: dict[str, int]  # task vertex name -> parallelism, before
    after: dict[str, int]  # ... after
    graph: Any = field(repr=False, default=None)  # the JobGraph to run
    previous: Any = field(repr=False, default=None)  # the JobGraph it ran before (back to it if the new one fails)
    status: str = CHECKPOINTING
    checkpoint_id: int | None = None  # the checkpoint it restarts from
    error: str | None = None
    requested: float = field(default_factory=time.time)
    checkpointed: float | None = None  # the checkpoint completed, the attempt is being ended
    completed: float | None = None  # every task of the new attempt runs

    def same_target(self, parallelism: int | None, operators: dict[str, int]) -> bool:
        return self.parallelism == parallelism and self.operators == operators

    def summary(self) -> dict[str, Any]:
        def since(t: float | None, start: float | None) -> float | None:
            return None if t is None or start is None else round(t - start, 3)

        return {"id": self.id, "status": self.status, "parallelism": self.parallelism, "operators": self.operators,
                "before": self.before, "after": self.after, "checkpoint_id": self.checkpoint_id, "error": self.error,
                "requested_time": self.requested, "completed_time": self.completed,
                # how long it waited for its checkpoint, and from there until every new task ran
                "checkpoint_wait_s": since(self.checkpointed, self.requested),
                "restart_s": since(self.completed, self.checkpointed)}


def vertex_parallelism(graph: JobGraph) -> dict[str, int]:
    return {t.name(graph): t.parallelism for t in graph.tasks}


def _channel_edges(graph: JobGraph) -> set[tuple[int, int, int]]:
    return {(e.source, e.target, e.input_index) for e in graph.edges.values()
            if e.target not in graph.operators[e.source].chained_outputs}


def parse_request(body: dict) -> tuple[int | None, dict[str, int]]:
    """``{"parallelism": N, "operators": {"uid": N, ...}}`` (either or both), checked; 400s as RescaleRefused."""
    unknown = sorted(set(body) - {"parallelism", "operators"})
    if unknown:
        raise RescaleRefused(f"unknown field(s) {', '.join(map(repr, unknown))}; expected parallelism, operators", 400)
    parallelism = body.get("parallelism")
    operators = body.get("operators") or {}
    if parallelism is not None and (type(parallelism) is not int or parallelism < 1):
        raise RescaleRefused(f"field 'parallelism' must be an integer >= 1, got {parallelism!r}", 400)
    if not isinstance(operators, dict):
        raise RescaleRefused("field 'operators' must be an object: operator uid -> parallelism", 400)
    for key, n in operators.items():
        if type(n) is not int or n < 1:
            raise RescaleRefused(f"field 'operators': {key!r} must be an integer >= 1, got {n!r}", 400)
    if parallelism is None and not operators:
        raise RescaleRefused("nothing to change: give 'parallelism' (the job's) and/or 'operators' (uid -> "
                             "parallelism)", 400)
    return parallelism, dict(operators)


def plan(graph: JobGraph, parallelism: int | None, operators: dict[str, int], *, slots: int | None,
         unaligned: bool) -> JobGraph:
    """The job graph at the asked parallelism. ``slots``: what the cluster offers (None: it grows, as
    Spark on Kubernetes asks for executor pods); ``unaligned``: the job takes unaligned checkpoints, whose
    in-flight data cannot move into a chain that forms (or out of one that splits) at the new parallelism."""
    try:
        new = graph.rescaled(parallelism, graph.chain_overrides(operators))
    except JobDefinitionError as e:
        raise RescaleRefused(str(e), 400) from None
    if slots is not None and new.parallelism > slots:
        raise RescaleRefused(
            f"not enough slots: at the new parallelism the job needs {new.parallelism} slots, and Spark (local) "
            f"has {slots}; start the job with more (--master local[{new.parallelism}]) to rescale it this far")
    if unaligned and _channel_edges(new) != _channel_edges(graph):
        raise RescaleRefused(
            "at the new parallelism operators chain differently (a forward edge joins or leaves a chain), and the "
            "job takes unaligned checkpoints, whose in-flight data cannot move into or out of a chain: rescale "
            "the operators on both sides of the edge alike, or take a savepoint (always aligned) and run again")
    return new


def new_request(graph: JobGraph, new: JobGraph, parallelism: int | None, operators: dict[str, int]) -> RescaleRequest:
    return RescaleRequest(uuid.uuid4().hex[:16], parallelism, dict(operators), vertex_parallelism(graph),
                          vertex_parallelism(new), new, graph)


def unchanged(graph: JobGraph, new: JobGraph) -> bool:
    return all(new.operators[o].parallelism == op.parallelism for o, op in graph.operators.items())
