from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import stratamem
from stratamem.config import TreeConfig
from stratamem.plugins import open_store
from stratamem.store.base import Store
from stratamem.store.jobs import SEAL_KIND, seal_job_key
from stratamem.tree.builder import TreeBuilder
from stratamem.tree.extractive import ExtractiveSummarizer
from stratamem.tree.salience import leaf_score
from stratamem.tree.summarizer import SummaryItem
from stratamem.types import SourceKind

SMALL = TreeConfig(input_token_budget=30, summary_fanout=3, flush_age_days=1.0)
Chat = Callable[..., str]


def build(store: Store, config: TreeConfig = SMALL, **kwargs: Any) -> TreeBuilder:
    builder = TreeBuilder(store, config=config, **kwargs)
    builder.run_pending()
    return builder


def live(store: Store, level: int | None = None) -> list[Any]:
    sql = "SELECT * FROM summaries WHERE deleted = 0"
    if level is not None:
        sql += f" AND level = {int(level)}"
    return store.conn.execute(sql + " ORDER BY rowid").fetchall()


def test_level0_seals_when_the_token_budget_is_reached(store: Store, chat: Chat) -> None:
    # Six messages of 5–8 words, one minute apart: 30 tokens fill a buffer every 4–5 messages.
    sid = chat(store, "chat:a", list(range(12)))
    build(store)
    level1 = live(store, 1)
    assert level1, "nothing sealed"
    for row in level1:
        children = store.chunks(json.loads(row["child_ids"]))
        tokens = sum(c.token_count for c in children)
        assert tokens >= 30
        assert tokens - children[-1].token_count < 30  # sealed as soon as the budget was met
    sealed = store.conn.execute(
        f"SELECT count(*) FROM chunks"
        f" WHERE source_id = {store.dialect.p} AND parent_summary IS NOT NULL",
        (sid,),
    ).fetchone()[0]
    waiting = len(store.trees.leaf_buffer(sid))
    assert sealed + waiting == 12
    assert waiting > 0  # the young tail waits: under budget and not stale


def test_a_stale_buffer_seals_on_source_time_and_flush_seals_the_rest(
    store: Store, chat: Chat
) -> None:
    # Two messages, then one two days later: the first pair is older than flush_age (1 day)
    # when the third arrives, so it seals; the third waits until an explicit flush.
    sid = chat(store, "chat:a", [0, 5, 2 * 24 * 60])
    build(store)
    assert [len(json.loads(r["child_ids"])) for r in live(store, 1)] == [2]
    assert len(store.trees.leaf_buffer(sid)) == 1
    builder = TreeBuilder(store, config=SMALL)
    builder.enqueue(["chat:a"], force=True)
    builder.run_pending()
    assert len(store.trees.leaf_buffer(sid)) == 0
    assert len(live(store, 1)) == 2


def test_upper_levels_seal_on_fanout_and_are_never_forced(store: Store, chat: Chat) -> None:
    chat(store, "chat:a", list(range(60)))
    builder = build(store)
    builder.enqueue(force=True)
    builder.run_pending()
    level1, level2 = live(store, 1), live(store, 2)
    assert len(level2) == len(level1) // 3
    for row in level2:
        assert len(json.loads(row["child_ids"])) == 3
    unparented = [r for r in level1 if r["parent_id"] is None]
    assert len(unparented) == len(level1) % 3  # the partial group waits, even on flush
    tree = store.trees.all()[0]
    top = max(r["level"] for r in live(store))
    assert tree.max_level == top
    assert tree.root_id == [r["id"] for r in live(store, top)][-1]


def test_envelope_score_entities_and_parents(store: Store, chat: Chat) -> None:
    chat(store, "chat:a", [i * 10 for i in range(40)])
    build(store).enqueue(force=True)
    build(store)
    for row in live(store):
        ids = json.loads(row["child_ids"])
        if row["level"] == 1:
            kids = store.chunks(ids)
            starts = [c.time_start for c in kids]
            ends = [c.time_end for c in kids]
            marks = ",".join([store.dialect.p] * len(ids))
            parents = {
                r[0]
                for r in store.conn.execute(
                    f"""SELECT s.id FROM chunks c JOIN summaries s ON s.rowid = c.parent_summary
                        WHERE c.id IN ({marks})""",
                    ids,
                )
            }
        else:
            kids = store.trees.summaries(ids)
            starts = [k.time_start for k in kids]
            ends = [k.time_end for k in kids]
            assert row["score"] == max(k.score for k in kids)
            parents = {k.parent_id for k in kids}
        node = store.trees.summaries([row["id"]])[0]
        assert node.time_start == min(starts)  # type: ignore[type-var]
        assert node.time_end == max(ends)  # type: ignore[type-var]
        assert parents == {row["id"]}
        assert node.content.strip()


