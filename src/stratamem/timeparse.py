"""Reading times people type (``2024-03-12``, ``2024-03-12T09:30``, ``24h``, ``7d``, ``2w``)
and making every time an aware UTC ``datetime``.

Times are compared and stored in UTC. A naive ``datetime`` is taken to be UTC already, the
same everywhere, so naive and aware times can be mixed. A time whose UTC value falls outside
years 1–9999, or a span reaching past them, is a ``ValueError``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

_RELATIVE = re.compile(r"^\s*(\d+)\s*(m|min|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_MAX_DIGITS = 12  # more than the minutes between year 1 and 9999


def parse_when(text: str, *, now: datetime | None = None) -> datetime:
    """An absolute UTC time from an ISO 8601 date/time or a span back from ``now``."""
    match = _RELATIVE.match(text)
    if match:
        digits, unit = match.group(1), match.group(2).lower()
        amount = int(digits) if len(digits.lstrip("0")) <= _MAX_DIGITS else None
        try:
            if amount is None:
                raise OverflowError
            return as_utc(now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
        except OverflowError:
            raise ValueError(f"{_shown(text)} reaches back before the year 1") from None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read {_shown(text)} as a time; use 2024-03-12, 2024-03-12T09:30, 24h, 7d or 2w"
        ) from None
    return as_utc(value, name="the time")


def is_time_text(text: str) -> bool:
    """Whether ``text`` has a form :func:`parse_when` reads (an ISO 8601 date or time, or a
    span back), whatever its value: what tells a time that cannot be read from one that
    reads but falls outside years 1–9999."""
    if _RELATIVE.match(text):
        return True
    try:
        datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def as_utc(value: datetime, *, name: str = "time") -> datetime:
    """``value`` as an aware UTC time; a naive one is taken to be UTC already.

    ``name`` says which argument it is in the error raised for a time that is not a
    ``datetime`` or whose UTC value falls outside years 1–9999.
    """
    if not isinstance(value, datetime):
        raise ValueError(f"{name} must be a datetime, not {type(value).__name__}")
    if value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{name} {value.isoformat()} is outside years 1–9999 in UTC") from None


def optional_utc(value: datetime | None, *, name: str = "time") -> datetime | None:
    """:func:`as_utc`, passing None through."""
    return None if value is None else as_utc(value, name=name)


def days_before(now: datetime, days: float, *, name: str = "days") -> datetime:
    """The UTC time ``days`` days before ``now``; ``days`` must be a finite number, 0 or
    more, that does not reach back before the year 1."""
    if isinstance(days, bool) or not isinstance(days, int | float):
        raise ValueError(f"{name} must be a number of days, not {type(days).__name__}")
    if not math.isfinite(days) or days < 0:
        raise ValueError(f"{name} must be a finite number of days, 0 or more, not {days!r}")
    try:
        return as_utc(now, name="now") - timedelta(days=days)
    except OverflowError:
        raise ValueError(f"{name}={days!r} reaches back before the year 1") from None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def to_ms(value: datetime | None) -> int | None:
    """Milliseconds since the Unix epoch, as the stores keep times: the instant's millisecond
    (rounded down), in integers, so that ``to_ms(from_ms(n)) == n`` for every ``n`` (float
    seconds times 1000 lands just under a whole millisecond for about one value in 160)."""
    if value is None:
        return None
    if value.tzinfo is None:  # local time, as datetime.timestamp() reads it
        value = value.astimezone(UTC)
    return (value - _EPOCH) // _MS


def from_ms(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + value * _MS


def _shown(text: str, limit: int = 60) -> str:
    """``text`` quoted for an error message, cut short if long."""
    return repr(text if len(text) <= limit else text[:limit] + "…")
