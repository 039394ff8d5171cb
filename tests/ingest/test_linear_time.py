"""Chunking one long line costs work in proportion to its length, and ingesting a file of many
sources costs work in proportion to their number.

Work is counted, not timed: the text is a ``str`` subclass that adds up how many characters
each search, count and slice of it covers. Text copies made from it (by ``strip`` or a regex
over a slice) are plain strings, so what is counted is every pass over the whole line. For
many sources, what is counted is the source rows the store lists: a listing per source (one
per tree sealed, say) makes that the square of their number.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, SupportsIndex

import pytest

import stratamem
from stratamem.ingest.chunking import ChunkingConfig, chunk_records
from stratamem.ingest.model import Record
from stratamem.ingest.splitting import split_text
from stratamem.types import SourceKind

_TEXT = (
    "the release of Phoenix slipped; see https://example.com/a?x=1 or mail alice@example.org, "
    "ping @bob and tag #release. Really, it's fine! (yes) - maybe: RedisCluster, v1.2.3"
)
_WORDS = _TEXT.split()


def prose(size: int) -> str:
    words = (_WORDS[(i * 7) % len(_WORDS)] for i in range(size))
    return " ".join(words)[:size]


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


LINES: dict[str, Callable[[int], str]] = {
    "prose": prose,
    "no spaces": lambda size: _repeat("abcdefghij", size),
    "only spaces": lambda size: "a" + " " * (size - 2) + "z",
    "one char": lambda size: "a" * size,
    "punctuation": lambda size: _repeat("!?.,;:-_()", size),
    "sentence ends": lambda size: _repeat(". ", size),
    "hashes": lambda size: "#" * size,
    "heading": lambda size: "# " + prose(size - 2),
    "tags": lambda size: _repeat("#tag ", size),
}


class Scanned(str):
    """A string that counts the characters its searches, counts and slices go over."""

    work = 0

    def _span(self, start: SupportsIndex | None, end: SupportsIndex | None) -> int:
        lo, hi, _ = slice(start, end).indices(len(self))
        return max(hi - lo, 0)

    def count(
        self, sub: str, start: SupportsIndex | None = None, end: SupportsIndex | None = None
    ) -> int:
        Scanned.work += self._span(start, end)
        return super().count(sub, start, end)

    def find(
        self, sub: str, start: SupportsIndex | None = None, end: SupportsIndex | None = None
    ) -> int:
        found = super().find(sub, start, end)
        lo = slice(start, end).indices(len(self))[0]
        Scanned.work += (found if found != -1 else self._span(start, end) + lo) - lo
        return found

    def rfind(
        self, sub: str, start: SupportsIndex | None = None, end: SupportsIndex | None = None
    ) -> int:
        found = super().rfind(sub, start, end)
        hi = slice(start, end).indices(len(self))[1]
        Scanned.work += hi - found if found != -1 else self._span(start, end)
        return found

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        if isinstance(key, slice):
            Scanned.work += len(range(*key.indices(len(self))))
        return super().__getitem__(key)


def work_to_chunk(text: str, kind: SourceKind = SourceKind.RECORD) -> tuple[int, int]:
    """(characters gone over, drafts) for chunking ``text`` as one record."""
    Scanned.work = 0
    drafts = list(chunk_records(kind, [Record(text=Scanned(text), ref="line.jsonl:1")]))
    return Scanned.work, len(drafts)


@pytest.mark.parametrize("name", sorted(LINES))
def test_chunking_one_line_goes_over_each_character_a_few_times(name: str) -> None:
    size = 200_000
    work, drafts = work_to_chunk(LINES[name](size))
    # A search from the start of the line for every chunk would be about
    # drafts * size / 2 (over 10**7 here). A forward scan goes over each character about five
    # times: the window searched for a break, the chunk cut out, the newline count and the
    # heading search.
    assert work <= 8 * size, (work, drafts)


@pytest.mark.parametrize("name", ["prose", "heading", "hashes"])
def test_chunking_work_doubles_with_the_line(name: str) -> None:
    small, _ = work_to_chunk(LINES[name](100_000))
    large, _ = work_to_chunk(LINES[name](200_000))
    assert large <= 2.1 * small


@pytest.mark.parametrize("kind", [SourceKind.DOCUMENT, SourceKind.EMAIL, SourceKind.CHAT])
def test_every_kind_chunks_a_long_line_in_linear_work(kind: SourceKind) -> None:
    size = 200_000
    work, drafts = work_to_chunk(prose(size), kind)
    assert drafts > 50
    assert work <= 8 * size


def test_a_two_megabyte_line_splits_into_pieces_covering_each_character_once() -> None:
    text = prose(2_000_000)
    spans = split_text(text, target=800, min_chars=200, max_chars=1200, overlap=0)
    assert spans[0].start == 0
    assert spans[-1].end == len(text)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    assert all(200 <= s.end - s.start <= 1200 for s in spans[:-1])
    assert "".join(text[s.start : s.end] for s in spans) == text


def test_a_two_megabyte_line_with_overlap_covers_each_character_once_or_twice() -> None:
    text = prose(2_000_000)
    spans = split_text(text)
    assert spans[0].start == 0
    assert spans[-1].end == len(text)
    for a, b in itertools.pairwise(spans):
        assert a.start < b.start <= a.end, "a gap, or a span inside the one before"
    assert all(a.end <= c.start for a, c in zip(spans, spans[2:], strict=False))


def test_a_heading_that_is_the_whole_line_gives_a_clipped_title() -> None:
    text = "# " + prose(50_000)
    drafts = list(chunk_records(SourceKind.DOCUMENT, [Record(text=text, ref="note.md")]))
    limit = ChunkingConfig().title_max
    assert len(drafts) > 10
    assert {d.title for d in drafts} == {drafts[0].title}
    assert len(drafts[0].title) <= limit
    assert drafts[0].title.endswith("…")
    assert text[2:].startswith(drafts[0].title[:-1])


def _tagged_note(tags: int) -> Record:
    words = []
    for i in range(tags):
        words.extend(_WORDS[:19])
        words.append(f"#topic{i}")
    return Record(
        text=" ".join(words), ref="note.md", tags=("front", *(f"topic{i}" for i in range(tags)))
    )


def test_a_long_note_gives_each_chunk_only_its_own_inline_tags() -> None:
    from stratamem.entities.extract import record_mentions

    record = _tagged_note(400)
    drafts = list(chunk_records(SourceKind.DOCUMENT, [record]))
    assert len(drafts) > 20
    # Every chunk keeps the tag written nowhere in the text; each inline tag lands on the
    # chunks that hold it (two at most, with the overlap), not on every chunk.
    assert all(d.tags[0] == "front" for d in drafts)
    placed = sum(len(d.tags) - 1 for d in drafts)
    assert 400 <= placed <= 2 * 400
    for draft in drafts:
        assert all(f"#{tag}" in draft.content for tag in draft.tags[1:])
        mentions, _ = record_mentions(
            draft.content, draft.records, scope="notes:x", kind=SourceKind.DOCUMENT
        )
        tagged = {m.entity_id for m in mentions if m.kind == "tag"}
        assert tagged == {f"tag:{tag}" for tag in draft.tags}


def test_a_note_with_few_tags_gives_every_chunk_all_of_them() -> None:
    record = _tagged_note(8)
    record = Record(text=record.text * 10, ref=record.ref, tags=record.tags[:8])
    drafts = list(chunk_records(SourceKind.DOCUMENT, [record]))
    assert len(drafts) > 1
    assert all(d.tags == record.tags for d in drafts)


def _count_listed_rows(store: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the sources the store lists, by the call that lists them (a lookup by id or
    scope that goes through the listing is counted there)."""
    listed: dict[str, int] = {"sources": 0, "source_kinds": 0}
    for name in listed:
        method = getattr(store, name)

        def counted(*args: Any, _method: Any = method, _name: str = name) -> Any:
            found = _method(*args)
            listed[_name] += len(found)
            return found

        monkeypatch.setattr(store, name, counted)
    return listed