def test_sealing_again_changes_nothing(
    store: Store, chat: Chat, shape: Callable[[Store], set[Any]]
) -> None:
    chat(store, "chat:a", list(range(50)))
    builder = build(store)
    before = shape(store)
    builder.enqueue()
    builder.run_pending()
    tree = store.trees.all()[0]
    builder.seal(tree)
    assert shape(store) == before


def test_items_appended_after_planning_wait_for_the_next_seal(store: Store, chat: Chat) -> None:
    """The summarizer runs outside the transaction; a message that lands meanwhile must not be
    swept into the summary that did not read it."""
    sid = chat(store, "chat:a", list(range(8)))

    class Appending(ExtractiveSummarizer):
        calls = 0

        def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
            Appending.calls += 1
            if Appending.calls == 1:
                chat(store, "chat:a", [100], start_seq=8)
            return super().summarize(items, budget=budget)

    build(store, summarizer=Appending())
    first = live(store, 1)[0]
    children = json.loads(first["child_ids"])
    late = store.conn.execute("SELECT id, parent_summary FROM chunks WHERE seq = 8").fetchone()
    assert late["id"] not in children
    assert late["parent_summary"] != first["rowid"]
    assert sid


def test_a_summary_over_an_edited_message_is_retired_and_resealed(store: Store, chat: Chat) -> None:
    chat(store, "chat:a", list(range(12)))
    build(store)
    old = {r["id"] for r in live(store, 1)}
    first_child = json.loads(live(store, 1)[0]["child_ids"])[0]
    seq = store.chunks([first_child])[0].seq
    chat(store, "chat:a", [seq], start_seq=seq, texts=["edited: the release moved to friday"])
    build(store)
    retired = store.conn.execute("SELECT id FROM summaries WHERE deleted = 1").fetchall()
    assert retired, "the stale summary is kept, marked deleted"
    now = {r["id"] for r in live(store, 1)}
    assert now != old
    texts = " ".join(r["content"] for r in live(store, 1))
    assert "edited: the release moved to friday" in texts


def test_a_changed_document_becomes_a_new_version(store: Store, chat: Chat) -> None:
    kind = SourceKind.DOCUMENT
    chat(store, "notes:n", [0, 1], kind=kind, doc="a.md", texts=["alpha one.", "alpha two."])
    chat(store, "notes:n", [0], kind=kind, doc="b.md", start_seq=2, texts=["beta."])
    build(store)
    first = {(r["doc_id"], r["version"]) for r in live(store, 1)}
    assert first == {("a.md", 1), ("b.md", 1)}  # one subtree per document, sealed at once
    chat(store, "notes:n", [5], kind=kind, doc="a.md", start_seq=1, texts=["alpha changed."])
    build(store)
    assert {(r["doc_id"], r["version"]) for r in live(store, 1)} == {("a.md", 2), ("b.md", 1)}
    old = store.conn.execute(
        "SELECT content FROM summaries WHERE doc_id = 'a.md' AND version = 1"
    ).fetchone()
    assert old is not None  # kept for the record, never read
    memory_hits = [r["content"] for r in live(store, 1) if r["doc_id"] == "a.md"]
    assert any("alpha changed" in text for text in memory_hits)
    assert not any("alpha two" in text for text in memory_hits)


def test_a_grown_document_is_summarised_again_whole(store: Store, chat: Chat) -> None:
    kind = SourceKind.DOCUMENT
    chat(store, "notes:n", [0], kind=kind, doc="a.md", texts=["first part."])
    build(store)
    chat(store, "notes:n", [1], kind=kind, doc="a.md", start_seq=1, texts=["second part."])
    build(store)
    rows = live(store, 1)
    assert len(rows) == 1
    assert rows[0]["version"] == 2
    assert len(json.loads(rows[0]["child_ids"])) == 2


def test_forgetting_a_source_removes_its_tree(store_location: str) -> None:
    with stratamem.open(store_location, embedder=None, tree_config=SMALL) as memory:
        memory.ingest(Path(__file__).parents[1] / "fixtures" / "slack")
        memory.trees.flush()
        assert memory.trees.list()
        for source in memory.sources.list():
            memory.sources.forget(source.scope)
        assert memory.trees.list() == []
        counts = memory.store.conn.execute(
            "SELECT (SELECT count(*) FROM summaries), (SELECT count(*) FROM summary_entities),"
            " (SELECT count(*) FROM jobs)"
        ).fetchone()
        assert tuple(counts) == (0, 0, 0)


