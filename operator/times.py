"""Times as the StreamJob status writes them: ISO 8601 in UTC, to the second (``2026-01-01T00:00:00Z``)."""

from __future__ import annotations

from datetime import datetime, timezone


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def from_epoch(t: float) -> str:
    return iso(datetime.fromtimestamp(t, tz=timezone.utc))