@pytest.mark.parametrize("sources", [300, pytest.param(4_000, marks=pytest.mark.slow)])
def test_a_jsonl_of_many_sources_lists_each_source_a_few_times(
    sources: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "many.jsonl"
    file.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "source": f"s{i}", "text": f"note {i} on topic{i % 7}"})
            + "\n"
            for i in range(sources)
        ),
        encoding="utf-8",
    )
    with stratamem.open(tmp_path / "many.db") as memory:
        listed = _count_listed_rows(memory.store, monkeypatch)
        report = memory.ingest(file, parallel=False)
        assert len(report.sources) == sources
        assert report.trees is not None
        assert report.trees.trees == sources
    # Once to see what the store holds before reading, once for the kinds of the trees
    # sealed; a listing per source or per tree would be ``sources`` times as many.
    assert sum(listed.values()) <= 3 * sources, listed


@pytest.mark.parametrize("sources", [300])
def test_an_admitted_ingest_of_many_sources_looks_each_up_alone(
    sources: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write principal's ingest shows each source to ``admit`` as it was: that lookup reads
    the one source, not the store's listing (a listing per source is quadratic)."""
    file = tmp_path / "many.jsonl"
    file.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "source": f"s{i}", "text": f"n {i}"}) + "\n"
            for i in range(sources)
        ),
        encoding="utf-8",
    )
    shown: list[str] = []
    with stratamem.open(tmp_path / "many.db") as memory:
        memory.ingest(file, parallel=False, trees=False)
        listed = _count_listed_rows(memory.store, monkeypatch)
        report = memory.ingest(
            file, parallel=False, trees=False, admit=lambda before, after: shown.append(after.id)
        )
    assert len(report.sources) == len(shown) == sources
    assert sum(listed.values()) <= 3 * sources, listed