def test_deleting_a_source_drops_its_seal_job(store: Store, chat: Chat) -> None:
    sid = chat(store, "chat:a", [0, 1])
    tree = store.trees.of_source(sid)
    assert tree is not None
    keys = [row[0] for row in store.conn.execute("SELECT dedupe_key FROM jobs")]
    assert keys == [seal_job_key(tree.id)]
    store.delete_source(sid)
    assert store.jobs.counts() == {}


def test_deleting_sealed_leaves_queues_their_tree_again(store: Store, chat: Chat) -> None:
    sid = chat(store, "chat:a", list(range(12)))
    build(store)
    tree = store.trees.of_source(sid)
    assert tree is not None
    assert store.jobs.counts() == {"done": 1}
    with store.transaction():
        # The first level-1 summary loses children.
        store.delete_chunks(sid, store.chunk_ids(sid)[2:])
    job = store.jobs.claim(kind=SEAL_KIND)
    assert job is not None
    assert job.dedupe_key == seal_job_key(tree.id)
    assert job.payload == {"tree_id": tree.id}


def test_a_failing_summarizer_leaves_the_job_to_retry(store: Store, chat: Chat) -> None:
    chat(store, "chat:a", list(range(12)))

    class Broken:
        name = "broken"

        def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
            raise RuntimeError("model server gone")

    report = TreeBuilder(store, config=SMALL, summarizer=Broken()).run_pending()
    assert report.failed
    assert "model server gone" in report.failed[0]
    assert live(store) == []
    assert store.jobs.counts() == {"pending": 1}
    # Backoff: not ready yet; once due, a working summarizer completes it.
    store.conn.execute("UPDATE jobs SET not_before = 0")
    build(store)
    assert live(store, 1)


def test_a_process_killed_mid_seal_resumes_to_the_same_tree(
    store_location: str,
    locations: Any,
    tmp_path: Path,
    chat: Chat,
    shape: Callable[[Store], set[Any]],
) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    minutes = [i * 3 for i in range(80)]
    with open_store(locations.new(store_location, tmp_path, "whole")) as whole:
        chat(whole, "chat:a", minutes)
        build(whole)
        expected = shape(whole)
    path = store_location
    with open_store(path) as store:
        chat(store, "chat:a", minutes)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child dies mid-seal

        class Dying(ExtractiveSummarizer):
            calls = 0

            def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
                Dying.calls += 1
                if Dying.calls == 5:
                    os._exit(137)
                return super().summarize(items, budget=budget)

        child = open_store(path)
        TreeBuilder(child, config=SMALL, summarizer=Dying()).run_pending()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 137
    with open_store(path) as store:
        assert store.jobs.counts() == {"running": 1}
        partial = shape(store)
        assert 0 < len(partial) < len(expected)
        TreeBuilder(store, config=SMALL).run_pending()  # its holder is gone: taken at once
        assert shape(store) == expected
        assert store.jobs.counts() == {"done": 1}


def test_summaries_are_embedded_with_the_active_model(store_location: str) -> None:
    with stratamem.open(store_location, embedder="hashing", tree_config=SMALL) as memory:
        memory.ingest(Path(__file__).parents[1] / "fixtures" / "slack", trees=False)
        memory.indexes.embed()
        memory.trees.flush()
        model = memory.store.get_setting("embed.model")
        ids = [r["id"] for r in live(memory.store)]
        assert ids
        assert set(memory.store.trees.vectors(str(model), ids)) == set(ids)


def test_embed_fills_in_summaries_sealed_before_the_store_had_vectors(
    store_location: str,
) -> None:
    with stratamem.open(store_location, embedder="hashing", tree_config=SMALL) as memory:
        memory.ingest(Path(__file__).parents[1] / "fixtures" / "slack")
        memory.trees.flush()
        ids = [r["id"] for r in live(memory.store)]
        report = memory.indexes.embed()
        assert report.summaries == len(ids)
        model = str(memory.store.get_setting("embed.model"))
        assert set(memory.store.trees.vectors(model, ids)) == set(ids)


