"""Invariants of sealing and cover_window over random chat histories."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from stratamem.config import TreeConfig
from stratamem.retrieval import primitives
from stratamem.store.base import Store
from stratamem.tree.builder import TreeBuilder
from stratamem.tree.extractive import ExtractiveSummarizer
from stratamem.tree.summarizer import SummaryItem
from stratamem.types import NodeKind
from suite import examples

histories = st.lists(
    st.lists(st.integers(min_value=0, max_value=6 * 24 * 60), min_size=1, max_size=40).map(sorted),
    min_size=1,
    max_size=3,
)
configs = st.builds(
    TreeConfig,
    input_token_budget=st.integers(min_value=4, max_value=60),
    summary_fanout=st.integers(min_value=2, max_value=4),
    flush_age_days=st.floats(min_value=0.02, max_value=3.0),
)
SETTINGS = settings(max_examples=examples(40), deadline=None)
# On PostgreSQL an example costs a database or two: the same sealing, fewer examples.
POSTGRES_EXAMPLES = 10
EPOCH = datetime(2024, 3, 1, tzinfo=UTC)
Chat = Callable[..., str]
Shape = Callable[[Store], set[Any]]


def settings_for(fresh_stores: Any) -> settings:
    """:data:`SETTINGS` for a test on the backend of ``fresh_stores``."""
    if fresh_stores.postgres:
        return settings(SETTINGS, max_examples=POSTGRES_EXAMPLES)
    return SETTINGS


def _store(fresh: Callable[[], Store], chat: Chat, chats: Sequence[Sequence[int]]) -> Store:
    store = fresh()
    for n, minutes in enumerate(chats):
        chat(store, f"chat:{n}", minutes)
    return store


def _descendant_leaves(store: Store, summary_id: str) -> list[str]:
    node = store.trees.summaries([summary_id])[0]
    if node.level == 1:
        return list(node.child_ids)
    return [leaf for child in node.child_ids for leaf in _descendant_leaves(store, child)]


def test_cover_window_covers_every_in_window_leaf_exactly_once(
    fresh_stores: Any, chat: Chat
) -> None:
    @settings_for(fresh_stores)
    @given(chats=histories, config=configs, flush=st.booleans(), data=st.data())
    def check(chats: list[list[int]], config: TreeConfig, flush: bool, data: st.DataObject) -> None:
        store = _store(fresh_stores, chat, chats)
        builder = TreeBuilder(store, config=config)
        if flush:
            builder.enqueue(force=True)
        builder.run_pending()
        a = data.draw(st.integers(min_value=-60, max_value=6 * 24 * 60 + 60))
        b = data.draw(st.integers(min_value=a, max_value=6 * 24 * 60 + 120))
        since, until = EPOCH + timedelta(minutes=a), EPOCH + timedelta(minutes=b)
        response = primitives.cover_window(store, since=since, until=until, limit=100_000)
        covered: list[str] = []
        for hit in response.hits:
            assert hit.time_start is not None
            assert hit.time_end is not None
            assert since <= hit.time_start <= hit.time_end <= until
            if hit.node_kind is NodeKind.LEAF:
                covered.append(hit.node_id)
            else:
                covered.extend(_descendant_leaves(store, hit.node_id))
        expected = {
            row[0]
            for row in store.conn.execute(
                f"SELECT id FROM chunks"
                f" WHERE ts_start >= {store.dialect.p} AND ts_end <= {store.dialect.p}",
                (int(since.timestamp() * 1000), int(until.timestamp() * 1000)),
            )
        }
        assert len(covered) == len(set(covered)), "a leaf was covered twice"
        assert set(covered) == expected
        assert response.total == len(response.hits)
        store.close()

    check()


def test_every_envelope_is_the_span_of_its_leaves_and_sealing_is_idempotent(
    fresh_stores: Any, chat: Chat, shape: Shape
) -> None:
    @settings_for(fresh_stores)
    @given(chats=histories, config=configs, flush=st.booleans())
    def check(chats: list[list[int]], config: TreeConfig, flush: bool) -> None:
        store = _store(fresh_stores, chat, chats)
        builder = TreeBuilder(store, config=config)
        builder.enqueue(force=flush)
        builder.run_pending()
        ids = [r[0] for r in store.conn.execute("SELECT id FROM summaries WHERE deleted = 0")]
        for node in store.trees.summaries(ids):
            leaves = store.chunks(_descendant_leaves(store, node.id))
            assert node.time_start == min(c.time_start for c in leaves)  # type: ignore[type-var]
            assert node.time_end == max(c.time_end for c in leaves)  # type: ignore[type-var]
            assert node.level <= config.max_depth
        before = shape(store)
        builder.enqueue()
        builder.run_pending()
        for tree in store.trees.all():
            builder.seal(tree)
        assert shape(store) == before
        # Every chunk is under exactly one live summary or still in its buffer.
        parents = store.conn.execute(
            """SELECT count(*) FROM chunks c WHERE c.parent_summary IS NOT NULL AND NOT EXISTS
               (SELECT 1 FROM summaries s WHERE s.rowid = c.parent_summary AND s.deleted = 0)"""
        ).fetchone()[0]
        assert parents == 0
        store.close()

    check()


class _Crash(BaseException):
    """Stands for the process dying: nothing after it runs, no handler catches it."""


def test_a_seal_interrupted_anywhere_resumes_to_the_same_tree(
    fresh_stores: Any, chat: Chat, shape: Shape
) -> None:
    @settings_for(fresh_stores)
    @given(chats=histories, config=configs, crash_at=st.integers(min_value=1, max_value=12))
    # A crash while sealing level 2 leaves level 1 empty, yet level 3 is still due.
    @example(
        chats=[[0, 0, 0, 0, 0, 0]],
        config=TreeConfig(input_token_budget=4, summary_fanout=2, flush_age_days=1.0),
        crash_at=10,
    )
    def check(chats: list[list[int]], config: TreeConfig, crash_at: int) -> None:
        whole = _store(fresh_stores, chat, chats)
        TreeBuilder(whole, config=config).run_pending()
        expected = shape(whole)
        whole.close()

        class Crashing(ExtractiveSummarizer):
            calls = 0

            def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
                Crashing.calls += 1
                if Crashing.calls == crash_at:
                    raise _Crash
                return super().summarize(items, budget=budget)

        store = _store(fresh_stores, chat, chats)
        with contextlib.suppress(_Crash):
            TreeBuilder(store, config=config, summarizer=Crashing()).run_pending()
        TreeBuilder(store, config=config).run_pending(lease_s=0)
        assert shape(store) == expected
        assert json.dumps(store.jobs.counts()) == json.dumps({"done": len(chats)})
        store.close()

    check()
