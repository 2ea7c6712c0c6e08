"""Finding and repairing hanging transactions of an exactly-once ``KafkaSink`` (the decisions are
``transactions.hanging_repairs``; why transactions hang is said there).

For each partition of the sink's output topics: DescribeProducers (at the partition's leader) lists
the producers with a transaction open there; ListTransactions (by those producer ids) and
DescribeTransactions name their transactional ids and the coordinator's state; a transaction of the
sink's prefix that the coordinator has completed gets the marker it missed (WriteTxnMarkers at the
leader): commit for CompleteCommit, abort for CompleteAbort (or Empty after fencing).

The same looks abort what a task of an earlier attempt opened after the running attempt's start-up
abort (``abort_earlier_attempts``): such a transaction is Ongoing at its coordinator, so it is not
hanging, but nothing would end it before ``transaction.timeout.ms``.

ACLs: DescribeProducers needs Read on the topic, ListTransactions/DescribeTransactions Describe on
the transactional ids, WriteTxnMarkers ClusterAction on the cluster (a right normally only brokers
have). Where the cluster refuses, the repair logs a warning naming the transaction, partition and
the ``kafka-transactions.sh`` command an operator can run, and the job goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from . import transactions as txn
from .protocol import AUTHORIZATION, KafkaProtocolError, TransactionClient

log = logging.getLogger("streamjob.kafka")


@dataclass
class RepairReport:
    repaired: list[dict] = field(default_factory=list)  # the repairs written (transactions.hanging_repairs)
    refused: list[str] = field(default_factory=list)  # what the cluster's ACLs did not allow
    in_progress: int = 0  # transactions of the prefix open on a partition that the coordinator is still ending


def find_and_repair(client: TransactionClient, topics: list[str], prefix: str,
                    share: tuple[int, int] | None = None, warned: set[str] | None = None) -> RepairReport:
    """Repair the hanging transactions of ``prefix`` on ``topics``; with ``share`` = (subtask,
    parallelism) only on the partitions ``p`` with ``p % parallelism == subtask``, of the partitions
    the topics have at this look (a partition added while the job runs is looked at from then on).
    Raises ``KafkaProtocolError`` when the cluster cannot be asked (unreachable, timeout).
    ``warned``: refusals already logged (by an earlier look of the same writer), not logged again."""
    report = RepairReport()
    warned = set() if warned is None else warned
    try:
        leaders = client.partition_leaders(sorted(topics))
        wanted = [tp for tp in sorted(leaders) if share is None or tp[1] % share[1] == share[0]]
        producers = client.describe_producers(wanted)
    except KafkaProtocolError as e:
        if e.code in AUTHORIZATION:
            report.refused.append(f"cannot look for hanging transactions on {', '.join(topics)}: {e}")
            _warn_refused(report, warned)
            return report
        raise
    open_on = {tp: [(s.producer_id, s.producer_epoch, s.coordinator_epoch) for s in states
                    if s.current_txn_start_offset >= 0]
               for tp, states in producers.items()}
    open_on = {tp: v for tp, v in open_on.items() if v}
    if not open_on:
        return report
    pids = sorted({pid for v in open_on.values() for pid, _, _ in v})
    listed = [t for t in client.list_transactions((), pids) if txn.parse_transactional_id(prefix, t.transactional_id)]
    described = client.describe_transactions([t.transactional_id for t in listed])
    coordinator = {d.producer_id: (tid, d.state, d.producer_epoch) for tid, d in described.items()}
    report.in_progress = sum(1 for v in open_on.values() for pid, _, _ in v
                             if coordinator.get(pid, ("", "", 0))[1] in ("PrepareCommit", "PrepareAbort"))
    repairs, warnings = txn.hanging_repairs(open_on, coordinator, prefix)
    for w in warnings:
        log.warning("KafkaSink: %s", w)
    for r in repairs:
        where = ", ".join(f"{t}-{p}" for t, p in r["partitions"])
        try:
            client.write_txn_markers(r["producer_id"], r["epoch"], r["commit"], r["coordinator_epoch"],
                                     r["partitions"])
        except KafkaProtocolError as e:
            if e.code not in AUTHORIZATION:
                raise
            report.refused.append(
                f"transaction {r['transactional_id']} (producer id {r['producer_id']}, epoch {r['epoch']}) is "
                f"{'committed' if r['commit'] else 'aborted'} at its coordinator but still open on {where}, which "
                f"holds back read_committed readers; the cluster refused the missing marker ({e.name}: "
                "WriteTxnMarkers needs ClusterAction on the cluster). Grant the job's principal ClusterAction "
                "and the sink ends it at its next look; kafka-transactions.sh abort --topic "
                f"{r['partitions'][0][0]} --partition {r['partitions'][0][1]} ... only aborts it"
                f"{' (its committed records would be lost)' if r['commit'] else ''}")
            continue
        log.warning("KafkaSink: transaction %s (producer id %d, epoch %d) was %s by its coordinator but its marker "
                    "never reached %s (a broker restart?); wrote the missing %s marker", r["transactional_id"],
                    r["producer_id"], r["epoch"], "committed" if r["commit"] else "aborted", where,
                    "commit" if r["commit"] else "abort")
        report.repaired.append(r)
    _warn_refused(report, warned)
    return report


def abort_earlier_attempts(client: TransactionClient, prefix: str, subtask: int, parallelism: int,
                           counters: dict[int, int], attempt: int, transaction_timeout_ms: int) -> list[str]:
    """Abort the open transactions of ``prefix`` that a task of an earlier attempt opened after this
    attempt's start-up abort (``transactions.earlier_attempts_to_abort`` decides which), the way the
    start-up abort does: InitProducerId on the id bumps its epoch, which fences the left-over producer
    and aborts its transaction. Returns the ids aborted. Raises ``KafkaProtocolError`` when the
    cluster cannot be asked."""
    open_ids = [t.transactional_id for t in client.list_transactions(("Ongoing",))]
    aborted = []
    for tid in txn.earlier_attempts_to_abort(open_ids, prefix, subtask, parallelism, counters, attempt):
        client.init_producer_id(tid, transaction_timeout_ms)
        log.warning("KafkaSink: aborted transaction %s, opened by a task of an earlier attempt after this attempt "
                    "started (it would hold back read_committed readers until transaction.timeout.ms)", tid)
        aborted.append(tid)
    return aborted


def _warn_refused(report: RepairReport, warned: set[str]) -> None:
    for message in report.refused:
        if message not in warned:
            warned.add(message)
            log.warning("KafkaSink: %s", message)


__all__ = ["RepairReport", "abort_earlier_attempts", "find_and_repair"]
