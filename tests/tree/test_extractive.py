"""The extractive summarizer: deterministic, within budget, never empty, central and in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.embed.tokens import estimate_tokens
from stratamem.tree.extractive import ExtractiveSummarizer, cut_to_budget, when_label
from stratamem.tree.summarizer import Summarizer, SummaryItem

DAY = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)

# The "release moved" sentence holds what the others keep coming back to: release, migration,
# database, March.
CENTRAL = "The release moved to March 18 because the database migration was not ready."
NOTES = [
    "The database migration needs two more days of testing.",
    "Release notes go out on Monday.",
    "Bob brought cake on Friday.",
    "The database backup finished overnight.",
    CENTRAL,
    "Parking is closed next week.",
    "March is busy for the whole team.",
    "The migration owner is Carol.",
]


def summarize(items: list[SummaryItem], budget: int, **options: float) -> str:
    return ExtractiveSummarizer(**options).summarize(items, budget=budget)


def test_is_a_summarizer() -> None:
    summarizer = ExtractiveSummarizer()
    assert isinstance(summarizer, Summarizer)
    assert summarizer.name == "extractive"


def test_keeps_the_most_central_sentence() -> None:
    items = [SummaryItem(str(i), text) for i, text in enumerate(NOTES)]
    assert summarize(items, budget=estimate_tokens(CENTRAL)) == CENTRAL
    # Sentences inside one document text are found the same way.
    document = [SummaryItem("doc", " ".join(NOTES))]
    assert summarize(document, budget=estimate_tokens(CENTRAL) + 3) == CENTRAL


def test_original_order_is_kept() -> None:
    items = [SummaryItem(str(i), text) for i, text in enumerate(NOTES)]
    out = summarize(items, budget=60).splitlines()
    assert CENTRAL in out
    assert len(out) >= 3
    assert out == [text for text in NOTES if text in out]


def test_redundant_sentences_are_skipped() -> None:
    texts = [
        CENTRAL,
        "The release moved to March 18 because the database migration was not ready yet.",
        "the release moved to march 18, because the database migration was not ready",
        "Carol signed the vendor contract for the new office.",
    ]
    items = [SummaryItem(str(i), text) for i, text in enumerate(texts)]
    assert summarize(items, budget=200).splitlines() == [texts[0], texts[3]]


def test_a_near_duplicate_adding_a_term_is_skipped_by_the_threshold() -> None:
    texts = [CENTRAL, CENTRAL.replace("ready", "tested"), "Carol signed the vendor contract."]
    items = [SummaryItem(str(i), text) for i, text in enumerate(texts)]
    assert summarize(items, budget=200).splitlines() == [texts[0], texts[2]]
    # With no threshold, the new term is worth the near-duplicate.
    assert len(summarize(items, budget=200, redundancy=1.0).splitlines()) == 3


def test_who_and_when_prefix_each_line() -> None:
    items = [
        SummaryItem(
            "w1",
            "Alice Chen: we moved the release to March 18\n"
            "Bob: the migration is not ready\n"
            "a second line from Bob about the database",
            author="Alice Chen",
            time_start=DAY,
            time_end=DAY + timedelta(minutes=20),
        ),
        SummaryItem(
            "m1",
            "Budget approved for the vendor work.",
            author="carol@acme.io",
            time_start=DAY + timedelta(days=2),
        ),
        SummaryItem("n1", "Checklist: rollback plan first.", time_start=DAY),
        SummaryItem("x1", "An undated note about hiring.", author="dave"),
        SummaryItem("y1", "A bare note on parking."),
    ]
    assert summarize(items, budget=400).splitlines() == [
        "[2024-05-01 Alice Chen] we moved the release to March 18",
        "[2024-05-01 Bob] the migration is not ready",
        "[2024-05-01 Bob] a second line from Bob about the database",
        "[2024-05-03 carol@acme.io] Budget approved for the vendor work.",
        "[2024-05-01] Checklist: rollback plan first.",
        "[dave] An undated note about hiring.",
        "A bare note on parking.",
    ]


def test_summaries_keep_their_labels_or_get_their_day_range() -> None:
    items = [
        SummaryItem(
            "s1",
            "[2024-05-01 Alice] moved the release to March 18. It needs the migration.\n"
            "the migration slipped by a week",
            level=1,
            time_start=DAY,
            time_end=DAY + timedelta(days=6),
        ),
        SummaryItem(
            "s2",
            "The release and migration plan was approved by the board.",
            level=1,
            author="ignored",
            time_start=DAY + timedelta(days=7),
            time_end=DAY + timedelta(days=40),
        ),
    ]
    assert summarize(items, budget=400).splitlines() == [
        "[2024-05-01 Alice] moved the release to March 18. It needs the migration.",
        "[2024-05-01 Alice] the migration slipped by a week",
        "[2024-05-08..06-10] The release and migration plan was approved by the board.",
    ]


def test_sentences_of_one_line_share_its_label() -> None:
    item = SummaryItem(
        "w",
        "Alice: The release slipped. The migration is late. Budget is fine.",
        author="Alice",
        time_start=DAY,
    )
    out = summarize([item, SummaryItem("x", "Other release migration budget news.")], 400)
    assert out.splitlines()[0] == (
        "[2024-05-01 Alice] The release slipped. The migration is late. Budget is fine."
    )


def test_bullets_headings_and_wrapped_lines() -> None:
    text = (
        "# Queue redesign\n"
        "\n"
        "The queue stalled twice last week because the consumer\n"
        "lost its lease while the broker was restarting.\n"
        "\n"
        "- move the lease to the database\n"
        "* add a watchdog for the consumer\n"
        "1. page the on-call when the queue stalls\n"
    )
    out = summarize([SummaryItem("d", text)], budget=400).splitlines()
    assert out == [
        "Queue redesign",
        "The queue stalled twice last week because the consumer lost its lease while the "
        "broker was restarting.",
        "move the lease to the database",
        "add a watchdog for the consumer",
        "page the on-call when the queue stalls",
    ]


def test_a_sentence_longer_than_the_budget_is_cut_at_a_word_boundary() -> None:
    long = " ".join(f"release{i} migration" for i in range(300))
    out = summarize([SummaryItem("l", long, author="al", time_start=DAY)], budget=40)
    assert estimate_tokens(out) <= 40
    assert out.startswith("[2024-05-01 al] release0 migration release1")
    assert (out.split("] ", 1)[1] + " ") in (long + " ")


def test_labels_are_dropped_when_the_budget_cannot_carry_them() -> None:
    item = SummaryItem("a", "Migration done.", author="alice", time_start=DAY)
    assert summarize([item], budget=12) == "Migration done."
    assert summarize([item], budget=2) == "Migration"  # "done." is two tokens


def test_deterministic() -> None:
    items = [SummaryItem(str(i), text, author="bob") for i, text in enumerate(NOTES * 3)]
    outs = {summarize(items, budget=50) for _ in range(3)}
    assert len(outs) == 1


def test_stopword_only_input_is_summarised_from_the_start() -> None:
    items = [SummaryItem("a", "ok"), SummaryItem("b", "yes, thanks!"), SummaryItem("c", "wow")]
    assert summarize(items, budget=1) == "ok"
    assert summarize(items, budget=2) == "ok\nyes"  # cut, as it is longer than the budget
    assert summarize(items, budget=100) == "ok\nyes, thanks!\nwow"


@pytest.mark.parametrize(
    ("texts", "budget", "expected"),
    [
        (["...", "!!! ???"], 2, ".."),
        (["   ", "--"], 5, "--"),
        (["", " \n "], 5, "…"),
    ],
)
def test_never_empty(texts: list[str], budget: int, expected: str) -> None:
    items = [SummaryItem(str(i), text) for i, text in enumerate(texts)]
    assert summarize(items, budget=budget) == expected


def test_title_when_there_is_no_text() -> None:
    assert summarize([SummaryItem("a", " ", title="Queue design")], budget=5) == "Queue design"


def test_empty_items_and_bad_budget() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([], budget=10)
    with pytest.raises(ValueError, match="budget"):
        summarize([SummaryItem("a", "text")], budget=0)
    with pytest.raises(ValueError, match="redundancy"):
        ExtractiveSummarizer(redundancy=0.0)


_FRAGMENTS = ["\n", ". ", "! ", "- ", "# ", ": ", "Alice: ", "[x] ", "release ", "e.g. ", "…"]
_TEXT = st.lists(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
    | st.sampled_from(_FRAGMENTS),
    max_size=20,
).map("".join)
_ITEM = st.builds(
    SummaryItem,
    node_id=st.just("n"),
    text=_TEXT,
    level=st.integers(0, 2),
    author=st.none() | st.sampled_from(["Alice", "bob@x.io", "a]b", " "]),
    time_start=st.none() | st.just(DAY),
    time_end=st.none() | st.just(DAY + timedelta(days=3)),
    title=st.sampled_from(["", "Title"]),
)


@settings(max_examples=150, deadline=None)
@given(items=st.lists(_ITEM, min_size=1, max_size=6), budget=st.integers(1, 120))
def test_budget_respected_and_never_empty(items: list[SummaryItem], budget: int) -> None:
    out = summarize(items, budget=budget)
    assert estimate_tokens(out) <= budget
    assert out.strip()
    assert out == summarize(items, budget=budget)


@settings(max_examples=100, deadline=None)
@given(text=_TEXT, budget=st.integers(0, 60))
def test_cut_to_budget_is_a_prefix_within_budget(text: str, budget: int) -> None:
    out = cut_to_budget(text, budget)
    assert estimate_tokens(out) <= budget
    assert text.strip().startswith(out)
    if budget >= 1 and text.strip():
        assert out


@pytest.mark.parametrize(
    ("start", "end", "level", "label"),
    [
        (DAY, None, 0, "2024-05-01"),
        (DAY, DAY + timedelta(days=3), 0, "2024-05-01"),
        (DAY, DAY + timedelta(hours=2), 1, "2024-05-01"),
        (DAY, DAY + timedelta(days=3), 1, "2024-05-01..04"),
        (DAY, DAY + timedelta(days=40), 2, "2024-05-01..06-10"),
        (DAY, DAY + timedelta(days=400), 2, "2024-05-01..2025-06-05"),
        (None, DAY, 1, "2024-05-01"),
        (None, None, 0, ""),
    ],
)
def test_when_label(start: datetime | None, end: datetime | None, level: int, label: str) -> None:
    item = SummaryItem("x", "t", level=level, time_start=start, time_end=end)
    assert when_label(item) == label


def _chat(lines: int) -> list[SummaryItem]:
    """About 27 tokens a line, in windows of 15 lines, as chat ingestion makes them."""
    people = ["Alice Chen", "Bob", "Carol", "Dave"]
    topics = ["release", "migration", "queue", "invoice", "latency", "rollback", "budget"]
    texts = [
        f"{people[i % 4]}: the {topics[i % 7]} for customer {i % 13} moved after the "
        f"{topics[(i * 3) % 7]} review, so we check {topics[(i * 5) % 7]} numbers on day {i % 9} "
        f"and tell the {topics[(i * 2) % 7]} team by noon"
        for i in range(lines)
    ]
    return [
        SummaryItem(
            str(start),
            "\n".join(texts[start : start + 15]),
            author=people[start % 4],
            time_start=DAY + timedelta(hours=start),
        )
        for start in range(0, lines, 15)
    ]


def test_a_full_buffer_is_summarized_within_its_budget() -> None:
    # How long it takes is measured by the benchmarks, never asserted here.
    items = _chat(300)
    assert 7000 <= sum(estimate_tokens(item.text) for item in items) <= 9000
    out = ExtractiveSummarizer().summarize(items, budget=400)
    assert 0 < estimate_tokens(out) <= 400


def test_one_item_that_fits_is_kept_whole_with_its_label() -> None:
    item = SummaryItem(
        "n",
        "Plan: ship on April 5.\nThe plan: ship on April 5, again.",
        author="alice",
        time_start=datetime(2024, 3, 1, tzinfo=UTC),
    )
    out = ExtractiveSummarizer().summarize([item], budget=200)
    # Kept whole, the near-duplicate line too: there is nothing to choose between.
    assert out.splitlines() == [
        "[2024-03-01 alice] Plan: ship on April 5.",
        "[2024-03-01 alice] The plan: ship on April 5, again.",
    ]
    assert estimate_tokens(out) <= 200