def test_summaries_are_embedded_in_batches_and_a_failure_leaves_them_for_later(
    store_location: str,
) -> None:
    from stratamem.embed.hashing import HashingEmbedder

    class Flaky(HashingEmbedder):
        failing = False
        batches: ClassVar[list[int]] = []

        def embed_batch(self, texts: Sequence[str], *, role: str = "passage") -> Any:
            if Flaky.failing:
                raise RuntimeError("embedding service down")
            Flaky.batches.append(len(texts))
            return super().embed_batch(texts, role=role)  # type: ignore[arg-type]

    embedder = Flaky()
    slack = Path(__file__).parents[1] / "fixtures" / "slack"
    with stratamem.open(store_location, embedder=embedder, tree_config=SMALL) as memory:
        memory.ingest(slack, trees=False)
        memory.indexes.embed()
        model = str(memory.store.get_setting("embed.model"))
        Flaky.failing = True
        memory.trees.flush()  # seals, then cannot embed: the summaries stand without vectors
        ids = [r["id"] for r in live(memory.store)]
        assert len(ids) > 1
        assert memory.store.trees.vectors(model, ids) == {}
        Flaky.failing = False
        Flaky.batches.clear()
        memory.trees.build()  # nothing to seal; the vectors are filled in
        assert sum(Flaky.batches) == len(ids)
        assert len(Flaky.batches) == -(-len(ids) // 32)  # batches of 32, not one at a time
        stored = memory.store.trees.vectors(model, ids)
        assert set(stored) == set(ids)
        contents = {n.id: n.content for n in memory.store.trees.summaries(ids)}
        for node, blob in stored.items():
            alone = HashingEmbedder().embed_batch([contents[node]], role="passage")[0]
            assert np.frombuffer(blob, dtype="<f4") == pytest.approx(alone, abs=1e-6)


def test_the_tops_of_a_tree_are_newest_first_and_those_without_a_time_last(
    store_location: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "pumps.jsonl"
    lines = [
        {"id": str(i), "text": f"Record {i}: the pump in bay {i % 7} was serviced by Dana."}
        | ({"ts": f"2024-03-01T10:{i:02d}:00Z"} if i < 20 else {})
        for i in range(40)
    ]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = TreeConfig(input_token_budget=40, summary_fanout=50)
    with stratamem.open(store_location, embedder=None, tree_config=config) as memory:
        memory.ingest(corpus, format="jsonl")
        memory.trees.flush()
        (tree,) = memory.trees.list()
        ends = [hit.time_end for hit in memory.trees.tops(tree.id)]
    timed = [end for end in ends if end is not None]
    assert 0 < len(timed) < len(ends)
    assert ends == [*sorted(timed, reverse=True), *[None] * (len(ends) - len(timed))]


def test_cascade_depth_is_bounded(store: Store, chat: Chat) -> None:
    config = TreeConfig(input_token_budget=1, summary_fanout=2, max_depth=3)
    chat(store, "chat:a", list(range(40)))
    build(store, config)
    assert max(r["level"] for r in live(store)) == 3


@pytest.mark.parametrize(
    ("tags", "entities", "score"),
    [((), 0, 0.25), ((), 2, 0.55), ((), 9, 1.0), (("pinned",), 0, 1.0), (("decision",), 1, 1.0)],
)
def test_leaf_score(tags: tuple[str, ...], entities: int, score: float) -> None:
    assert leaf_score(tags, entities) == pytest.approx(score)


@pytest.mark.parametrize(
    "bad",
    [
        {"input_token_budget": 0},
        {"summary_fanout": 1},
        {"max_depth": 33},
        {"flush_age_days": 0},
        {"output_token_budget": 2},
    ],
)
def test_bad_tree_config(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        TreeConfig(**bad)


def test_short_documents_of_no_file_share_summaries_and_each_is_under_one(
    store_location: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "notes.jsonl"
    lines = [
        {
            "id": str(i),
            "kind": "document",
            "text": f"Record {i}: the pump in bay {i % 7} was serviced by Dana.",
        }
        for i in range(60)
    ]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = TreeConfig(input_token_budget=120, summary_fanout=4)
    with stratamem.open(store_location, embedder=None, tree_config=config) as memory:
        memory.ingest(corpus, format="jsonl")
        store = memory.store
        chunks = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        level1 = live(store, 1)
        assert chunks == 60
        assert 1 < len(level1) <= chunks // 5  # about 120 tokens each, not one per record
        orphans = store.conn.execute(
            "SELECT count(*) FROM chunks WHERE parent_summary IS NULL"
        ).fetchone()[0]
        assert orphans == 0
        for row in level1:
            summary_tokens = row["token_count"]
            children = store.chunks(json.loads(row["child_ids"]))
            assert summary_tokens < sum(c.token_count for c in children)
