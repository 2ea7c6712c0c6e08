"""One slot: a subtask of each operator of one slot sharing group (slot ``first_slot + i`` of the
group: subtask i of each of its operators whose parallelism is above i; see ``graph/job_graph.py``),
run by a single-threaded loop. ``subtask`` below is the slot's index; an operator's own subtask index
is ``vertex.subtask_in(slot)`` (the same when the job has one group).

The loop (Flink's mailbox, without threads: Python has one core per process
anyway) repeatedly lets each task take a few batches from its input gate or
source, moves bytes on the network, seals batches whose buffer timeout passed,
reports metrics and reads control messages. A task only takes input while all
of its record writers are available, which is how backpressure reaches the
sources.
"""

from __future__ import annotations

import re
import selectors
from collections import deque
import time
import traceback
from typing import Any, Callable

import pyarrow as pa

from ..api import transformations as T
from ..api.functions import RuntimeContext
from ..config import Configuration, Options
from ..graph.job_graph import JobGraph, TaskVertex
from . import queryable
from ..network.channels import InputGate, OutputChannel, local_pair
from ..batch import Stamped, num_rows
from ..network.events import (MAX_WATERMARK, MIN_WATERMARK, CheckpointBarrier, EndOfPartition, IterationProbe,
                              RuntimeEvent, Watermark, WatermarkStatus)
from ..network.record_writer import RecordWriter
from ..network.spill import FeedbackBuffer, rows_of
from ..network.transport import PeerLost, Transport
from ..connectors.base import END
from ..connectors.collect import CollectChannel
from ..checkpoint import filesystems
from ..checkpoint.metadata import CheckpointFormatError
from ..checkpoint.storage import CheckpointStorage, SavepointTarget, StateLocation
from ..state.snapshot import SnapshotFormatError, serialize
from ..checkpoint.channel_state import CHANNEL_STATE_KEY, ChannelStateCollector
from ..checkpoint import channel_rescale, channel_state
from . import channel_recovery, user_output
from .checkpointing import BarrierHandler, SnapshotJob, SnapshotWriter
from .unaligned import UnalignedBarrierHandler, as_unaligned, start_delay_ms
from .base import OperatorFailure, OperatorSnapshot, StreamOperator
from .factory import create_operator
from .faults import FAULT, maybe_kill
from . import iteration_rounds as iteration
from .iteration import FeedbackLog, HeadLoop, ProbeForwarder
from .iteration_rounds import IterationRounds
from .sink import SinkOperator
from .source import SourceOperator
from .task_time import BACK_PRESSURED, BUSY, IDLE, TaskTime
from .timers import processing_time_ms
from .watermarks import WatermarkValve

ITEMS_PER_STEP = 4
# A batch whose processing would take longer goes through the chain in slices of about this much work, so
# records in and out (and the task's time) are reported as they go (Flink counts per record). Until the
# chain's cost per record is known, a large batch starts with a slice of FIRST_SLICE records.
SLICE_S = 0.05
FIRST_SLICE = 256
IDLE_WAIT = 0.05  # s; the loop never sleeps longer than this without checking control


class AttemptEnded(RuntimeError):
    """The job manager ended this attempt on purpose (a rescale): not a failure of the job."""


class RestoreError(RuntimeError):
    """A checkpoint could not be restored. Unless the cause was ``transient`` (storage unreachable:
    the same checkpoint is tried again after the restart), the job manager decides whether an older one
    may be restored (``checkpoint.recovery``)."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


def _transient(e: BaseException) -> bool:
    """An I/O error reaching storage (connection refused, timeout, throttling) rather than a
    checkpoint that is missing or malformed (those are CheckpointFormatError / SnapshotFormatError)."""
    while e is not None:
        if isinstance(e, (OSError, TimeoutError)) and not isinstance(e, FileNotFoundError):
            return True
        if type(e).__module__.split(".")[0] in ("botocore", "aiobotocore", "aiohttp", "urllib3"):
            return True
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return False


class ChannelStateSnapshot:
    """A task's channel state among its operator snapshots, for the snapshot writer."""

    key = CHANNEL_STATE_KEY

    def __init__(self, collector: ChannelStateCollector):
        self.collector = collector

    def done(self) -> None:
        pass


def _channel_state_stats(collector: ChannelStateCollector | None) -> dict:
    """Flink's per-subtask figures: persisted_data (in-flight bytes stored as channel state) and
    processed_data (bytes processed while the barrier was overtaking them)."""
    if collector is None:
        return {}
    return {"persisted_data": collector.bytes_in + collector.bytes_out,
            "processed_data": collector.bytes_in - collector.feedback_bytes, "unaligned": collector.unaligned,
            "feedback_logged": collector.feedback_bytes, "feedback_records": collector.feedback_records}


