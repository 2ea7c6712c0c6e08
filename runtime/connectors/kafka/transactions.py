"""Decisions of the exactly-once Kafka sink, apart from any I/O: transactional ids, what a restored
writer continues from, which open transactions a restored (or fresh) subtask aborts, what a failed
resume means.

**Naming.** Every transaction gets a transactional id of its own, ``<prefix>-<subtask>-<n>``, with
``n`` counting the transactions of that subtask (as Flink's ``<prefix>-<subtask>-<checkpoint id>``).
One id is never used for two transactions in one attempt: under transaction version 1 (the one
librdkafka's transactions run under, see ``protocol.py``) a commit keeps the producer id and epoch,
so a committable ``(id, producer id, epoch)`` resumed after a crash would otherwise commit a later
transaction of the same id. A restarted attempt numbers from a range of its own (``ATTEMPT_SPAN``), so
it never reuses an id a task of the failed attempt may still be initializing; what the failed
attempt left open is aborted by fencing it (``InitProducerId``), see below.

**Counters.** ``n`` is taken when a transaction begins; the writer state of a checkpoint holds the
next ``n`` of each subtask, and every transaction numbered below it was pre-committed at or before
that checkpoint's barrier (it is a committable of the checkpoint, or already committed). A restored
subtask continues from the largest counter of all old subtasks, so it never reuses the id of a
restored committable, whichever subtask holds that after a rescale.

**Lingering transactions.** On start every subtask ``i`` of ``p`` lists the open (``Ongoing``)
transactions of the cluster and aborts those named ``<prefix>-<s>-<n>`` with ``s % p == i`` and
``n`` at or above the restored counter of old subtask ``s`` (0 when there is none): exactly what a
failed attempt (of any parallelism) began after the restored checkpoint. Ids below the counter are
the restored checkpoint's own committables, committed by whichever subtask holds them; ids of other
current subtasks never match (``s < p`` and ``s % p == i`` means ``s == i``), so no subtask aborts
what another has just begun. What a failed attempt's task that lives on opens after this start-up
abort is aborted by the running subtask's periodic look (``earlier_attempts_to_abort``): ids of the
same rule numbered below the current attempt's first number, which it never uses.
"""

from __future__ import annotations

import re
from typing import Iterable


def transactional_id(prefix: str, subtask: int, n: int) -> str:
    return f"{prefix}-{subtask}-{n}"


def parse_transactional_id(prefix: str, tid: str) -> tuple[int, int] | None:
    """(subtask, n) of an id this prefix names, else None. A longer prefix that merely starts
    with ``prefix`` does not match: its ids have more than two numbers after ``prefix-``."""
    m = re.fullmatch(re.escape(prefix) + r"-(\d+)-(\d+)", tid)
    return (int(m.group(1)), int(m.group(2))) if m else None


def validate_prefix(prefix: str | None) -> str:
    if not prefix:
        raise ValueError("KafkaSink with DeliveryGuarantee.EXACTLY_ONCE needs set_transactional_id_prefix(...): "
                         "a prefix unique to this sink among everything that writes to the Kafka cluster "
                         "(its transactional ids are <prefix>-<subtask>-<n>)")
    if len(prefix) > 200 or not re.fullmatch(r"[A-Za-z0-9._\-]+", prefix):
        raise ValueError(f"transactional id prefix {prefix!r}: use letters, digits, '.', '_' and '-' "
                         "(at most 200 characters)")
    return prefix


def writer_state(prefix: str, subtask: int, next_n: int) -> dict:
    """One subtask's writer state in a checkpoint (union list state: every restored subtask sees all)."""
    return {"prefix": prefix, "subtask": subtask, "next": next_n}


def restored_counters(prefix: str, states: Iterable[dict]) -> dict[int, int]:
    """Old subtask -> its next transaction number, from the union of the restored writer states
    (states of another prefix are ignored: their ids cannot collide with this prefix's)."""
    counters: dict[int, int] = {}
    for s in states:
        if s.get("prefix") != prefix:
            continue
        sub, n = int(s["subtask"]), int(s["next"])
        counters[sub] = max(n, counters.get(sub, 0))
    return counters


# Each attempt numbers its transactions from its own range: attempt a from ``a * ATTEMPT_SPAN`` on
# (or above the restored counters, if they are higher). A task of a failed attempt may live on for a
# while (a producer still initializing in the background when the broker was away); were the next
# attempt to reuse its ids, that late InitProducerId would bump the epoch of the new attempt's
# transaction of the same id and abort it, possibly after it was pre-committed: lost output.
ATTEMPT_SPAN = 1 << 20


def first_number(counters: dict[int, int], attempt: int = 0) -> int:
    """Where a (restored) subtask's numbering starts: above every old subtask's counter, and in the
    range of its own attempt, which no earlier attempt used."""
    return max(max(counters.values(), default=0), attempt * ATTEMPT_SPAN)


def lingering_to_abort(open_ids: Iterable[str], prefix: str, subtask: int, parallelism: int,
                       counters: dict[int, int]) -> list[str]:
    """The open transactions (ids listed ``Ongoing``) this subtask must abort; see the module docstring."""
    out = []
    for tid in open_ids:
        parsed = parse_transactional_id(prefix, tid)
        if parsed is None:
            continue
        s, n = parsed
        if s % parallelism == subtask and n >= counters.get(s, 0):
            out.append(tid)
    return sorted(out, key=lambda t: parse_transactional_id(prefix, t))  # type: ignore[arg-type,return-value]


