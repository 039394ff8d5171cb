from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.ingest.chunking import ChunkingConfig, chunk_records
from stratamem.types import Record, SourceKind

T0 = datetime(2024, 3, 11, 9, 0, tzinfo=UTC)


def chat(minutes: int, author: str, text: str, thread: str | None = None) -> Record:
    return Record(
        text=text,
        ref=f"c#{minutes}",
        time=T0 + timedelta(minutes=minutes),
        author=author,
        thread=thread,
    )


def test_chat_windows_split_on_time_gap_and_keep_authors() -> None:
    records = [chat(0, "Alice", "hi"), chat(5, "Bob", "hey"), chat(120, "Alice", "later")]
    drafts = list(chunk_records(SourceKind.CHAT, records))
    assert [d.content for d in drafts] == ["Alice: hi\nBob: hey", "Alice: later"]
    assert drafts[0].time_range == (T0, T0 + timedelta(minutes=5))
    assert drafts[0].ref == "c#0 (+1)"


def test_threads_get_their_own_windows() -> None:
    records = [
        chat(0, "Alice", "root", thread="t1"),
        chat(1, "Bob", "main channel"),
        chat(2, "Carol", "reply", thread="t1"),
    ]
    drafts = list(chunk_records(SourceKind.CHAT, records))
    contents = sorted(d.content for d in drafts)
    assert contents == ["Alice: root\nCarol: reply", "Bob: main channel"]


def test_chat_window_size_cap() -> None:
    config = ChunkingConfig(chat_max_messages=3)
    records = [chat(i, "A", f"m{i}") for i in range(7)]
    drafts = list(chunk_records(SourceKind.CHAT, records, config))
    assert [len(d.records) for d in drafts] == [3, 3, 1]


def test_one_huge_message_is_split_not_truncated() -> None:
    text = " ".join(f"word{i}" for i in range(2000))
    drafts = list(chunk_records(SourceKind.CHAT, [chat(0, "A", text)]))
    assert len(drafts) > 1
    joined = " ".join(d.content for d in drafts)
    assert "word0 " in joined
    assert "word1999" in joined


def test_email_is_one_chunk_per_message_and_long_ones_split() -> None:
    short = Record(text="Short body", ref="m#1", title="Hi")
    long = Record(text="para. " * 2000, ref="m#2", title="Long")
    drafts = list(chunk_records(SourceKind.EMAIL, [short, long]))
    assert drafts[0].content == "Short body"
    assert drafts[0].title == "Hi"
    assert len(drafts) > 2
    assert all(d.ref == "m#2" for d in drafts[1:])


def test_quote_only_email_keeps_the_quote() -> None:
    record = Record(text="", quoted="> earlier text", ref="m#3", title="Re: x")
    assert [d.content for d in chunk_records(SourceKind.EMAIL, [record])] == ["> earlier text"]


def test_document_chunks_cite_lines_and_headings() -> None:
    body = (
        "# Queue\n\n"
        + "Redis costs us ops time. " * 40
        + "\n\n## Decision\n\n"
        + ("We move the queue into SQLite. " * 40)
    )
    record = Record(text=body, ref="notes/queue.md", title="Queue", meta={"body_line": 5})
    drafts = list(chunk_records(SourceKind.DOCUMENT, [record]))
    assert len(drafts) >= 2
    assert drafts[0].ref == "notes/queue.md:5"
    decision = next(d for d in drafts if d.content.startswith("## Decision"))
    assert decision.title == "Queue › Decision"
    assert decision.ref == "notes/queue.md:9"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 600),
            st.sampled_from(["A", "B", "C"]),
            st.text("abc xyz", min_size=1, max_size=80),
            st.sampled_from([None, "t1", "t2"]),
        ),
        max_size=80,
    )
)
def test_chat_chunking_keeps_every_message_once_in_order(
    rows: list[tuple[int, str, str, str | None]],
) -> None:
    rows = sorted(rows, key=lambda r: r[0])
    records = [chat(m, a, t, th) for m, a, t, th in rows]
    kept = [r for r in records if r.text.strip()]
    drafts = list(chunk_records(SourceKind.CHAT, records))
    seen = [r for d in drafts for r in d.records]
    assert sorted(map(id, seen)) == sorted(map(id, kept))
    for d in drafts:
        times = [r.time for r in d.records if r.time is not None]
        assert times == sorted(times)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(alphabet="abc de\n#.", min_size=1, max_size=3000), min_size=1, max_size=5))
def test_document_chunks_keep_order_and_have_stable_ids(texts: list[str]) -> None:
    from stratamem.ingest.reader import make_chunk

    records = [Record(text=t, ref=f"doc{i}.md", doc=f"doc{i}.md") for i, t in enumerate(texts)]

    def ids() -> list[str]:
        drafts = chunk_records(SourceKind.DOCUMENT, records)
        return [make_chunk("src_x", seq, d).id for seq, d in enumerate(drafts)]

    first = ids()
    assert first == ids()
    assert len(set(first)) == len(first)
    drafts = list(chunk_records(SourceKind.DOCUMENT, records))
    docs = [d.doc or "" for d in drafts]
    assert docs == sorted(docs)
    for i, text in enumerate(texts):
        words = text.split()
        pieces = [w for d in drafts if d.doc == f"doc{i}.md" for w in d.content.split()]
        # Overlap may repeat words, but every word of the text appears, in order.
        it = iter(pieces)
        assert all(any(w == p for p in it) for w in words)


def _naive_heading(text: str, pos: int) -> str:
    cut = text.rfind("\n#", 0, pos + 1)
    if cut == -1 and not text.startswith("#"):
        return ""
    end = text.find("\n", cut + 1)
    stripped = text[cut + 1 : end if end != -1 else len(text)].lstrip("#")
    return stripped.strip() if stripped.startswith((" ", "\t")) else ""


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet="ab #\n\t", max_size=300),
    st.lists(st.integers(0, 320), max_size=30),
)
def test_forward_locator_agrees_with_a_search_from_the_start(text: str, offsets: list[int]) -> None:
    from stratamem.ingest.chunking import _Locator

    where = _Locator(text)
    # Increasing offsets as the chunker asks, then one going back, which must still be right.
    for pos in [*sorted(offsets), *offsets[:1]]:
        pos = min(pos, len(text))
        assert where.newlines_before(pos) == text.count("\n", 0, pos)
        assert where.heading_at(pos) == _naive_heading(text, pos)


def test_long_titles_are_clipped_at_a_word() -> None:
    title = "word " * 100
    record = Record(text="body", ref="m#1", title=title.strip())
    (draft,) = chunk_records(SourceKind.EMAIL, [record], ChunkingConfig(title_max=42))
    assert draft.title == "word word word word word word word word…"
    (kept,) = chunk_records(SourceKind.EMAIL, [record], ChunkingConfig(title_max=500))
    assert kept.title == title.strip()
