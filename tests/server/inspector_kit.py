"""What the inspector's page tests share: the history of facts a store is given, so that an
entity's timeline has a value kept, one replaced and one retracted to show."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from stratamem.api import Memory


def fact_history(mem: Memory, subject: str, start: datetime, source: str) -> Any:
    """About ``subject``, said in ``source``: ``leads on-call`` from ``start``, replaced by
    ``leads release`` from day 9 (recorded on day 1), and ``status away`` from day 4
    (recorded on day 2) retracted on day 3. The retracted fact's write is returned."""
    mem.facts.remember(subject, "leads", "on-call", valid_from=start, now=start, source=source)
    mem.facts.remember(
        subject,
        "leads",
        "release",
        valid_from=start + timedelta(days=9),
        now=start + timedelta(1),
        source=source,
    )
    wrong = mem.facts.remember(
        subject,
        "status",
        "away",
        valid_from=start + timedelta(days=4),
        now=start + timedelta(2),
        source=source,
    )
    mem.facts.retract(wrong.recorded[0].id, now=start + timedelta(days=3))
    return wrong
