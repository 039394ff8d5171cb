"""Times are kept to the millisecond on every path: a record chunked as it is read (a first
ingest) falls in the window it falls in when chunked from the store (a merge)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import stratamem
from stratamem.timeparse import from_ms, to_ms

T0 = datetime(2024, 3, 11, 9, 0, tzinfo=UTC)


def lines(path: Path, times: list[datetime]) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"m{n}",
                    "source": "chan",
                    "kind": "chat",
                    "author": "ana",
                    "text": f"message {n}",
                    "timestamp": when.isoformat(),
                }
            )
            + "\n"
            for n, when in enumerate(times)
        ),
        encoding="utf-8",
    )
    return path


def chunks(memory: stratamem.Memory) -> list[tuple[str, str]]:
    return sorted(
        (c.id, c.content) for s in memory.store.sources() for c in memory.store.iter_chunks(s.id)
    )


@pytest.mark.parametrize("micros", [291, 999, 1])
def test_a_silence_just_over_the_gap_in_microseconds_chunks_the_same_split_or_whole(
    micros: int, tmp_path: Path
) -> None:
    # 1800.000291 s: over the 30-minute gap to the microsecond, exactly the gap in ms.
    times = [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=31, microseconds=micros)]
    for name in ("whole", "first", "second"):
        (tmp_path / name).mkdir()
    whole = stratamem.open(tmp_path / "whole.db", embedder=None)
    whole.ingest(lines(tmp_path / "whole" / "log.jsonl", times), parallel=False)
    split = stratamem.open(tmp_path / "split.db", embedder=None)
    split.ingest(lines(tmp_path / "first" / "log.jsonl", times[:2]), parallel=False)
    split.ingest(lines(tmp_path / "second" / "log.jsonl", times), parallel=False)
    assert chunks(whole) == chunks(split)
    assert len(chunks(whole)) == 1  # a step of exactly the gap keeps the window open


@given(st.integers(min_value=-(10**13), max_value=10**13))
def test_milliseconds_round_trip(ms: int) -> None:
    assert to_ms(from_ms(ms)) == ms


@given(st.datetimes(timezones=st.just(UTC)))
def test_to_ms_is_the_millisecond_the_instant_falls_in(when: datetime) -> None:
    ms = to_ms(when)
    assert ms is not None
    start = from_ms(ms)
    assert start is not None
    assert start <= when < start + timedelta(milliseconds=1)
