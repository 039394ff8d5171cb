"""The data of the inspector's sources, tree and entity pages, and their templates rendered
with it: on a small store with a summary tree of several levels, facts corrected and
retracted, a merged entity, a locked source and a source hidden from a principal, whose
views must equal those of a store holding only what it may see."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, date, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import inspector_kit
import jinja2
import pytest

import stratamem
from stratamem.config import TreeConfig
from stratamem.server.inspector import views
from stratamem.server.inspector.charts import Point
from stratamem.testing import HashingEmbedder

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)
READER = "reader"
HOSTILE = '<script>alert("x")</script>" onmouseover="alert(1)'
# Words only the hidden source holds: none may appear in anything the reader is shown.
CANARIES = ("zebrafish", "chat:secret", "carol diaz", "quagga")
TEMPLATES = Path(views.__file__).parent / "templates"
BASE = """<!doctype html><title>{% block title %}{% endblock %}</title>
<main>{% block content %}{% endblock %}</main>"""


def build(location: str, *, hidden: bool) -> None:
    """Two sources the reader sees (a chat and a locked one it would see but for the lock:
    only when ``hidden``) and, when ``hidden``, one it may not see; facts; a merge."""
    with stratamem.open(
        location,
        embedder=HashingEmbedder(),
        tree_config=TreeConfig(input_token_budget=40, summary_fanout=2),
    ) as mem:
        for i in range(12):
            mem.items.add(
                f"Alice Chen and Bob Martins went through the Phoenix release plan, step {i}.",
                source="chat:eng",
                kind="chat",
                author="Alice Chen",
                time=T0 + timedelta(days=3 * i),
                id=f"eng{i}",
            )
        mem.items.add(
            "Alice here: the Phoenix freeze starts Monday.",
            source="chat:eng",
            kind="chat",
            author="Alice",
            time=T0 + timedelta(days=40),
            id="eng-alice",
        )
        mem.items.add(
            f"{HOSTILE} says the Phoenix build is green.",
            source="chat:eng",
            kind="chat",
            author=HOSTILE,
            time=T0 + timedelta(days=41),
            id="eng-hostile",
        )
        mem.sources.set_access("chat:eng", scopes=["team"])
        if hidden:
            for i in range(3):
                mem.items.add(
                    f"Zebrafish quagga: Carol Diaz told Alice Chen about Phoenix, part {i}.",
                    source="chat:secret",
                    kind="chat",
                    author="Carol Diaz",
                    time=T0 + timedelta(days=i),
                )
            mem.sources.set_access("chat:secret", scopes=["secret"])
            mem.items.add(
                "Quagga vault notes about Alice Chen.",
                source="notes:vault",
                kind="record",
                author="Alice Chen",
                time=T0,
            )
            mem.sources.set_access("notes:vault", scopes=["team"])
        mem.trees.build()
        mem.trees.flush()
        alice = "person:alice chen"
        inspector_kit.fact_history(mem, alice, T0, "chat:eng")
        said = {"source": "chat:eng"}
        mem.facts.remember(
            alice, "motto", HOSTILE, valid_from=T0, now=T0 + timedelta(days=4), **said
        )
        if hidden:
            mem.facts.remember(
                alice, "leads", "zebrafish", valid_from=T0, now=T0, source="chat:secret"
            )
        mem.entities.merge("person:alice", alice)
        mem.principals.add(READER, ["team"])
        if hidden:
            mem.locks.lock("notes:vault", passphrase="correct horse battery staple")


@dataclass
class World:
    full: str
    reduced: str

    def read(self, which: str, principal: str | None = None) -> stratamem.Memory:
        where = self.full if which == "full" else self.reduced
        return stratamem.open(where, embedder=HashingEmbedder(), principal=principal)


@pytest.fixture(scope="module")
def world(module_location: str, tmp_path_factory: pytest.TempPathFactory, locations: Any) -> World:
    build(module_location, hidden=True)
    reduced = locations.new(module_location, tmp_path_factory.mktemp("reduced"), "reduced")
    build(reduced, hidden=False)
    return World(module_location, reduced)


@pytest.fixture
def owner(world: World) -> Iterator[stratamem.Memory]:
    with world.read("full") as mem:
        yield mem


@pytest.fixture
def reader(world: World) -> Iterator[stratamem.Memory]:
    with world.read("full", READER) as mem:
        yield mem


def _by_scope(mem: stratamem.Memory) -> dict[str, views.SourceRow]:
    return {row.scope: row for row in views.sources(mem)}


# -- sources -----------------------------------------------------------------------------------


def test_the_owner_sees_every_source_a_locked_one_without_counts(owner: stratamem.Memory) -> None:
    rows = _by_scope(owner)
    assert set(rows) == {"chat:eng", "chat:secret", "notes:vault"}
    assert rows["chat:eng"].chunks == 14
    assert rows["chat:eng"].access == ("team",)
    assert not rows["chat:eng"].locked
    vault = rows["notes:vault"]
    assert vault.locked
    assert vault.chunks is None
    detail = views.source(owner, vault.id)
    assert detail is not None
    assert detail.tree_id is None
    assert detail.levels == ()


def test_a_principal_sees_neither_a_hidden_nor_a_locked_source(
    owner: stratamem.Memory, reader: stratamem.Memory
) -> None:
    every = _by_scope(owner)
    assert set(_by_scope(reader)) == {"chat:eng"}
    for scope in ("chat:secret", "notes:vault"):
        assert views.source(reader, every[scope].id) is None
        assert views.source(reader, scope) is None
        assert views.tree(reader, every[scope].id) is None
    assert views.source(reader, "src_0000000000000000") is None
    assert views.source(reader, "no such source") is None


def test_a_source_page_gives_its_tree_shape(owner: stratamem.Memory) -> None:
    eng = _by_scope(owner)["chat:eng"]
    detail = views.source(owner, eng.id)
    assert detail is not None
    assert detail.tree_id is not None
    assert detail.source == eng
    levels = dict(detail.levels)
    assert len(levels) >= 3
    assert levels[1] >= 2
    assert detail.unsealed == 0


# -- the tree ----------------------------------------------------------------------------------


def test_the_tree_drills_level_by_level_to_the_leaves(owner: stratamem.Memory) -> None:
    eng = _by_scope(owner)["chat:eng"]
    top = views.tree(owner, eng.id)
    assert top is not None
    assert top.node is None
    assert top.path == ()
    assert top.children
    assert all(c.kind == "summary" for c in top.children)
    assert top.time_start == T0
    level = top
    path: list[str] = []
    seen_leaves = False
    while level.children:
        child = level.children[0]
        below = views.tree(owner, eng.id, child.id)
        assert below is not None
        assert below.node is not None
        assert below.node.id == child.id
        assert below.node.level == child.level
        assert [p.id for p in below.path] == path
        assert below.text
        assert "\n" not in child.excerpt
        assert len(below.children) == child.children
        if child.kind == "leaf":
            assert below.children == ()
            assert below.text.startswith("Alice")
            seen_leaves = True
        else:
            assert all(c.level == child.level - 1 for c in below.children)
            for grand in below.children:
                # The envelope: each child lies within its parent's time range.
                assert below.time_start is not None
                assert grand.time_start is not None
                assert below.time_start <= grand.time_start
            path.append(child.id)
        level = below
    assert seen_leaves


def test_a_node_of_another_source_or_hidden_is_no_level(
    owner: stratamem.Memory, reader: stratamem.Memory
) -> None:
    rows = _by_scope(owner)
    secret = views.tree(owner, rows["chat:secret"].id)
    assert secret is not None
    assert secret.children
    hidden_node = secret.children[0].id
    # Asked under a source it sees, a hidden node is as one that does not exist.
    assert views.tree(reader, rows["chat:eng"].id, hidden_node) is None
    assert views.tree(owner, rows["chat:eng"].id, hidden_node) is None
    assert views.tree(owner, rows["chat:eng"].id, "no-such-node") is None
    assert reader.trees.ancestors(hidden_node) == []


# -- entities ----------------------------------------------------------------------------------


def test_the_entity_list_is_the_most_mentioned_first(owner: stratamem.Memory) -> None:
    rows = views.entities(owner)
    counts = [r.mentions for r in rows]
    assert counts == sorted(counts, reverse=True)
    alice = next(r for r in rows if r.id == "person:alice chen")
    assert "person:alice" in alice.aliases
    # The chat; the secret channel names her only in its text, the locked vault is sealed.
    assert alice.sources == 1
    assert views.entities(owner, "alice")[0].id == "person:alice chen"
    assert views.entities(owner, "nothing-is-called-this") == []
    assert len(views.entities(owner, limit=2)) == 2


def test_an_entity_shows_its_aliases_mentions_and_company(owner: stratamem.Memory) -> None:
    detail = views.entity(owner, "person:alice")  # an alias finds the merged entity
    assert detail is not None
    assert detail.id == "person:alice chen"
    assert detail.kind == "person"
    assert "person:alice" in detail.aliases
    assert detail.bucket == "day"
    assert detail.timeline[0].label == "2024-03-01"
    # Its mentions in the chat: 12 as Alice Chen, 1 as Alice.
    assert sum(p.count for p in detail.timeline) + detail.undated == 13
    assert {name for _, name in detail.sources} == {"chat:eng", "chat:secret"}
    assert detail.sealed == ("notes:vault",)
    assert len(detail.related) <= views.RELATED_LIMIT
    weights = [n.weight for n in detail.related]
    assert weights == sorted(weights, reverse=True)
    assert views.entity(owner, "person:nobody at all") is None
    assert views.entity(owner, "   ") is None


def test_the_fact_timeline_says_how_each_value_ended(owner: stratamem.Memory) -> None:
    detail = views.entity(owner, "person:alice chen")
    assert detail is not None
    facts = {
        (f.predicate, f.value, f.valid_to is None, f.expired_at is None): f for f in detail.facts
    }
    first = facts[("leads", "on-call", True, False)]
    closed = facts[("leads", "on-call", False, True)]
    release = facts[("leads", "release", True, True)]
    retracted = facts[("status", "away", True, False)]
    assert first.ended == "superseded"
    assert first.superseded_by == release.id
    assert first.superseded_with == "release"
    assert first.expired_at == release.recorded_at == T0 + timedelta(days=1)
    assert closed.ended == "closed"
    assert closed.valid_to == T0 + timedelta(days=9)
    assert release.ended == ""
    assert release.superseded_by is None
    assert retracted.ended == "retracted"
    assert retracted.superseded_by is None
    assert retracted.expired_at == T0 + timedelta(days=3)
    # The hidden source's value of the same predicate is its own timeline: it ends nothing.
    zebra = facts[("leads", "zebrafish", True, True)]
    assert zebra.ended == ""
    predicates = [f.predicate for f in detail.facts]
    assert predicates == sorted(predicates)


def test_mentions_are_counted_per_day_or_per_month() -> None:
    assert views.buckets({}) == ((), "day")
    short = {date(2024, 3, 1): 2, date(2024, 3, 4): 1}
    points, bucket = views.buckets(short)
    assert bucket == "day"
    assert points == (
        Point("2024-03-01", 2),
        Point("2024-03-02", 0),
        Point("2024-03-03", 0),
        Point("2024-03-04", 1),
    )
    long = {date(2023, 11, 30): 1, date(2023, 11, 2): 2, date(2024, 2, 1): 4}
    points, bucket = views.buckets(long)
    assert bucket == "month"
    assert points == (
        Point("2023-11", 3),
        Point("2023-12", 0),
        Point("2024-01", 0),
        Point("2024-02", 4),
    )


def test_an_excerpt_is_one_line_cut_at_a_word() -> None:
    assert views.excerpt("a\n b   c") == "a b c"
    cut = views.excerpt("word " * 100, 30)
    assert len(cut) <= 30
    assert cut.endswith("word…")


# -- what a principal is shown ------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A view as plain data, the times a source was ingested left out (two stores, two)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.name != "ingested_at"
        }
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _every_view(mem: stratamem.Memory) -> dict[str, Any]:
    eng = _by_scope(mem)["chat:eng"]
    out: dict[str, Any] = {
        "sources": views.sources(mem),
        "source": views.source(mem, eng.id),
        "entities": views.entities(mem),
        "entities-alice": views.entities(mem, "alice"),
        "entities-phoenix": views.entities(mem, "phoenix"),
    }
    level = views.tree(mem, eng.id)
    out["tree"] = level
    n = 0
    while level is not None and level.children:
        level = views.tree(mem, eng.id, level.children[-1].id)
        out[f"tree-{n}"] = level
        n += 1
    for row in views.entities(mem, limit=100):
        detail = views.entity(mem, row.id)
        assert detail is not None
        out[f"entity-{row.id}"] = detail
    return out


def test_a_principal_is_shown_what_a_store_of_its_sources_alone_shows(world: World) -> None:
    with world.read("full", READER) as full, world.read("reduced", READER) as reduced:
        got = _every_view(full)
        want = _every_view(reduced)
    for name, view in want.items():
        assert _plain(got[name]) == _plain(view), name
    text = repr(_plain(got)).lower()
    assert not [c for c in CANARIES if c in text]
    assert "zebrafish" not in text


def test_hidden_entities_are_not_there_for_a_principal(reader: stratamem.Memory) -> None:
    assert views.entity(reader, "person:carol diaz") is None
    assert views.entities(reader, "carol") == []
    assert views.entities(reader, "zebrafish") == []
    alice = views.entity(reader, "person:alice chen")
    assert alice is not None
    assert alice.sealed == ()
    assert all(f.value != "zebrafish" for f in alice.facts)


# -- the templates -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env() -> jinja2.Environment:
    made = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [jinja2.DictLoader({"base.html": BASE}), jinja2.FileSystemLoader(str(TEMPLATES))]
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    views.register(made)
    return made


class _Tags(HTMLParser):
    """The elements and attribute names of a page, as a browser would read them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, [name for name, _ in attrs]))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)


