"""Flink's ``DeliveryGuarantee`` (``org.apache.flink.connector.base``; PyFlink:
``pyflink.datastream.connectors.DeliveryGuarantee``): what a sink promises across failures."""

from __future__ import annotations

from enum import Enum


class DeliveryGuarantee(Enum):
    EXACTLY_ONCE = "exactly-once"  # two-phase commit with the checkpoints: every record once
    AT_LEAST_ONCE = "at-least-once"  # flushed at every checkpoint: nothing lost, replays may repeat records
    NONE = "none"  # no flush at checkpoints: records in flight at a failure may be lost, or repeated


__all__ = ["DeliveryGuarantee"]
