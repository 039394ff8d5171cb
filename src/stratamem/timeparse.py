"""Reading times people type: ``2024-03-12``, ``2024-03-12T09:30``, ``24h``, ``7d``, ``2w``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_RELATIVE = re.compile(r"^\s*(\d+)\s*(m|min|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, *, now: datetime | None = None) -> datetime:
    """An absolute UTC time from an ISO 8601 date/time or a span back from ``now``."""
    match = _RELATIVE.match(text)
    if match:
        amount, unit = int(match.group(1)), match.group(2).lower()
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a time; use 2024-03-12, 2024-03-12T09:30, 24h, 7d or 2w"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
