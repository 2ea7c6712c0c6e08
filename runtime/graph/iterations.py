"""Iterations in the job graph: which operators and edges each loop takes, and what is refused.

``stream.iterate()`` makes a loop whose back-edges (``Edge.feedback``: the iteration's id) go from
the operators given to ``close_with`` (the tails) to the loop's head: the iteration head (input 1:
the feedback) or the two-input operator of ``with_feedback_type`` (input 2 in the API, index 1
here). A back-edge is a channel edge like any other (forward, or keyed by key group); only the
task reading it treats it apart (task/iteration.py): it aligns no barrier on it, takes no
watermark from it, and counts what it brings for the termination rounds.

The loop's members are the operators on a path from the head back to it: reachable from the head
and reaching a tail. Termination probes travel on the edges between members (``loop_edges``), so
every member task hears them from all its loop inputs. Pure: no Spark, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api import transformations as T


@dataclass
class Iteration:
    id: int  # the FEEDBACK transformation's id: what back-edges, probes and control messages name
    name: str  # "Iteration 1": as errors and the plan name it
    head: int  # operator id
    back_edges: list[int]  # edge ids, tails -> head
    members: set[int] = field(default_factory=set)  # operator ids on the loop, the head included
    loop_edges: set[int] = field(default_factory=set)  # edges between members, back-edges included
    max_wait_time_ms: int | None = None

    def describe(self, operators: dict[int, Any]) -> str:
        return f"{self.name} (head {operators[self.head].name!r})"


def check_closed(transformations: list[Any], error: type[Exception]) -> None:
    """Every loop got its feedback (``close_with``): else its head would wait for it for ever."""
    for t in transformations:
        if t.kind == T.FEEDBACK and not t.inputs:
            raise error(f"{t.name} is never closed: feed records back with iteration.close_with(feedback_stream) "
                        "(a loop without feedback is not a loop; drop the iterate() call)")


def find_iterations(operators: dict[int, Any], edges: dict[int, Any], transformations: list[Any],
                    error: type[Exception]) -> list[Iteration]:
    """The job's loops, checked: one head per loop, loops apart, nothing in a body the termination check
    cannot see. (The feedback's parallelism is checked as the edges are made: before forward becomes rebalance.)"""
    feedbacks = {t.id: t for t in transformations if t.kind == T.FEEDBACK}
    loops: dict[int, Iteration] = {}
    for e in edges.values():
        if e.feedback is None:
            continue
        fb = feedbacks[e.feedback]
        it = loops.get(e.feedback)
        if it is None:
            it = loops[e.feedback] = Iteration(e.feedback, fb.name, e.target, [],
                                               max_wait_time_ms=fb.params.get("max_wait_time_ms"))
        elif it.head != e.target:
            raise error(f"{fb.name}: its feedback is read by two operators, {operators[it.head].name!r} and "
                        f"{operators[e.target].name!r}; a loop has one head (make one operator on the "
                        "ConnectedIterativeStreams, and branch after it)")
        it.back_edges.append(e.id)
    for it in loops.values():
        _members(it, edges)
    _check_apart(list(loops.values()), operators, error)
    for it in loops.values():
        for o in sorted(it.members):
            if operators[o].kind == T.ASYNC_WAIT:
                raise error(f"{it.describe(operators)}: operator {operators[o].name!r} (async I/O) is inside the loop; "
                            "records it holds in flight escape the loop's termination check, so async I/O in a loop "
                            "body comes in a later version: put it before or after the loop")
    return sorted(loops.values(), key=lambda it: it.id)


def _members(it: Iteration, edges: dict[int, Any]) -> None:
    out: dict[int, list[int]] = {}
    into: dict[int, list[int]] = {}
    for e in edges.values():
        out.setdefault(e.source, []).append(e.target)
        into.setdefault(e.target, []).append(e.source)
    ahead = _reach(it.head, out)
    behind = set()
    for b in it.back_edges:
        behind |= _reach(edges[b].source, into)
    it.members = (ahead & behind) | {it.head}
    it.loop_edges = {e.id for e in edges.values() if e.source in it.members and e.target in it.members}


def _reach(start: int, links: dict[int, list[int]]) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        for n in links.get(stack.pop(), ()):
            if n not in seen:
                seen.add(n)
                stack.append(n)
    return seen


def _check_apart(loops: list[Iteration], operators: dict[int, Any], error: type[Exception]) -> None:
    """Loops that share operators (one inside the other's body) would each wait for the other's
    termination probe on the shared back-edges: refused in this version, naming both."""
    for i, a in enumerate(loops):
        for b in loops[i + 1:]:
            shared = a.members & b.members
            if shared:
                names = ", ".join(repr(operators[o].name) for o in sorted(shared))
                raise error(f"{a.name} and {b.name} share operators ({names}): nested or overlapping loops come "
                            "in a later version; make them separate loops, one after the other")