def earlier_attempts_to_abort(open_ids: Iterable[str], prefix: str, subtask: int, parallelism: int,
                              counters: dict[int, int], attempt: int) -> list[str]:
    """The open transactions a running subtask aborts at each look for hanging transactions: those
    ``lingering_to_abort`` names that are numbered below ``first_number(counters, attempt)``, i.e. in
    an earlier attempt's range.

    The start-up abort sees only what was open when it ran; a task of the failed attempt that lives on
    (its producer still retrying while the broker was away) can open a transaction after that, which
    then holds back read_committed readers until ``transaction.timeout.ms``. The current attempt never
    uses these ids (it numbers from ``first_number`` up), and the restored checkpoint's committables
    are numbered below the counters, so neither is touched, whatever the order of commit and look. A
    later attempt numbers above this one's first number (from ``(attempt + 1) * ATTEMPT_SPAN`` and
    above the counters of a checkpoint at least as new), so a look by a task of this attempt that is
    itself left over never aborts a later attempt's transaction either.
    """
    first = first_number(counters, attempt)
    lingering = lingering_to_abort(open_ids, prefix, subtask, parallelism, counters)
    return [t for t in lingering if parse_transactional_id(prefix, t)[1] < first]  # type: ignore[index]


def committable(tid: str, producer_id: int, epoch: int) -> dict:
    """What a checkpoint stores for a pre-committed transaction (picklable, small)."""
    return {"transactional_id": tid, "producer_id": int(producer_id), "epoch": int(epoch)}


# Answers of EndTxn (commit) that mean the transaction can no longer be committed by this identity.
FENCED = ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING")


def explain_failed_commit(c: dict, error: str, now: dict | None) -> str:
    """An error message for a committable that did not commit; ``now``: the coordinator's current
    state of the id (DescribeTransactions: state, producer_id, producer_epoch) or None if unknown."""
    tid, pid, epoch = c["transactional_id"], c["producer_id"], c["epoch"]
    where = f"transaction {tid} (producer id {pid}, epoch {epoch})"
    if now is None:
        return (f"{where} cannot be committed ({error}): the transaction coordinator no longer knows the id "
                "(expired after transactional.id.expiration.ms?); if it was not committed before, its records are lost")
    state, now_pid, now_epoch = now["state"], now["producer_id"], now["producer_epoch"]
    if state == "CompleteAbort" and now_pid == pid and now_epoch == epoch + 1:
        return (f"{where} cannot be committed ({error}): the broker aborted it (it stayed open longer than its "
                "transaction.timeout.ms, e.g. a restart took that long); its records are lost. Set the sink's "
                "transaction.timeout.ms well above checkpoint interval + restart time")
    return (f"{where} cannot be committed ({error}); the id is now {state} with producer id {now_pid}, epoch "
            f"{now_epoch}: it was used again after this transaction, so it was committed before (a restore from an "
            "older checkpoint or savepoint), or it timed out and its records are lost")


# -- hanging transactions ---------------------------------------------------------------------------
#
# A transaction "hangs" when its coordinator has completed it (CompleteCommit / CompleteAbort) but a
# partition it wrote to never got its marker: the partition still holds it open, its last stable
# offset stays at the transaction's first offset, and read_committed readers wait forever. Kafka
# itself causes this: a coordinator that finds a partition leaderless while it sends the markers
# skips that partition as "likely deleted" (the rule of KAFKA-5202), which a single-node KRaft broker
# restart triggers (the controller fences the old incarnation: every partition is leaderless for a
# moment). The repair writes the missing marker with WriteTxnMarkers, as ``kafka-transactions.sh``
# does, with the outcome the coordinator recorded.

def hanging_repairs(open_on_partitions: dict[tuple[str, int], list[tuple[int, int, int]]],
                    coordinator: dict[int, tuple[str, str, int]], prefix: str) -> tuple[list[dict], list[str]]:
    """The markers to write, and warnings for what is left alone.

    ``open_on_partitions``: (topic, partition) -> [(producer id, epoch, coordinator epoch)] of the
    producers with a transaction open there (DescribeProducers, ``current_txn_start_offset >= 0``).
    ``coordinator``: producer id -> (transactional id, state, epoch) (ListTransactions +
    DescribeTransactions). Only transactions of ``prefix`` are touched. A transaction the coordinator
    is still working on (Ongoing, PrepareCommit, PrepareAbort) is not hanging: its markers are on the
    way, or it is live. Returns repairs ``{transactional_id, producer_id, epoch, commit,
    coordinator_epoch, partitions}`` (one per producer, epoch and outcome).
    """
    repairs: dict[tuple[int, int, bool, int], dict] = {}
    warnings: list[str] = []
    for tp in sorted(open_on_partitions):
        for pid, epoch, coordinator_epoch in open_on_partitions[tp]:
            known = coordinator.get(pid)
            if known is None:
                continue  # another writer's, or an id the coordinator has expired: not ours to decide
            tid, state, now_epoch = known
            if parse_transactional_id(prefix, tid) is None:
                continue
            if state == "CompleteCommit" and now_epoch == epoch:
                commit = True
            elif state in ("CompleteAbort", "Empty") and now_epoch >= epoch:
                # Aborted (on timeout or by fencing: the epoch was bumped), or fenced by
                # InitProducerId after it, which aborts whatever was open.
                commit = False
            elif state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
                continue
            else:
                warnings.append(f"transaction {tid} (producer id {pid}, epoch {epoch}) is open on {tp[0]}-{tp[1]} "
                                f"but its coordinator says {state} with epoch {now_epoch}: left alone")
                continue
            key = (pid, epoch, commit, coordinator_epoch)
            r = repairs.setdefault(key, {"transactional_id": tid, "producer_id": pid, "epoch": epoch, "commit": commit,
                                         "coordinator_epoch": coordinator_epoch, "partitions": []})
            r["partitions"].append(tp)
    return list(repairs.values()), warnings