def _safe(html: str) -> str:
    """The page, checked against its Content-Security-Policy: no script element, no inline
    style, no event attribute, no ``javascript:`` link; and what was hostile, escaped."""
    parser = _Tags()
    parser.feed(html)
    for tag, names in parser.found:
        assert tag not in ("script", "style"), tag
        assert not [n for n in names if n == "style" or n.startswith("on")], (tag, names)
    assert "javascript:" not in html.lower()
    assert HOSTILE not in html
    assert '" onmouseover' not in html
    return html


def test_the_pages_render_their_views_safely(
    owner: stratamem.Memory, env: jinja2.Environment
) -> None:
    rows = views.sources(owner)
    eng = _by_scope(owner)["chat:eng"]
    detail = views.source(owner, eng.id)
    top = views.tree(owner, eng.id)
    assert detail is not None
    assert top is not None
    node = views.tree(owner, eng.id, top.children[0].id)
    alice = views.entity(owner, "person:alice chen")
    hostile = views.entities(owner, "script")
    assert hostile, "the hostile author is an entity"
    shown = views.entity(owner, hostile[0].id)
    assert alice is not None
    assert shown is not None
    assert node is not None
    pages = {
        "sources": env.get_template("sources.html").render(rows=rows),
        "source": env.get_template("source.html").render(detail=detail),
        "tree": env.get_template("tree.html").render(level=top),
        "node": env.get_template("tree.html").render(level=node),
        "entities": env.get_template("entities.html").render(rows=views.entities(owner), query=""),
        "found": env.get_template("entities.html").render(rows=hostile, query=HOSTILE),
        "entity": env.get_template("entity.html").render(detail=alice),
        "hostile": env.get_template("entity.html").render(detail=shown),
    }
    for html in pages.values():
        _safe(html)
    assert "notes:vault" in pages["sources"]
    assert "sealed while locked" in pages["sources"]
    assert f'href="/sources/{eng.id}/tree"' in pages["source"]
    assert f"/sources/{eng.id}/tree?node={top.children[0].id}" in pages["tree"]
    assert "superseded" in pages["entity"]
    assert "retracted" in pages["entity"]
    assert 'class="fact-bar fact-bar-retracted"' in pages["entity"]
    assert "&lt;script&gt;" in pages["entity"]  # the motto, in the table and the chart
    assert "&lt;script&gt;" in pages["found"]
    assert "&lt;script&gt;" in pages["hostile"]
    assert "/entities/entity?id=person%3Aalice%20chen" in pages["entities"]
    assert 'role="img"' in pages["entity"]


def test_an_empty_store_renders_its_empty_pages(env: jinja2.Environment, tmp_path: Path) -> None:
    with stratamem.open(tmp_path / "empty.db", embedder=None) as mem:
        assert views.sources(mem) == []
        assert views.entities(mem) == []
        _safe(env.get_template("sources.html").render(rows=[]))
        _safe(env.get_template("entities.html").render(rows=[], query="x"))
        mem.items.add("one note", source="notes:one", time=NOW)
        found = views.sources(mem)[0]
        level = views.tree(mem, found.id)
        assert level is not None
        assert level.tree_id is not None
        assert level.children == ()
        assert level.unsealed == 1
        _safe(env.get_template("tree.html").render(level=level))


def test_times_are_written_to_the_minute_or_as_a_day() -> None:
    assert views.when(None) == "—"
    assert views.when(T0) == "2024-03-01"
    assert views.when(T0 + timedelta(hours=9, minutes=30)) == "2024-03-01 09:30"
    assert views.when(date(2024, 3, 2)) == "2024-03-02"
