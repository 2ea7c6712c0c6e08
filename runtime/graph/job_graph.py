"""Logical plan -> job graph: operators, edges, and chains (tasks).

Virtual transformations (``key_by``, ``rebalance``, ``union``) become edge
properties. An operator is chained to its input (runs in the same task, called
directly, no channel) when it has exactly one input and that input is a
forward edge, and neither asked for a new chain (``start_new_chain``,
``disable_chaining``) nor sits in another slot sharing group; every other edge
becomes a channel edge between tasks.

Parallelism is per operator, as in Flink: ``set_parallelism`` (and
``set_max_parallelism``) on the operator, else the job's. An edge left forward by
the program (no partitioning named) becomes rebalance where the parallelism
changes, as Flink's StreamGraph does; an explicit ``forward()`` across a change
is refused. So a chain (and a task vertex) has one parallelism. Hash edges route
by the target operator's own key groups (its max parallelism, its parallelism).

Slot sharing, as Flink: operators of different slot sharing groups never share a
slot. An operator without a group of its own (``slot_sharing_group``) takes its
inputs' group when they all have the same, else "default" (Flink's
StreamGraphGenerator rule; sources: "default"). Each group gets its own range of
slots, as many as the largest parallelism in it, in the order the groups first
appear; within a group, slot ``offset + i`` runs subtask i of every task vertex
of the group whose parallelism is above i (a lower-parallelism operator is absent
from the higher slots). So the job needs the sum over groups of their largest
parallelism (``JobGraph.parallelism``, the barrier stage's size), and an edge
between groups (even forward) crosses slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api import transformations as T
from ..api.transformations import KeySpec, Transformation
from ..config import Configuration, Options
from ..keygroups import check_max_parallelism
from .iterations import Iteration, check_closed, find_iterations


DEFAULT_GROUP = "default"  # Flink's name of the slot sharing group of operators that name none


class JobDefinitionError(ValueError):
    """The job as written cannot run; the message says what to change."""


@dataclass
class Edge:
    id: int
    source: int  # operator id
    target: int  # operator id
    partitioner: str  # T.FORWARD / T.HASH / T.REBALANCE
    key: KeySpec | None = None
    input_index: int = 0  # 0 or 1 for two-input operators
    tag: str | None = None  # a side output of the source operator (OutputTag name); None: its main output
    explicit: bool = False  # the program named the partitioning (forward() cannot change parallelism)
    feedback: int | None = None  # a loop's back-edge: the id of its iteration (graph/iterations.py)


@dataclass
class OperatorNode:
    id: int
    kind: str
    name: str
    uid: str | None
    fn: Any
    params: dict
    inputs: list[int] = field(default_factory=list)  # edge ids
    outputs: list[int] = field(default_factory=list)  # edge ids
    chained_outputs: list[int] = field(default_factory=list)  # operator ids (forward, same task)
    channel_outputs: list[int] = field(default_factory=list)  # edge ids leaving the task
    position: int = 0  # 1-based place among the job's operators, in the order the program made them
    parallelism: int = 1  # its own (set_parallelism), else the job's
    max_parallelism: int = 128  # its own (set_max_parallelism), else the job's: its key groups
    chaining: str | None = None  # T.NEW_CHAIN / T.NO_CHAINING, or None
    slot_sharing_group: str = DEFAULT_GROUP  # its own, else its inputs' when they agree, else "default"

    @property
    def state_key(self) -> str:
        """Identity in checkpoints: the uid when set, else the operator's place in the program,
        which is the same every time the same program builds the job (ids are process-wide)."""
        return self.uid or f"op{self.position or self.id}"

    @property
    def is_source(self) -> bool:
        return self.kind == T.SOURCE

    @property
    def is_sink(self) -> bool:
        return self.kind == T.SINK


@dataclass
class TaskVertex:
    """A chain of operators run together in one subtask."""

    id: int
    head: int
    operators: list[int]  # topological order, head first
    input_edges: list[int]  # channel edges into the head
    parallelism: int = 1  # of every operator in the chain
    slot_sharing_group: str = DEFAULT_GROUP  # of every operator in the chain
    first_slot: int = 0  # subtask i runs in slot first_slot + i (the group's first slot)

    def slot_of(self, subtask: int) -> int:
        return self.first_slot + subtask

    def subtask_in(self, slot: int) -> int | None:
        """Which of its subtasks runs in ``slot``; None when none does."""
        i = slot - self.first_slot
        return i if 0 <= i < self.parallelism else None

    def name(self, graph: "JobGraph") -> str:
        return " -> ".join(graph.operators[o].name for o in self.operators)


@dataclass
class JobGraph:
    job_name: str
    parallelism: int  # slots: over slot sharing groups, the sum of each group's largest parallelism
    max_parallelism: int  # the job's; an operator may have its own (OperatorNode.max_parallelism)
    operators: dict[int, OperatorNode]
    edges: dict[int, Edge]
    tasks: list[TaskVertex]
    config: dict[str, Any]

    default_parallelism: int | None = None  # the job's (env.set_parallelism); None: same as ``parallelism``
    iterations: list[Iteration] = field(default_factory=list)  # the job's loops (stream.iterate())
    # Parallelism set from outside the program (a rescale: pipeline.jobvertex-parallelism-overrides),
    # operator key -> parallelism; kept by the next rescale unless it sets them again.
    overrides: dict[str, int] = field(default_factory=dict)
    # What the graph was built from, to build it again at another parallelism (``rescaled``). Driver
    # only: never sent to the tasks (``__getstate__``).
    definition: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "definition": None}

    def rescaled(self, parallelism: int | None = None, overrides: dict[str, int] | None = None) -> "JobGraph":
        """The same job at another parallelism: ``parallelism`` the job's (None: unchanged), ``overrides``
        operator key (uid, else ``op<position>``) -> its own, on top of the earlier overrides. Raises
        ``JobDefinitionError`` as the build does (above an operator's max parallelism, a forward edge ...)."""
        if self.definition is None:
            raise JobDefinitionError("this job graph was not built by build_job_graph: it cannot be rebuilt")
        transformations, config, job_name = self.definition
        config = Configuration(dict(config))
        if parallelism is not None:
            config.set(Options.PARALLELISM, parallelism)
        return build_job_graph(transformations, config, job_name, {**self.overrides, **(overrides or {})})

    def chain_overrides(self, operators: dict[str, int]) -> dict[str, int]:
        """Per-operator parallelism from one given by operator key (uid, else ``op<position>``): a key sets
        its whole chain, which runs as one task at one parallelism (how a rescale request and
        ``pipeline.jobvertex-parallelism-overrides`` name job vertices). Raises ``JobDefinitionError`` for a
        key no operator has and for two keys in one chain asked at different parallelism."""
        by_key = self.operator_by_key()
        unknown = sorted(set(operators) - set(by_key))
        if unknown:
            raise JobDefinitionError(f"no operator {', '.join(map(repr, unknown))} in job {self.job_name!r}; its "
                                     f"operators are {', '.join(repr(k) for k in by_key)} (uids, else op<n>)")
        overrides: dict[str, int] = {}
        named_by: dict[str, str] = {}  # operator key -> the key that named its chain
        for key, n in operators.items():
            task = self.task_of(by_key[key].id)
            for op_id in task.operators:
                member = self.operators[op_id].state_key
                if member in overrides and overrides[member] != n:
                    raise JobDefinitionError(
                        f"{named_by[member]!r} and {key!r} are chained in one task ({task.name(self)}), which runs at "
                        f"one parallelism: give them the same, or split the chain in the program (start_new_chain)")
                overrides[member], named_by[member] = n, key
        return overrides

    def operator_by_key(self) -> dict[str, OperatorNode]:
        """Operators by the keys a rescale names them with: uid, else ``op<position>`` (their state key)."""
        return {op.state_key: op for op in self.operators.values()}

    def task_of(self, operator_id: int) -> "TaskVertex":
        return next(t for t in self.tasks if operator_id in t.operators)

    def operator_order(self) -> list[int]:
        return [o for t in self.tasks for o in t.operators]

    @property
    def uniform(self) -> bool:
        """Every operator at the same parallelism and max parallelism (no set_parallelism in use)."""
        return all(op.parallelism == self.parallelism and op.max_parallelism == self.max_parallelism
                   for op in self.operators.values())

    def plan(self) -> dict[str, Any]:
        """The graph as JSON, for the REST API and the dashboard: task vertices (chains) with their
        operators in chain order, and every edge between operators (``chained``: a direct call in
        the same task, no channel). Operator ids are strings, as in the tasks' metric reports."""
        vertex_of = {o: t.id for t in self.tasks for o in t.operators}
        return {
            "vertices": [{"id": t.id, "name": t.name(self), "parallelism": t.parallelism,
                          "max_parallelism": self.operators[t.head].max_parallelism, "first_slot": t.first_slot,
                          "operators": [{"id": str(o), "name": self.operators[o].name, "kind": self.operators[o].kind,
                                         "uid": self.operators[o].uid, "key": self.operators[o].state_key}
                                        for o in t.operators]}
                         for t in self.tasks],
            "edges": [{"source": str(e.source), "target": str(e.target), "source_vertex": vertex_of[e.source],
                       "target_vertex": vertex_of[e.target], "partitioner": e.partitioner.upper(),
                       "key": e.key.describe() if e.key is not None else None, "side_output": e.tag,
                       "input": e.input_index, "chained": e.target in self.operators[e.source].chained_outputs,
                       **({"feedback": True} if e.feedback is not None else {})}
                      for e in self.edges.values()],
        }

    def describe(self) -> str:
        default = self.default_parallelism or self.parallelism
        slots = f", {self.parallelism} slots" if self.parallelism != default else ""
        lines = [f"Job {self.job_name!r}: parallelism {default}{slots}, max parallelism {self.max_parallelism}"]
        for task in self.tasks:
            ins = ", ".join(
                f"{self.operators[self.edges[e].source].name} ={self.edges[e].partitioner}"
                f"{' feedback' if self.edges[e].feedback is not None else ''}=>" for e in task.input_edges
            )
            own = f" [parallelism {task.parallelism}]" if task.parallelism != default else ""
            if task.slot_sharing_group != DEFAULT_GROUP:
                own += f" [slot sharing group {task.slot_sharing_group!r}]"
            lines.append(f"  task {task.id}: {(ins + ' ') if ins else ''}{task.name(self)}{own}")
        return "\n".join(lines)


def _display_names(nodes: list[Transformation]) -> dict[int, str]:
    prefix = {T.SOURCE: "Source: ", T.SINK: "Sink: "}
    names: dict[int, str] = {}
    seen: dict[str, int] = {}
    for t in nodes:
        base = t.name if t.name.startswith(("Source:", "Sink:")) else prefix.get(t.kind, "") + t.name
        n = seen.get(base, 0) + 1
        seen[base] = n
        names[t.id] = base if n == 1 else f"{base} ({n})"
    return names


def build_job_graph(transformations: list[Transformation], config: Configuration, job_name: str,
                    overrides: dict[str, int] | None = None) -> JobGraph:
    """``overrides``: operator key (uid, else ``op<position>``) -> parallelism, above the program's own
    (``set_parallelism``): what a rescale sets. A key no operator has is refused, naming those there are."""
    parallelism = config.get_int(Options.PARALLELISM)
    max_parallelism = config.get_int(Options.MAX_PARALLELISM)
    if parallelism < 1:
        raise JobDefinitionError(f"parallelism must be >= 1, got {parallelism}")
    try:
        check_max_parallelism(max_parallelism, parallelism)
    except ValueError as e:
        raise JobDefinitionError(str(e)) from None

    check_closed(transformations, JobDefinitionError)
    real = [t for t in transformations if t.kind not in T.VIRTUAL_KINDS]
    if not any(t.kind == T.SOURCE for t in real):
        raise JobDefinitionError("the job has no source: add one with env.from_source(...)")
    if not any(t.kind == T.SINK for t in real):
        raise JobDefinitionError("the job has no sink: add one with stream.sink_to(...) or stream.print()")
    loops = [t.name for t in transformations if t.kind == T.FEEDBACK]
    mode = _runtime_mode(config, [t for t in real if t.kind == T.SOURCE], loops)
    names = _display_names(real)
    overrides = dict(overrides or {})
    operators = {
        t.id: OperatorNode(t.id, t.kind, names[t.id], t.uid, t.fn, dict(t.params), position=pos,
                           parallelism=overrides.get(t.uid or f"op{pos}") or t.parallelism or parallelism,
                           max_parallelism=t.max_parallelism or max_parallelism,
                           chaining=t.chaining)
        for pos, t in enumerate(sorted(real, key=lambda t: t.id), start=1)
    }
    unknown = sorted(set(overrides) - {op.state_key for op in operators.values()})
    if unknown:
        raise JobDefinitionError(f"no operator {', '.join(map(repr, unknown))} in the job; its operators are "
                                 f"{', '.join(repr(op.state_key) for op in operators.values())} (uids, else op<n>)")
    given = {t.id: t.slot_sharing_group for t in real}
    for op in operators.values():
        if op.parallelism < 1:
            raise JobDefinitionError(f"operator {op.name!r}: parallelism must be >= 1, got {op.parallelism}")
        if op.parallelism > op.max_parallelism:
            raise JobDefinitionError(f"operator {op.name!r}: parallelism {op.parallelism} is above its max parallelism "
                                     f"{op.max_parallelism}; raise the max parallelism (set_max_parallelism) or lower "
                                     "the parallelism")

    # Resolve virtual nodes into (upstream operator, partitioner, key, side output) tuples.
    def upstreams(t: Transformation, partitioner: str, key: KeySpec | None, tag: str | None = None,
                  explicit: bool = False, feedback: int | None = None
                  ) -> list[tuple[int, str, KeySpec | None, str | None, bool, int | None]]:
        if t.kind == T.UNION:
            return [u for i in t.inputs for u in upstreams(i, partitioner, key, tag, explicit, feedback)]
        if t.kind == T.FEEDBACK:  # a loop's back-edges: from each stream given to close_with
            return [u for i in t.inputs for u in upstreams(i, partitioner, key, tag, explicit, t.id)]
        if t.kind == T.PARTITION:
            # The partitioning nearest to the consumer wins, as in Flink.
            if partitioner == T.FORWARD and not explicit:
                # rescale() is forward where the parallelism stays, round-robin where it changes (as Flink's)
                partitioner, key = t.params["partitioner"], t.params.get("key")
                explicit = "rescale" if t.params.get("rescale") else True
            return upstreams(t.inputs[0], partitioner, key, tag, explicit, feedback)
        if t.kind == T.SIDE_OUTPUT:  # its input is the process operator itself (the API checks)
            return upstreams(t.inputs[0], partitioner, key, t.params["tag"], explicit, feedback)
        return [(t.id, partitioner, key, tag, explicit, feedback)]

    edges: dict[int, Edge] = {}
    feedback_names = {t.id: t.name for t in transformations if t.kind == T.FEEDBACK}
    for t in real:
        for input_index, inp in enumerate(t.inputs):
            for src, partitioner, key, tag, explicit, feedback in upstreams(inp, T.FORWARD, None):
                if feedback is not None and operators[src].parallelism != operators[t.id].parallelism:
                    raise JobDefinitionError(
                        f"{feedback_names[feedback]}: the feedback comes from {operators[src].name!r} at parallelism "
                        f"{operators[src].parallelism}, but the loop's head {operators[t.id].name!r} runs at "
                        f"parallelism {operators[t.id].parallelism}; feedback parallelism follows the head's "
                        "(set_parallelism on the feedback stream's operator)")
                if partitioner == T.FORWARD and operators[src].parallelism != operators[t.id].parallelism:
                    if explicit is True:
                        raise JobDefinitionError(
                            f"forward() from {operators[src].name!r} (parallelism {operators[src].parallelism}) to "
                            f"{operators[t.id].name!r} (parallelism {operators[t.id].parallelism}): forward "
                            "partitioning does not allow a change of parallelism; use rebalance(), shuffle(), "
                            "broadcast() or key_by(), or give both the same parallelism")
                    partitioner = T.REBALANCE  # Flink's choice where the parallelism changes
                e = Edge(len(edges) + 1, src, t.id, partitioner, key, input_index, tag, bool(explicit), feedback)
                edges[e.id] = e
                operators[t.id].inputs.append(e.id)
                operators[src].outputs.append(e.id)

    # Slot sharing groups, in creation order (inputs are made before the operators that read them).
    for op in sorted(operators.values(), key=lambda o: o.id):
        # (a back-edge's source is made after the head: the head takes its group from its regular input)
        inherited = {operators[edges[e].source].slot_sharing_group for e in op.inputs if edges[e].feedback is None}
        op.slot_sharing_group = given[op.id] or (inherited.pop() if len(inherited) == 1 else DEFAULT_GROUP)

    # Chaining.
    chained_into: dict[int, int] = {}
    for op in operators.values():
        if len(op.inputs) == 1 and not op.is_source and op.chaining is None:
            e = edges[op.inputs[0]]
            up = operators[e.source]
            if (e.partitioner == T.FORWARD and op.kind not in T.TWO_INPUT_KINDS and up.chaining != T.NO_CHAINING
                    and up.slot_sharing_group == op.slot_sharing_group):
                chained_into[op.id] = e.source
    for op in operators.values():
        for eid in op.outputs:
            e = edges[eid]
            if chained_into.get(e.target) == op.id:
                op.chained_outputs.append(e.target)
            else:
                op.channel_outputs.append(eid)

    tasks: list[TaskVertex] = []
    for op in operators.values():  # in creation order: sources first, heads in plan order
        if op.id in chained_into:
            continue
        members: list[int] = []
        stack = [op.id]
        while stack:
            o = stack.pop(0)
            members.append(o)
            stack.extend(operators[o].chained_outputs)
        tasks.append(TaskVertex(len(tasks) + 1, op.id, members, list(op.inputs), op.parallelism,
                                op.slot_sharing_group))

    for op in operators.values():
        if op.kind in (T.KEYED_PROCESS, T.KEYED_AGGREGATE, T.KEYED_REDUCE, T.WINDOW, T.WINDOW_AGGREGATE):
            e = edges[op.inputs[0]]
            if e.partitioner != T.HASH:
                raise JobDefinitionError(f"operator {op.name!r} needs a keyed input (key_by)")
        if op.kind in T.BROADCAST_PROCESS_KINDS:
            for eid in op.inputs:
                e = edges[eid]
                if e.input_index == 1 and e.partitioner != T.BROADCAST:
                    raise JobDefinitionError(f"operator {op.name!r}: its second input must be a broadcast stream "
                                             "(stream.broadcast(MapStateDescriptor(...)))")
                if e.input_index == 0 and op.kind == T.KEYED_BROADCAST_PROCESS and e.partitioner != T.HASH:
                    raise JobDefinitionError(f"operator {op.name!r} needs a keyed input (key_by)")
        if op.kind == T.KEYED_CO_PROCESS:
            if any(edges[e].partitioner != T.HASH for e in op.inputs):
                raise JobDefinitionError(f"operator {op.name!r} needs two keyed inputs: "
                                         "connect two keyed streams, or call connected.key_by(key1, key2)")

    _check_queryable_names(operators)
    iterations = find_iterations(operators, edges, transformations, JobDefinitionError)
    slots = assign_slots(tasks)
    return JobGraph(job_name, slots, max_parallelism, operators, edges, tasks,
                    {**config.to_dict(), Options.RUNTIME_MODE: mode}, default_parallelism=parallelism,
                    iterations=iterations, overrides=overrides,
                    definition=(transformations, config.to_dict(), job_name))


def queryable_names(fn: Any) -> set[str]:
    """The queryable state names a function declares where the job is built: descriptors it holds as
    attributes (made in ``__init__`` or on its class); those made in ``open`` are known when they run."""
    from ..api.state import StateDescriptor

    found = set()
    for holder in (type(fn), fn):
        for value in list(getattr(holder, "__dict__", {}).values()):
            if isinstance(value, StateDescriptor) and value.queryable_state_name is not None:
                found.add(value.queryable_state_name)
    return found


def _check_queryable_names(operators: dict[int, OperatorNode]) -> None:
    """Queryable state names are unique per job (the REST API finds a state by its name alone)."""
    owner: dict[str, OperatorNode] = {}
    for op in operators.values():
        for name in sorted(queryable_names(op.fn)) if op.fn is not None else ():
            other = owner.setdefault(name, op)
            if other is not op:
                raise JobDefinitionError(f"queryable state name {name!r} is declared by two operators: {other.name!r} "
                                         f"and {op.name!r}; names are unique per job")


def assign_slots(tasks: list[TaskVertex]) -> int:
    """Give each slot sharing group its range of slots (``TaskVertex.first_slot``), groups in order of
    first appearance; returns the slots the job needs."""
    sizes: dict[str, int] = {}
    for t in tasks:
        sizes[t.slot_sharing_group] = max(sizes.get(t.slot_sharing_group, 0), t.parallelism)
    first, total = {}, 0
    for group, size in sizes.items():
        first[group], total = total, total + size
    for t in tasks:
        t.first_slot = first[t.slot_sharing_group]
    return total


def _runtime_mode(config: Configuration, sources: list[Transformation], loops: list[str] | None = None) -> str:
    """STREAMING or BATCH; AUTOMATIC is BATCH when every source is bounded, as in Flink. A job with a
    loop runs in STREAMING mode (Flink's BATCH mode has no iterations either: there, operators emit at
    the end of input, which in a loop comes only once the loop has emptied, so what they emit would
    find the loop closed)."""
    mode = str(config.get(Options.RUNTIME_MODE)).strip().upper()
    if mode not in ("STREAMING", "BATCH", "AUTOMATIC"):
        raise JobDefinitionError(f"{Options.RUNTIME_MODE} must be STREAMING, BATCH or AUTOMATIC, got {mode!r}")
    if loops and mode == "BATCH":
        raise JobDefinitionError(f"{loops[0]}: a job with iterations runs in STREAMING mode (BATCH mode emits rolling "
                                 "aggregations and processing-time timers at the end of input, after the loop has "
                                 f"ended); set {Options.RUNTIME_MODE} to STREAMING or AUTOMATIC")
    if loops:
        return "STREAMING"
    unbounded = [t.name for t in sources if not getattr(t.fn, "is_bounded", lambda: True)()]
    if mode == "BATCH" and unbounded:
        raise JobDefinitionError(f"BATCH mode needs bounded sources, but {', '.join(map(repr, unbounded))} never ends "
                                 "(a DataGenSource without count, a FileSource that monitors its directory); "
                                 "run it in STREAMING mode")
    if mode == "AUTOMATIC":
        mode = "STREAMING" if unbounded else "BATCH"
    return mode