class Task:
    def __init__(self, vertex: TaskVertex, operators: list[StreamOperator], writers: list[RecordWriter],
                 gate: InputGate | None, subtask: int = 0):
        self.vertex = vertex
        self.subtask = subtask  # of the vertex (its operators' subtask index), not the slot's
        self.operators = operators
        self.head = operators[0]
        self.writers = writers  # every record writer of the chain: all must have room before input is taken
        self.gate = gate
        self.finished = False
        self.stop_requested = False
        self.paused_for = 0  # a source waiting for its stop-with-savepoint to complete (or abort)
        self.wakeup_at = 0.0
        # Busy, back-pressured and idle time (task_time.py): what the last step ended with, and the tasks
        # of this slot whose output (a local channel per gate index; None: from another slot) it took.
        self.time = TaskTime(time.perf_counter())
        self.step_state = IDLE
        self.local_producers: list[Task | None] = [None] * len(gate.channels) if gate is not None else []
        self.fed_by: set[Task] = set()
        self.seconds_per_row: float | None = None  # the chain's cost per input record (_process)
        self.on_slice: Callable[[], None] = lambda: None  # the slot's: report metrics if due
        self.barriers: BarrierHandler | None = None  # set when checkpointing is on and the task has inputs
        self.last_checkpoint = 0  # newest checkpoint this task snapshotted
        self._inputs_open: dict[int, int] = {}
        # A loop's head task: the gate indexes of its back-edges (read apart: task/iteration.py), and its
        # part of the termination check; a task of a loop's body: its probe forwarder.
        self.back: set[int] = {i for i, ch in enumerate(gate.channels) if ch.feedback} if gate is not None else set()
        self.feedback_channels = [gate.channels[i] for i in sorted(self.back)] if gate is not None else []
        self.loop: HeadLoop | None = None
        self.feedback_log: FeedbackLog | None = None  # a head's, when the job snapshots
        self.feedback_buffer: FeedbackBuffer | None = None  # a head's back-edges' memory budget and spill files
        self.probes: ProbeForwarder | None = None
        self.valve = WatermarkValve([ch.input_index for ch in gate.channels]) if gate is not None else None
        for i in self.back:
            self.valve.ignore(i)  # type: ignore[union-attr]
        # Sinks whose writer can hold the task's input too (execute_and_collect's, while the program
        # does not read): empty for every other job.
        self.throttled = [op for op in operators if isinstance(op, SinkOperator) and getattr(op.node.fn, "throttles", False)]
        # ... and operators that hold input themselves (the async wait operator, its queue full).
        self.throttled += [op for op in operators if getattr(op, "throttles", False)]
        # Operators whose work completes outside the task's thread (async I/O): polled every step.
        self.pollers = [op for op in operators if hasattr(op, "poll_async")]
        if gate is not None:
            for ch in gate.channels:
                if not ch.feedback:  # the feedback input never ends before its loop does
                    self._inputs_open[ch.input_index] = self._inputs_open.get(ch.input_index, 0) + 1

    def writers_available(self) -> bool:
        for w in self.writers:
            if not w.is_available():
                return False
        for op in self.throttled:
            if not op.is_available():
                return False
        return True

    def next_processing_time(self) -> int | None:
        """The earliest processing-time timer (epoch ms) of the chain's operators."""
        due = None
        for op in self.operators:
            t = op.next_processing_time()
            if t is not None and (due is None or t < due):
                due = t
        return due

    def fire_processing_time(self) -> None:
        due = self.next_processing_time()
        if due is None:
            return
        now_ms = processing_time_ms()
        if due <= now_ms:
            for op in self.operators:
                t = op.next_processing_time()
                if t is not None and t <= now_ms:
                    op.on_processing_time(now_ms)

    def step(self, now: float) -> bool:
        for ch in self.feedback_channels:
            ch.grant_owed()  # a back-edge's credit goes back on arrival: the tails never wait for the head
        self.step_state = IDLE
        if self.finished:
            return False
        if self.loop is not None and self.loop.wait_expired(now):
            self.end_loop(timed_out=True)
            return True
        self.fire_processing_time()
        completed = False
        for op in self.pollers:
            completed = op.poll_async() or completed
        if self.gate is None:
            return self._step_source(now) or completed
        progressed = completed
        gate = self.gate
        barriers = self.barriers
        if gate.priority:  # unaligned barriers overtake everything, backpressure included
            barriers.on_priority()  # type: ignore[union-attr]
            self.step_state = BUSY
            return True  # back to the loop first: it submits the snapshot before this task takes more input
        producers = self.local_producers
        for _ in range(ITEMS_PER_STEP):
            if not self.writers_available():
                self.step_state = BACK_PRESSURED
                break
            polled = gate.poll()
            if polled is None:
                self.step_state = IDLE
                break
            progressed = True
            self.step_state = BUSY  # unless the next poll finds nothing
            index, item = polled
            producer = producers[index]
            if producer is not None:
                self.fed_by.add(producer)
            if isinstance(item, RuntimeEvent):
                self._on_event(index, item)
                if self.finished:
                    break
            else:
                if barriers is not None and barriers.recording:  # in-flight data of an unaligned checkpoint
                    barriers.on_data(index, item)  # type: ignore[attr-defined]
                if self.back and index in self.back:
                    self.loop.on_feedback(num_rows(item.batch if type(item) is Stamped else item))  # type: ignore[union-attr]
                    if self.feedback_log is not None and self.feedback_log.open:
                        self.feedback_log.on_batch(index, item)
                if type(item) is Stamped:
                    self._process(item.batch, gate.channels[index].input_index, item.ts)
                else:
                    self._process(item, gate.channels[index].input_index, None)
        return progressed

    def _process(self, batch: Any, input_index: int, ts: Any) -> None:
        self._sliced(batch, ts, lambda part, part_ts: self.head.process_batch(part, input_index, part_ts))

    def _sliced(self, batch: Any, ts: Any, process: Callable[[Any, Any], None]) -> None:
        """The batch through the chain (``process``), in slices of ~SLICE_S of its work where a batch takes
        longer (a slow function, a large batch): its counters then move, and the slot reports them, every
        slice, not once a batch (``on_slice``). The same records in the same order, as smaller batches
        would be, in one step (no barrier or watermark can come between two slices)."""
        n = num_rows(batch)
        per_row = self.seconds_per_row
        if n <= FIRST_SLICE or (per_row is not None and per_row * n <= SLICE_S):
            started = time.perf_counter()
            process(batch, ts)
            self._learn(time.perf_counter() - started, n)
            return
        start = 0
        while start < n:
            size = FIRST_SLICE if self.seconds_per_row is None else max(1, int(SLICE_S / max(self.seconds_per_row, 1e-9)))
            part = batch.slice(start, size) if isinstance(batch, pa.RecordBatch) else batch[start:start + size]
            size = num_rows(part)
            started = time.perf_counter()
            process(part, None if ts is None else ts[start:start + size])
            self._learn(time.perf_counter() - started, size)
            start += size
            if start < n:
                self.on_slice()

    def _learn(self, seconds: float, rows: int) -> None:
        """The chain's cost per record: a moving average over the batches it processed."""
        per_row = seconds / max(rows, 1)
        self.seconds_per_row = per_row if self.seconds_per_row is None else 0.8 * self.seconds_per_row + 0.2 * per_row

    def _step_source(self, now: float) -> bool:
        head: SourceOperator = self.head  # type: ignore[assignment]
        if self.stop_requested:
            self.finish()
            return True
        self.step_state = IDLE
        if self.paused_for or now < self.wakeup_at:
            return False
        if not self.writers_available():
            self.step_state = BACK_PRESSURED
            return False
        batch = head.poll()
        if batch is None:
            self.wakeup_at = head.reader.wakeup_at(now)
            return False
        if batch is END:
            self.finish(end_of_input=True)
            return True
        if type(batch) is Stamped:  # records with event timestamps (e.g. Kafka's)
            self._sliced(batch.batch, batch.ts, lambda part, ts: head.emit(Stamped(part, ts)))
        else:
            self._sliced(batch, None, lambda part, _: head.emit(part))
        self.step_state = BUSY
        return True

    def _on_event(self, index: int, event: RuntimeEvent) -> None:
        ch = self.gate.channels[index]
        if self.back and index in self.back:
            self._on_feedback_event(index, ch, event)
            return
        if isinstance(event, Watermark):
            self._advance_watermark(self.valve.on_watermark(index, event.timestamp_ms), None)
        elif isinstance(event, WatermarkStatus):
            self._advance_watermark(*self.valve.on_status(index, event.idle))
        elif isinstance(event, EndOfPartition):
            ch.finished = True
            self.gate.block(index)
            self._advance_watermark(*self.valve.on_finished(index))
            left = self._inputs_open[ch.input_index] = self._inputs_open[ch.input_index] - 1
            if left == 0:
                self.head.end_input(ch.input_index)
            if self.barriers is not None:
                self.barriers.check()  # a finished channel counts as aligned
            if self.probes is not None:
                self.probes.check(self._channel_finished)  # a finished channel sends no probe
            if self.loop is not None:
                if all(c.finished for c in self.gate.channels if not c.feedback):
                    self.loop.on_input_ended()  # the loop ends when it is proven empty (or max_wait_time_ms)
            elif self.gate.all_finished():
                self.finish()
        elif isinstance(event, CheckpointBarrier):
            if self.barriers is not None:
                self.barriers.on_barrier(index, event)
        elif isinstance(event, IterationProbe):
            if self.probes is not None:
                self.probes.on_probe(index, event, self._channel_finished)

    def _channel_finished(self, index: int) -> bool:
        return self.gate.channels[index].finished  # type: ignore[union-attr]

    def _on_feedback_event(self, index: int, ch: Any, event: RuntimeEvent) -> None:
        """An event on a back-edge: probes count; its watermarks, idleness and barriers do not (the
        head's watermark is its regular input's; barriers are aligned on regular inputs only)."""
        if isinstance(event, IterationProbe):
            self.loop.on_probe(index, event, self._channel_finished)  # type: ignore[union-attr]
        elif isinstance(event, EndOfPartition):
            ch.finished = True
            self.gate.block(index)  # type: ignore[union-attr]
            if self.feedback_log is not None:
                self.feedback_log.on_end(index)

    def end_loop(self, timed_out: bool = False) -> None:
        """The loop is proven empty (or waited ``max_wait_time_ms`` for feedback): the head ends, and its
        end flows down the body as any end of input; feedback still arriving is dropped."""
        if self.finished or self.loop is None:
            return
        self.loop.end(timed_out)
        if self.feedback_log is not None:
            # Nothing more comes round (the loop is empty, or what comes is dropped): the logs in progress are
            # complete, and the barriers they wait for will be dropped with the rest.
            for k in self.back:
                self.feedback_log.on_end(k)
        for ch in self.feedback_channels:
            if any(type(item) is EndOfPartition for item in ch.queue):
                ch.finished = True
            ch.discard_queued()
            ch.discarding = True
        self.finish()

    def feedback_backlog(self) -> int:
        """Records queued on the back-edges, not yet taken by the head."""
        return sum(rows_of(item) for ch in self.feedback_channels
                   for item in ch.queue if not isinstance(item, RuntimeEvent))

    def feedback_ended(self) -> bool:
        """Every back-edge into this task delivered its end: the slot stays until then, returning their
        credit, so that a tail in another slot never waits for credit from a slot that left."""
        return all(ch.finished for ch in self.feedback_channels)

    def outputs_delivered(self) -> bool:
        """Every batch and event handed to a channel went out. A channel holds what waits for
        credit; the slot must not half-close its connections before that (its EndOfPartition
        among it) is sent, or a peer still consuming sees the connection end mid-stream."""
        for w in self.writers:
            for ch in w.channels:
                if not ch.is_idle():
                    return False
        return True

    def _advance_watermark(self, watermark: int | None, idle: bool | None) -> None:
        if watermark is not None:
            self.head.process_watermark(watermark)
        if idle is not None:
            self.head.process_event(WatermarkStatus(idle))

    def finish(self, end_of_input: bool = False) -> None:
        """``end_of_input``: a source read all its input (or drains for a stop-with-savepoint): event
        time ends, so every event-time timer and window fires (Flink's MAX_WATERMARK). A source
        stopped without draining ends without it: what is still open belongs to the savepoint."""
        if end_of_input and self.gate is None:
            self.head.process_watermark(MAX_WATERMARK)
        for op in self.operators:
            op.finish()
        for w in self.writers:
            w.flush()
            w.broadcast_event(EndOfPartition())
            for ch in w.channels:
                ch.closed = True
        self.finished = True

    def next_deadline(self, now: float) -> float | None:
        deadline = None
        for w in self.writers:
            d = w.flush_if_due(now)
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        if self.gate is None and not self.finished and self.wakeup_at > now:
            deadline = self.wakeup_at if deadline is None else min(deadline, self.wakeup_at)
        waits = self.loop.wait_deadline() if self.loop is not None else None
        if waits is not None:
            deadline = waits if deadline is None else min(deadline, waits)
        timer = None if self.finished else self.next_processing_time()
        if timer is not None:
            at = now + max(0.0, (timer - processing_time_ms()) / 1000.0)
            deadline = at if deadline is None else min(deadline, at)
        return deadline


class SlotRuntime:
    def __init__(self, graph: JobGraph, subtask: int, host: str = "127.0.0.1", attempt: int = 0,
                 control: Any = None, deployment: dict | None = None, advertise_host: str | None = None):
        """``host``: the interface the data server listens on; ``advertise_host``: the address peers
        connect to (in a pod it listens on 0.0.0.0 and is reached at the pod's IP)."""
        self.graph = graph
        self.listen_host, self.advertise_host = host, advertise_host or host
        deployment = deployment or {}
        self.job_id = deployment.get("job_id", "local")
        self.restore = deployment.get("restore")
        self.subtask = subtask
        self.parallelism = graph.parallelism
        self.attempt = attempt
        self.control = control
        self._user_out: "user_output.SlotOutput | None" = None  # run() sets it
        conf = Configuration(graph.config)
        filesystems.configure(conf)  # s3:// settings of this job, in this task's process
        self.batch_size = conf.get_int(Options.BATCH_SIZE)
        self.inline_threshold = conf.get_int(Options.INLINE_STATE_THRESHOLD)
        self.buffer_timeout = conf.get_int(Options.BUFFER_TIMEOUT)
        self.credits = conf.get_int(Options.BUFFERS_PER_CHANNEL)
        self.metrics_interval = conf.get_int(Options.METRICS_INTERVAL) / 1000.0
        self._next_metrics = 0.0
        self._stepping: Task | None = None  # the task whose step runs now, and up to when its producers
        self._credited = 0.0  # in this slot were credited its time (task_time.py: their back pressure)
        self.feedback_memory = conf.get_bytes(Options.ITERATION_FEEDBACK_MEMORY)
        self.tmp_dir = conf.get_string(Options.IO_TMP_DIRS) or None
        self.transport = Transport(subtask, host, self.credits)
        self.operators: dict[int, StreamOperator] = {}
        self.tasks: list[Task] = []
        self.started_at: float | None = None  # wall clock, first loop iteration
        self.ended_at: float | None = None  # wall clock, every task finished
        self.checkpointing = conf.checkpointing_enabled()
        # Snapshots are taken (barriers aligned, state written) with periodic checkpointing, and without
        # it for the savepoints a user asks for, as Flink's: then no final checkpoint is awaited.
        self.snapshotting = self.checkpointing or bool(deployment.get("savepoints"))
        self.exactly_once = str(conf.get(Options.CHECKPOINTING_MODE)).upper() == "EXACTLY_ONCE"
        # Unaligned checkpoints: barriers overtake in-flight data, which becomes channel state.
        self.unaligned, self.aligned_timeout_ms = conf.unaligned_checkpoints() if self.checkpointing else (False, 0)
        self._parked: list[SnapshotJob] = []  # snapshots waiting for their channel state to be complete
        self._next_timeout_poll = 0.0
        # Channel state names its edges' shapes (a restore at another parallelism reads them): unaligned
        # checkpoints', and the feedback logs of a loop's heads.
        self._edge_shapes = channel_rescale.shapes_of(graph) if self.unaligned or graph.iterations else {}
        self._stop_savepoint = 0  # a stop-with-savepoint without drain in progress: its heads end with it
        self.final_checkpoint_done = False
        # The newest checkpoint known complete here (restored, or announced): a queryable state's live value
        # is at or after it.
        self.last_completed = int((self.restore or {}).get("id") or 0)
        self._queryable_reported: set[tuple[int, str]] = set()
        self._query_server: Any = None  # answers lookups beside the task thread (task/queryable.py)
        self.last_trigger = CheckpointBarrier(0, 0)  # the newest checkpoint the job manager triggered here
        self.storage: CheckpointStorage | None = None
        self.savepoints: dict[int, SavepointTarget] = {}  # checkpoint id -> where that savepoint goes
        self.snapshots: SnapshotWriter | None = None
        self.collect_channel = CollectChannel(control, subtask, attempt) if control is not None else None
        self._local_rounds = IterationRounds()  # a slot without a job manager runs its loops' rounds itself
        self._local_control: deque[dict] = deque()
        if self.checkpointing:
            self.storage = CheckpointStorage(deployment.get("checkpoint_dir") or conf.get_string(Options.CHECKPOINTING_DIR),
                                             self.job_id,
                                             conf.get_int(Options.INLINE_STATE_THRESHOLD),
                                             conf.get_int(Options.MEMORY_STORAGE_MAX_STATE))
        self._build()

    @property
    def address(self) -> tuple[str, int]:
        return self.advertise_host, self.transport.address[1]

    # -- wiring ------------------------------------------------------------------
    def _build(self) -> None:
        g, slot = self.graph, self.subtask
        # The task vertices with a subtask in this slot, and which subtask of each.
        here = [(v, v.subtask_in(slot)) for v in g.tasks if v.subtask_in(slot) is not None]
        vertex_of = {o: v for v in g.tasks for o in v.operators}
        for op_id, i in ((o, i) for v, i in here for o in v.operators):
            node = g.operators[op_id]
            ctx = RuntimeContext(node.name, i, node.parallelism, node.max_parallelism, self.attempt, g.config,
                                 printer=self._print if self.control is not None else None)
            ctx._state_root = self.storage.url if self.storage is not None else None
            ctx._job_id = self.job_id  # the same across failovers and a claimed resume (FileSink's part names)
            ctx._collector = self.collect_channel
            self.operators[op_id] = op = create_operator(node, ctx)
            doorbell = getattr(op, "doorbell", None)  # async I/O: its completions wake the loop
            if doorbell is not None:
                self.transport.selector.register(doorbell.sock, selectors.EVENT_READ, doorbell)
        for op in self.operators.values():
            node = op.node
            if node.kind == T.TIMESTAMPS and len(node.inputs) == 1:
                upstream = self.operators.get(g.edges[node.inputs[0]].source)  # absent: lower parallelism
                if isinstance(upstream, SourceOperator) and node.id in upstream.node.chained_outputs:
                    op.source = upstream  # type: ignore[attr-defined]  # split-aware watermarks
        if self.restore:
            self._restore_state(self.restore)
        local_inputs: dict[tuple[int, int], Any] = {}
        local_from: dict[int, tuple[int, int]] = {}  # id of a local input channel -> (vertex id, subtask) feeding it
        local_producers: dict[Task, list] = {}
        writers_of: dict[int, RecordWriter] = {}
        for e in g.edges.values():
            src_node = g.operators[e.source]
            if e.target in src_node.chained_outputs or e.source not in self.operators:
                continue
            target_node, target_vertex = g.operators[e.target], vertex_of[e.target]
            i = vertex_of[e.source].subtask_in(slot)
            targets = [i] if e.partitioner == T.FORWARD else list(range(target_node.parallelism))
            channels: list[OutputChannel] = []
            for j in targets:
                peer = target_vertex.slot_of(j)
                if peer == slot:
                    out, inp = local_pair(e.id, i, e.input_index, self.batch_size, self.buffer_timeout, self.credits)
                    local_inputs[(e.id, i)] = inp
                    local_from[id(inp)] = (vertex_of[e.source].id, i)  # the producing task, in this slot
                else:
                    out = self.transport.output_channel(e.id, peer, self.batch_size, self.buffer_timeout)
                channels.append(out)
            writers_of[e.id] = RecordWriter(e.id, e.partitioner, channels, i, e.key, target_node.max_parallelism)
        for op_id, op in self.operators.items():
            node = g.operators[op_id]
            by_target = {g.edges[e].target: g.edges[e] for e in node.outputs}
            for target in node.chained_outputs:
                chained = self.operators[target]
                op.output.connect(chained.push, by_target[target].tag, chained.process_event)
            for eid in node.channel_outputs:
                op.output.connect(writers_of[eid].emit, g.edges[eid].tag, writers_of[eid].broadcast_event)
        for vertex, i in here:
            ops = [self.operators[o] for o in vertex.operators]
            channel_writers = [writers_of[e] for o in vertex.operators for e in g.operators[o].channel_outputs]
            gate = None
            if vertex.input_edges:
                inputs = []
                for eid in vertex.input_edges:
                    e = g.edges[eid]
                    source_vertex = vertex_of[e.source]
                    sources = [i] if e.partitioner == T.FORWARD else list(range(g.operators[e.source].parallelism))
                    for s in sources:
                        if source_vertex.slot_of(s) == slot:
                            inputs.append(local_inputs[(eid, s)])
                        else:
                            inputs.append(self.transport.input_channel(eid, source_vertex.slot_of(s), e.input_index,
                                                                       source_subtask=s))
                gate = InputGate(inputs)
            loop = self._loop_of(vertex)
            if loop is not None and gate is not None and vertex.head == loop.head:
                for ch in gate.channels:
                    ch.feedback = g.edges[ch.edge].feedback == loop.id
            task = Task(vertex, ops, channel_writers, gate, i)
            if loop is not None:
                loop_writers = [w for w in channel_writers if w.edge in loop.loop_edges]
                if vertex.head == loop.head:
                    task.loop = HeadLoop(loop, i, vertex.parallelism, task.back, loop_writers, self._iteration_report)
                    buffer = task.feedback_buffer = FeedbackBuffer(self.feedback_memory, self.tmp_dir)
                    for ch in task.feedback_channels:
                        ch.spill = buffer
                    if self.snapshotting:
                        fault = (lambda logged, ctx=task.head.ctx: maybe_kill(ctx, "feedback-logging", logged)) \
                            if task.head.ctx.get_job_parameter(FAULT) else None  # tests only (task/faults.py)
                        task.feedback_log = FeedbackLog(task.back, gate.channels, fault)
                        for k in task.back:
                            gate.channels[k].on_feedback_barrier = \
                                lambda barrier, k=k, task=task: task.feedback_log.on_barrier(k, barrier)
                    # streamjob_feedback_backlog: fed-back records waiting at the head (the loop's back pressure);
                    # of their bytes, those held in memory and those spilled to local disk (network/spill.py),
                    # and the bytes ever spilled
                    system = task.head.ctx._metric_registry().group(system=True)
                    system.gauge("feedbackBacklog", task.feedback_backlog)
                    system.gauge("feedbackBufferedBytes", lambda b=buffer: b.in_memory)
                    system.gauge("feedbackSpilledBytes", lambda b=buffer: b.on_disk)
                    buffer.counter = system.counter("numFeedbackBytesSpilled")
                elif gate is not None:
                    inside = {k for k, ch in enumerate(gate.channels) if ch.edge in loop.loop_edges}
                    task.probes = ProbeForwarder(loop.id, inside, set(range(len(gate.channels))) - inside,
                                                 loop_writers)
            if gate is not None and self.checkpointing and self.unaligned:
                task.barriers = UnalignedBarrierHandler(
                    gate,
                    on_aligned=lambda barrier, ms, task=task: self.checkpoint_task(task, barrier, ms),
                    on_abort=lambda n, reason, task=task: self._decline(task, n, reason),
                    on_unaligned=lambda barrier, ms, task=task: self.checkpoint_task(task, barrier, ms, overtake=True),
                    timeout_ms=self.aligned_timeout_ms)
            elif gate is not None and self.snapshotting:
                task.barriers = BarrierHandler(
                    gate, self.exactly_once or not self.checkpointing,  # savepoints are always aligned
                    on_aligned=lambda barrier, ms, task=task: self.checkpoint_task(task, barrier, ms),
                    on_abort=lambda n, reason, task=task: self._decline(task, n, reason))
            self.tasks.append(task)
            local_producers[task] = [local_from.get(id(ch)) for ch in gate.channels] if gate is not None else []
        task_of = {(t.vertex.id, t.subtask): t for t in self.tasks}
        for task, producers in local_producers.items():
            task.local_producers = [task_of.get(p) if p is not None else None for p in producers]

    def _loop_of(self, vertex: TaskVertex) -> Any:
        """The loop (graph/iterations.py) this task vertex takes part in, if any (loops never share one)."""
        for it in self.graph.iterations:
            if it.members.intersection(vertex.operators):
                return it
        return None

    def _iteration_report(self, msg: dict) -> None:
        """A head's round report: to the job manager, which runs the rounds; a slot without one runs
        them itself (every head is then in this slot)."""
        if self.control is not None:
            self.control.send({**msg, "slot": self.subtask, "attempt": self.attempt})
        else:
            self._local_control.extend(self._local_rounds.on_report(msg))

    def _on_iteration(self, msg: dict) -> None:
        kind, n = msg.get("type"), int(msg["iteration"])
        for task in self.tasks:
            if task.loop is not None and task.loop.iteration == n:
                if kind == iteration.ROUND:
                    task.loop.start_round(int(msg["round"]))
                elif kind == iteration.END:
                    task.end_loop()

    def _restore_state(self, restore: dict) -> None:
        """Put every operator back to the checkpoint the job manager chose. (State of operators this
        job does not have was refused or allowed by the executor before deployment.)"""
        location = StateLocation(restore["root"])
        saved = restore["operators"]
        for op in self.operators.values():
            entry = saved.get(op.key)
            if entry is not None:
                try:
                    op.initialize_state(entry["subtasks"], location, restore.get("id"))
                except (CheckpointFormatError, SnapshotFormatError) as e:
                    raise RestoreError(str(e), _transient(e)) from e  # names the file, operator and key group
                except Exception as e:
                    raise RestoreError(f"cannot restore checkpoint {restore['url']}: {e}", _transient(e)) from e

    def _recover_channel_state(self, restore: dict) -> None:
        """Restore the in-flight data of an unaligned checkpoint at the parallelism it was taken with
        (at another, ``channel_recovery.recover_rescaled`` redistributes it) ahead of any new input: every
        task's output channel state is sent again (it was emitted before the snapshot), and each input
        channel's state is put at the head of that channel (it preceded the barrier there). The task
        processes it in its running loop: recovery never holds back "running", so the next checkpoint
        is not delayed by the replay and recovery time does not grow with the data in flight."""
        location = StateLocation(restore["root"])
        recovered = []
        for task in self.tasks:
            handles = restore["channel_state"].get(str(task.vertex.id))
            handle = handles[task.subtask] if handles and task.subtask < len(handles) else None
            if not handle:
                continue
            where = f"checkpoint {restore['url']}, task {task.vertex.name(self.graph)} (subtask {task.subtask + 1})"
            state = self._read_channel_state(handle, where, location)
            outputs = {(w.edge, j if state.format == 1 else w.targets[j]): ch
                       for w in task.writers for j, ch in enumerate(w.channels)}
            inputs = {(ch.edge, ch.source_subtask): ch for ch in (task.gate.channels if task.gate else [])}
            unknown = [k for k in state.outputs if k not in outputs] + [k for k in state.inputs if k not in inputs]
            if unknown:
                raise RestoreError(f"{where}: holds in-flight data of channels (edge, subtask) {unknown} this job "
                                   f"does not have (the job graph changed); restore it with the job it was taken of, "
                                   f"or a savepoint instead")
            for key, batches in state.outputs.items():
                for batch in batches:
                    outputs[key].resend(batch)
            recovered.append((task, state, inputs))
        for task, state, inputs in recovered:
            for key, batches in state.inputs.items():
                inputs[key].prepend_recovered(list(batches))
            if state.inputs and task.gate is not None:
                # All of it before new input: after a restore at another parallelism a key's records may
                # have come in on another channel than its new ones, and this state can be what is left.
                task.gate.recovering = True

    def _read_channel_state(self, handle: dict, where: str,
                            location: StateLocation | None = None) -> channel_state.RecoveredChannelState:
        """One subtask's channel state of the checkpoint being restored; ``where`` names it in errors."""
        try:
            data = (location or StateLocation(self.restore["root"])).read(handle)  # type: ignore[index]
            return channel_state.read(data, where)
        except channel_state.ChannelStateFormatError as e:
            raise RestoreError(str(e)) from e
        except Exception as e:
            raise RestoreError(f"cannot restore {where}: {e}", _transient(e)) from e

    def _print(self, lines: list[str]) -> None:
        user_out = self._user_out
        if user_out is not None and user_out.pending:
            user_out.flush()  # what the functions printed before these lines comes before them
        control = self.control
        control.send({"type": "print", "slot": self.subtask, "lines": lines})
        if control.backlog() > (1 << 20):
            control.flush()  # a fast PrintSink waits for the job manager's console

    def connect(self, addresses: list[tuple[str, int]]) -> None:
        self.transport.connect(addresses)
        if self.control is not None:
            self.control.attach(self.transport.selector)

    # -- running -----------------------------------------------------------------
    def run(self) -> None:
        # print() in the functions goes to the job's stdout (through the job manager, as PrintSink's lines)
        self._user_out = user_output.SlotOutput(self._print) if self.control is not None else None
        if self._user_out is not None:
            user_output.attach(self._user_out)
        try:
            for task in self.tasks:
                for op in reversed(task.operators):
                    op.open()
            if self.restore and self.restore.get("channel_state"):
                r = self.restore
                if channel_rescale.rescaled(r["parallelism"], r["operators"], r["channel_state"], self.graph):
                    channel_recovery.recover_rescaled(self.tasks, self.graph, r, self._read_channel_state)
                else:
                    self._recover_channel_state(r)
            if self.snapshotting:
                self.snapshots = SnapshotWriter(self._write_snapshot)
            if self.control is not None:
                self._report_queryable()
                self.control.send({"type": "running", "slot": self.subtask, "attempt": self.attempt})
            self.started_at = time.time()
            self._loop()
            self.ended_at = time.time()
            if self.checkpointing and self.control is not None:
                self._await_final_checkpoint()
            for task in self.tasks:
                for op in task.operators:
                    op.close()
            self._end_user_output()
            self._report_metrics()
            if self.control is not None:
                self.control.detach()
            self.transport.finish(timeout=30.0)
            if self.control is not None:
                self.control.send({"type": "finished", "slot": self.subtask})
                self.control.close()
        except BaseException as e:
            try:
                self._end_user_output()  # what the functions printed before the failure comes first
            except Exception:  # noqa: BLE001 - the failure is what must be reported
                pass
            self._report_failure(e)
            raise
        finally:
            if self._query_server is not None:
                self._query_server.close()
            if self._user_out is not None:
                user_output.detach(self._user_out)
                self._user_out = None
            if self.snapshots is not None:
                self.snapshots.close()
            for op in self.operators.values():
                try:
                    op.dispose()
                except Exception:  # noqa: BLE001 - cleanup must not hide the task's outcome
                    pass
            try:
                self.transport.close()
            except Exception:
                pass

    def _end_user_output(self) -> None:
        if self._user_out is not None:
            out, self._user_out = self._user_out, None
            user_output.detach(out)

    def _loop(self) -> None:
        tasks = self.tasks
        user_out = self._user_out
        self._next_metrics = time.monotonic() + self.metrics_interval
        for task in tasks:
            task.on_slice = self._report_if_due
        clock = time.perf_counter
        while True:
            now = time.monotonic()
            # Control first: a stop (or trigger) that the last transport poll brought in is acted on
            # before the sources step again, so a drain does not carry one more source batch with it.
            self._handle_control()
            progressed = False
            for task in tasks:
                started = clock()
                task.time.begin(started)
                self._stepping, self._credited = task, started
                stepped = task.step(now)
                ended = clock()
                self._credit_fed(ended)
                self._stepping = None
                task.time.stepped(ended, stepped, task.step_state)
                task.fed_by.clear()
                if stepped:
                    progressed = True
                # Also for a task that finished outside its step (a loop's head, ended by its rounds).
                if task.finished and task.last_checkpoint < self.last_trigger.checkpoint_id:
                    self._finished_after_trigger(task)
            if all(t.finished for t in tasks) and all(t.outputs_delivered() for t in tasks) \
                    and all(t.feedback_ended() for t in tasks):
                break
            now = time.monotonic()
            deadline = None
            for task in tasks:
                d = task.next_deadline(now)
                if d is not None and (deadline is None or d < deadline):
                    deadline = d
            if self._parked or self.aligned_timeout_ms > 0:
                self._settle_channel_state()
            if self.snapshots is not None and self.snapshots.results:
                self._collect_snapshots()
            if user_out is not None and user_out.pending:
                user_out.flush()
            self._report_if_due(now)
            if progressed:
                timeout = 0.0
            else:
                timeout = IDLE_WAIT if deadline is None else max(0.0, min(IDLE_WAIT, deadline - now))
            self.transport.poll(timeout)

    def _handle_control(self) -> None:
        control = self.control
        if control is None:
            while self._local_control:
                self._on_iteration(self._local_control.popleft())
            return
        while control.inbox:
            msg = control.inbox.popleft()
            kind = msg.get("type")
            if kind == "stop":
                self.request_stop()
            elif kind == "trigger":
                self._trigger(int(msg["id"]), int(msg["ts"]), msg.get("savepoint"))
            elif kind == "complete":
                self._notify_complete(int(msg["id"]), bool(msg.get("final")))
            elif kind == "abort":
                n = int(msg["id"])
                self.savepoints.pop(n, None)
                self._drop_parked(None, n)
                for task in self.tasks:
                    if task.barriers is not None:
                        task.barriers.abort(n)
                    if task.paused_for == n:
                        task.paused_for = 0  # the stop-with-savepoint failed: the job goes on
                if self._stop_savepoint == n:
                    self._stop_savepoint = 0
                for op in self.operators.values():
                    if op.keyed_backend is not None:
                        op.keyed_backend.notify_checkpoint_aborted(int(msg["id"]))
            elif kind in (iteration.ROUND, iteration.END):
                self._on_iteration(msg)
            elif kind == "collect_ack":
                self.collect_channel.on_ack(msg)  # type: ignore[union-attr]
            elif kind == "job_manager_lost":
                raise ConnectionError("lost the connection to the job manager")
            elif kind == "end_attempt":
                # A rescale: the attempt is fenced, its checkpoint taken. Ended as on a failure (nothing is
                # committed or snapshotted on the way out), at once: Spark's cancel would give it 2 s more.
                raise AttemptEnded(str(msg.get("why") or "the attempt was ended"))

    # -- queryable state --------------------------------------------------------------
    def _report_queryable(self) -> None:
        """Tell the job manager the queryable states created since the last report (functions create
        state in open() or later, at their first record)."""
        if self.control is None:
            return
        new = queryable.registrations(self.operators, self._queryable_reported)
        if new and self._query_server is None:  # a job without queryable state runs no lookup thread
            self._query_server = queryable.QueryServer(self.control.address, self.subtask, self.attempt,
                                                       self.operators, self._key_type, lambda: self.last_completed,
                                                       listen_host=self.listen_host, advertise_host=self.advertise_host)
            port = self._query_server.port
        else:
            port = None
        if new:
            self.control.send({"type": "queryable", "slot": self.subtask, "attempt": self.attempt, "states": new,
                               "port": port})

    def _key_type(self, node: Any) -> Any:
        for e in node.inputs:
            key = self.graph.edges[e].key
            if key is not None:
                return key.key_type
        return None

    # -- checkpoints -----------------------------------------------------------------
    def _trigger(self, checkpoint_id: int, timestamp_ms: int, savepoint: dict | None = None) -> None:
        """The coordinator started checkpoint n: sources (and tasks already finished) snapshot now;
        every other task snapshots when the barrier has reached it on all inputs.

        Stop-with-savepoint: a source emits the barrier and then pauses until the savepoint
        completes (then it ends) or is aborted (then it goes on). With ``drain`` it ends its
        input first, so everything downstream finishes into the savepoint."""
        sp = savepoint or {}
        unaligned = self.unaligned and self.aligned_timeout_ms <= 0 and not sp.get("path")  # savepoints stay aligned
        barrier = self.last_trigger = CheckpointBarrier(checkpoint_id, timestamp_ms, unaligned=unaligned,
                                                        savepoint=sp.get("path"))
        if sp.get("stop") and not sp.get("drain"):
            self._stop_savepoint = checkpoint_id
        for task in self.tasks:
            # A loop's head whose regular inputs all ended is aligned already: it snapshots now (and logs its
            # feedback), or no checkpoint would complete while the loop runs on after the end of its input.
            # Not for a drain's savepoint: that one is the job's last, and is taken once the loop is empty
            # (the head's end), or the output of what its log holds would never be committed.
            ended_head = task.loop is not None and task.loop.input_ended and not task.finished \
                and not sp.get("drain")
            if task.last_checkpoint >= checkpoint_id or not (task.finished or task.gate is None or ended_head):
                continue
            if sp.get("stop") and not task.finished and sp.get("drain"):
                task.finish(end_of_input=True)
            self.checkpoint_task(task, barrier, 0.0)
            if sp.get("stop") and not task.finished and task.gate is None:  # a source (a head ends with its loop)
                task.paused_for = checkpoint_id

    def _finished_after_trigger(self, task: Task) -> None:
        """A task that reached the end of every input after checkpoint n was triggered, without a
        barrier n (its upstream sources had finished, so they sent none): everything it will ever
        process is in, so its state now belongs to checkpoint n."""
        if task.barriers is None or task.barriers.pending is None:
            if task.barriers is not None:
                task.barriers.latest = max(task.barriers.latest, self.last_trigger.checkpoint_id)
            self.checkpoint_task(task, self.last_trigger, 0.0)

    def checkpoint_task(self, task: Task, barrier: CheckpointBarrier, alignment_ms: float,
                        overtake: bool = False) -> ChannelStateCollector | None:
        """Snapshot the task's operators and forward the barrier. With unaligned checkpoints
        (``overtake``, or an unaligned barrier) the barrier goes to the front of the output queues
        and what it overtook becomes channel state; the snapshot is acknowledged once the channel
        state is complete (its inputs are filled in by the UnalignedBarrierHandler)."""
        n = barrier.checkpoint_id
        self._drop_parked(task, n - 1, decline=True)
        if any(op.snapshot_in_flight for op in task.operators):
            # The previous snapshot of these tables is still being written (only with
            # concurrent checkpoints): wait, so that its copy-on-write layer is folded first.
            self.snapshots.wait_idle()  # type: ignore[union-attr]
            self._collect_snapshots()
        started = time.perf_counter()
        if barrier.savepoint and n not in self.savepoints:
            self.savepoints[n] = SavepointTarget(barrier.savepoint, self.inline_threshold)
        full = barrier.savepoint is not None
        snaps = [s for s in (op.snapshot_state(n, full) for op in task.operators) if s is not None]
        collector = None
        unaligned = self.unaligned and barrier.savepoint is None
        logs = task.feedback_log is not None and not task.finished  # a loop's head logs its feedback from here
        if unaligned or logs:
            collector = ChannelStateCollector(n, barrier)
        if not task.finished:
            if unaligned and (overtake or barrier.unaligned):
                collector.barrier = forwarded = as_unaligned(barrier)  # type: ignore[union-attr]
                for w in task.writers:
                    for j, ch in enumerate(w.channels):
                        collector.add_output((w.edge, w.targets[j]), ch.overtake(forwarded))  # type: ignore[union-attr]
            else:
                for w in task.writers:
                    w.broadcast_event(barrier)
                if unaligned:  # aligned so far: the barrier may still time out in an output queue
                    collector.waiting_outputs = {(w.edge, w.targets[j]): ch for w in task.writers  # type: ignore[union-attr]
                                                 for j, ch in enumerate(w.channels) if ch.holds(barrier)}
            if logs:
                task.feedback_log.start(collector)  # type: ignore[union-attr,arg-type]
        sync_ms = (time.perf_counter() - started) * 1000.0
        task.last_checkpoint = n
        job = SnapshotJob(task, n, snaps, sync_ms, alignment_ms, collector,
                          max(0.0, time.time() * 1000.0 - barrier.timestamp_ms) if barrier.timestamp_ms else 0.0)
        if collector is None or (not overtake and collector.complete):
            self._submit(job)
        else:  # the handler fills in the input side after this returns
            self._parked.append(job)  # submitted by _settle_channel_state once every channel is settled
        return collector

    def _submit(self, job: SnapshotJob) -> None:
        if job.channel_state is not None and not job.channel_state.empty:
            job.snapshots.append(ChannelStateSnapshot(job.channel_state))
        self.snapshots.submit(job)  # type: ignore[union-attr]

    def _settle_channel_state(self) -> None:
        """Submit the parked snapshots whose channel state is complete; let aligned barriers stuck in
        output queues past the aligned-checkpoint timeout overtake; convert timed-out alignments."""
        now = time.monotonic()
        if self.aligned_timeout_ms > 0 and now >= self._next_timeout_poll:
            self._next_timeout_poll = now + 0.005
            for task in self.tasks:
                if isinstance(task.barriers, UnalignedBarrierHandler) and not task.finished:
                    task.barriers.poll_timeout()
            now_ms = time.time() * 1000.0
            for job in self._parked:
                if job.channel_state.waiting_outputs:
                    job.channel_state.settle_outputs(start_delay_ms(job.channel_state.barrier, now_ms),
                                                     self.aligned_timeout_ms)
        if not self._parked:
            return
        ready = [job for job in self._parked if job.channel_state.complete]
        for job in ready:
            self._parked.remove(job)
            self._submit(job)

    def _drop_parked(self, task: Task | None, checkpoint_id: int, decline: bool = False) -> None:
        """Give up parked snapshots of checkpoints up to ``checkpoint_id`` (aborted, or overtaken by a
        newer checkpoint: then the job manager is told, so it does not wait for it until the timeout)."""
        for job in [j for j in self._parked if (task is None or j.task is task) and j.checkpoint_id <= checkpoint_id]:
            self._parked.remove(job)
            if job.task.feedback_log is not None:
                job.task.feedback_log.drop(job.checkpoint_id)
            for snap in job.snapshots:
                snap.done()  # fold the copy-on-write layers back: nothing will write them
            if decline:
                self._decline(job.task, job.checkpoint_id,
                              f"checkpoint {checkpoint_id + 1} started before its channel state was complete")

    def _write_snapshot(self, snap: OperatorSnapshot, checkpoint_id: int) -> tuple[dict, int, int]:
        """The asynchronous phase, in the snapshot writer's thread: (handle, state size, bytes written)."""
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", snap.key)[:80] + f"-{self.subtask}"
        storage: Any = self.savepoints.get(checkpoint_id) or self.storage
        if isinstance(snap, ChannelStateSnapshot):
            data = snap.collector.to_bytes()
            held = snap.collector
            # The edges it holds data of, and their shapes: what a restore at another parallelism looks up.
            edges = channel_rescale.describe_handle([e for (e, _), b in held.inputs.items() if b],
                                                    [e for (e, _), b in held.outputs.items() if b], self._edge_shapes)
            index = {"channel_state": {"inputs": held.bytes_in, "outputs": held.bytes_out, **edges}}
            if held.feedback_records:  # a loop head's log: the metadata names what it holds
                index["channel_state"].update(feedback=held.feedback_bytes, feedback_records=held.feedback_records)
            return storage.write_state(checkpoint_id, name, data, index), len(data), len(data)
        for wait in getattr(snap, "waits", ()):  # e.g. a FileSink's part files: complete before the ack
            wait()
        if type(snap.keyed).__name__ == "RocksDBSnapshot":  # not imported here: rocksdict loads only for RocksDB jobs
            from ..state.rocksdb_snapshot import write_snapshot as write_rocksdb_snapshot

            return write_rocksdb_snapshot(snap.keyed, storage, name, snap.operator_state)
        data, index = serialize(snap.keyed, snap.max_parallelism, snap.operator_state)
        return storage.write_state(checkpoint_id, name, data, index), len(data), len(data)

    def _collect_snapshots(self) -> None:
        results = self.snapshots.results  # type: ignore[union-attr]
        while results:
            r = results.popleft()
            for snap in r.job.snapshots:
                snap.done()
            task, n = r.job.task, r.job.checkpoint_id
            if r.error is not None:
                self._decline(task, n, f"task {task.vertex.name(self.graph)} (subtask {task.subtask + 1}) "
                                       f"could not write its snapshot: {r.error}")
                continue
            if self.control is not None:
                self.control.send({"type": "ack", "slot": self.subtask, "attempt": self.attempt, "id": n,
                                   "task": task.vertex.id, "subtask": task.subtask, "name": task.vertex.name(self.graph),
                                   "handles": r.handles, "sync_ms": r.job.sync_ms, "async_ms": r.async_ms,
                                   "alignment_ms": r.job.alignment_ms, "size": r.size, "uploaded": r.uploaded,
                                   "start_delay_ms": r.job.start_delay_ms, **_channel_state_stats(r.job.channel_state)})

    def _decline(self, task: Task, checkpoint_id: int, reason: str) -> None:
        if self.control is not None:
            self.control.send({"type": "decline", "slot": self.subtask, "attempt": self.attempt,
                               "id": checkpoint_id, "task": task.vertex.id, "reason": reason})

    def _notify_complete(self, checkpoint_id: int, final: bool) -> None:
        self.last_completed = max(self.last_completed, checkpoint_id)
        self.savepoints.pop(checkpoint_id, None)
        for task in self.tasks:
            if task.paused_for == checkpoint_id:
                task.paused_for = 0
                task.finish()  # the stop-with-savepoint is durable: this source ends here
            elif checkpoint_id == self._stop_savepoint and task.loop is not None:
                # What circulates is in the savepoint (its heads' logs): running it on would only make output
                # that no checkpoint commits, and that the job resumed from the savepoint makes again.
                task.end_loop()
        for op in self.operators.values():
            if op.keyed_backend is not None:
                op.keyed_backend.notify_checkpoint_complete(checkpoint_id)
            op.notify_checkpoint_complete(checkpoint_id)
        if final:
            self.final_checkpoint_done = True

    def _await_final_checkpoint(self) -> None:
        """Every task has finished: stay until the final checkpoint completes, so the
        last pre-committed output of 2PC sinks is committed exactly once."""
        self.control.send({"type": "end_of_data", "slot": self.subtask, "attempt": self.attempt})
        while not self.final_checkpoint_done:
            self._handle_control()
            if self._parked:
                self._settle_channel_state()
            if self.snapshots.results:  # type: ignore[union-attr]
                self._collect_snapshots()
            self.transport.poll(0.01)

    def request_stop(self) -> None:
        """Graceful stop: sources end their input; everything downstream drains and finishes."""
        for task in self.tasks:
            if task.gate is None:
                task.stop_requested = True

    def operator_metrics(self) -> dict[str, list[int]]:
        """op id -> [records in, records out, current watermark (None before the first)]."""
        return {str(op_id): [op.records_in, op.output.records_out,
                             None if op.current_watermark == MIN_WATERMARK else op.current_watermark]
                for op_id, op in self.operators.items()}

    def user_metrics(self) -> list[list]:
        """[op id, subtask, entries] of each operator with user or connector metrics (api/metrics.py):
        gauges are read and meter rates worked out now, in the task's thread."""
        now = time.monotonic()
        out = []
        for op_id, op in self.operators.items():
            registry = getattr(op.ctx, "_metrics", None)
            if registry is not None and registry.metrics:
                out.append([str(op_id), op.ctx.get_index_of_this_subtask(), registry.report(now)])
        return out

    def _credit_fed(self, until: float) -> None:
        """The producers in this slot whose output the stepping task took: back-pressured meanwhile."""
        task = self._stepping
        if task is not None and task.fed_by:
            for producer in task.fed_by:
                if producer is not task:
                    producer.time.fed += until - self._credited
        self._credited = until

    def _report_if_due(self, now: float | None = None) -> None:
        """Every metrics.reporter.interval: from the loop, and from inside a long step (``Task._process``)."""
        now = time.monotonic() if now is None else now
        if now >= self._next_metrics:
            self._report_metrics()
            self._next_metrics = now + self.metrics_interval

    def _report_metrics(self) -> None:
        if self.control is not None:
            self._report_queryable()
            self.control.send({"type": "metrics", "slot": self.subtask, "ops": self.operator_metrics(),
                               "user": self.user_metrics(),
                               "started": self.started_at, "ended": self.ended_at,
                               "task_time": self._task_times()})

    def _task_times(self) -> dict[str, list]:
        now = time.perf_counter()
        self._credit_fed(now)  # a report from inside a step: its producers' wait so far is back pressure
        return {t.vertex.name(self.graph): t.time.report(now) for t in self.tasks}

    def _report_failure(self, e: BaseException) -> None:
        if self.control is None or self.control.closed:
            return
        if isinstance(e, RestoreError):
            msg = {"operator": None, "error_type": type(e).__name__, "error": str(e), "traceback": traceback.format_exc(),
                   "cause": "storage" if e.transient else "restore", "checkpoint": (self.restore or {}).get("id")}
        elif isinstance(e, OperatorFailure):
            msg = {"operator": e.operator, "error_type": e.error_type, "error": e.error, "traceback": e.traceback,
                   "cause": "operator", "parallelism": e.parallelism, "subtask": e.subtask}
        else:
            msg = {"operator": None, "error_type": type(e).__name__, "error": str(e),
                   "traceback": traceback.format_exc(), "cause": "peer" if isinstance(e, PeerLost) else "task"}
        self.control.send({"type": "failed", "slot": self.subtask, **msg})
        self.control.flush()


__all__ = ["SlotRuntime", "Task"]
