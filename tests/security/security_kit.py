"""Stores with canaries, and the comparison the leak suite rests on.

The contract: for any principal, every read of the full store equals the same read of a
store built from only the sources that principal may see (same texts, ids, times and order
of writes, so chunk ids and the relative order of rowids are equal), read by the same
principal; and nothing of a hidden source (a canary word, name, address, handle, tag, URL,
or any of its ids) appears in what the principal is shown.

A plain module beside the tests (``conftest.py`` puts this folder on the path), so the
property test can build stores inside an example.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import math
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import stratamem
from sql_kit import statements
from stratamem.api import Memory
from stratamem.config import TreeConfig
from stratamem.store.access import PrincipalRow
from stratamem.store.postgres.connection import redact
from stratamem.store.postgres.server import PostgresServer
from stratamem.store.sources import source_id_for
from stratamem.testing import HashingEmbedder
from stratamem.types import NodeKind, Principal, RetrievalHit
from suite import PastTheStore
from suite import is_postgres as is_postgres  # kit.is_postgres, for the tests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
# Small buffers and fan-out, so that every source has summaries two levels up.
TREES = TreeConfig(input_token_budget=40, summary_fanout=2)

# Fields that say when a row was written, not what it holds: they differ between two stores
# built a moment apart, and are left out of every comparison.
VOLATILE = frozenset({"ingested_at", "created_at", "rotated_at", "sealed_at", "path", "bytes"})


class OverlapReranker:
    """A deterministic reranker: the share of the query's words found in each text."""

    name = "overlap"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        wanted = set(re.findall(r"\w+", query.lower()))
        return [
            len(wanted & set(re.findall(r"\w+", text.lower()))) / len(wanted) if wanted else 0.0
            for text in texts
        ]


# -- what a store is built from ----------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    time: datetime
    author: str | None = None
    thread: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceSpec:
    """A source written item by item (``items``) or read from a fixture (``fixture``, whose
    connector names the scopes ``scopes``)."""

    scopes: tuple[str, ...]
    kind: str
    access: tuple[str, ...]
    items: tuple[Item, ...] = ()
    fixture: Path | None = None
    canaries: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrincipalSpec:
    name: str
    scopes: tuple[str, ...]
    sources: tuple[str, ...] = ()


def sees(principal: PrincipalSpec, access: Sequence[str], scope: str) -> bool:
    """The read rule, written out again here as the oracle (see ``store/access.py``)."""
    if not access:
        return False
    if "*" not in principal.scopes and not set(access) & set(principal.scopes):
        return False
    if principal.sources:
        return any(g == source_id_for(scope) or fnmatchcase(scope, g) for g in principal.sources)
    return True


def visible_specs(principal: PrincipalSpec, specs: Sequence[SourceSpec]) -> list[SourceSpec]:
    """The specs whose every scope the principal may read. A fixture whose scopes would split
    is refused: the reduced store could not be built by the same writes."""
    out = []
    for spec in specs:
        seen = {sees(principal, spec.access, scope) for scope in spec.scopes}
        if len(seen) > 1:
            raise ValueError(f"{principal.name} sees part of {spec.scopes}: split the fixture")
        if seen == {True}:
            out.append(spec)
    return out


# -- where the stores go ---------------------------------------------------------------------------

_SERIAL = itertools.count(1)


class Places:
    """Where a suite's stores go: files under ``folder`` (SQLite), or databases on ``server``
    (PostgreSQL). Each store's location is as long as any other's of the same kind, so that
    a table that shows it is laid out the same."""

    def __init__(
        self,
        folder: Path,
        server: PostgresServer | None = None,
        snapshots: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        self.server = server
        self._snapshots = {} if snapshots is None else snapshots

    @property
    def backend(self) -> str:
        return "sqlite" if self.server is None else "postgresql"

    def within(self, folder: Path) -> Places:
        """These places, with new files going under ``folder``."""
        return Places(folder, self.server, self._snapshots)

    def new(self, name: str) -> str:
        """Where a new store goes: ``<folder>/<name>/store.db``, or a new database."""
        if self.server is None:
            (self.folder / name).mkdir(parents=True, exist_ok=True)
            return str(self.folder / name / "store.db")
        return self.server.new_database(_database_name())

    def keep(self, location: str) -> None:
        """Take a snapshot of the store at ``location``, which nobody has open, for
        :meth:`copy` to copy later, while the store is open (PostgreSQL copies a database
        only while nobody is connected to it)."""
        if self.server is not None:
            self._snapshots[location] = self.copy(location, "snapshot")

    def copy(self, source: str, name: str) -> str:
        """A copy of the store at ``source`` (as its last :meth:`keep` took it, where it
        took one), at ``<folder>/<name>/store.db`` or in a new database."""
        if self.server is None:
            target = self.new(name)
            with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
                src.backup(dst)
            return target
        database = _database_name()
        template = _database(self._snapshots.get(source, source))
        self.server.psql(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
        # An id of its own, so that the copies keep their index files apart (a store with a
        # locked source keeps its id, which the sealed parts' key is derived from).
        self.server.psql(
            "UPDATE settings SET value = md5(random()::text) WHERE key = 'store.id'"
            " AND NOT EXISTS (SELECT 1 FROM sealed)",
            database,
        )
        return self.server.url_of(database)

    def drop(self, location: str) -> None:
        """Remove the store at ``location``, which nobody may have open."""
        if self.server is not None:
            self.server.drop_database(location)
            return
        for suffix in ("", "-wal", "-shm"):
            Path(f"{location}{suffix}").unlink(missing_ok=True)

    def script(self, location: str, sql: str) -> None:
        """Run ``sql`` (statements that both engines take) on the store at ``location``."""
        if self.server is None:
            with closing(sqlite3.connect(location)) as conn:
                conn.executescript(sql)
        else:
            self.server.psql(sql, _database(location))


def _database_name() -> str:
    return f"sec{os.getpid()}_{next(_SERIAL):05d}"


def _database(url: str) -> str:
    """The database a URL names."""
    return url.partition("?")[0].rsplit("/", 1)[1]


def read_rows(location: str | Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (SQLite's dialect, ``?`` parameters) read from the store at
    ``location`` on a connection of its own."""
    if is_postgres(location):
        from stratamem.store.postgres.connection import connect

        conn = PastTheStore(connect(str(location), application="stratamem-test"))
        try:
            return [tuple(row) for row in conn.execute(sql, tuple(params)).fetchall()]
        finally:
            conn.close()
    with closing(sqlite3.connect(location)) as db:
        return [tuple(row) for row in db.execute(sql, tuple(params)).fetchall()]


def residue(location: str | Path, needles: Iterable[str]) -> dict[str, list[str]]:
    """The needles (lowercase) found in what holds the store at ``location``: on SQLite the
    bytes of each file of its folder (the database, its WAL, the index files beside it); on
    PostgreSQL the live rows of each table and the index files this process keeps for the
    store. (PostgreSQL's files keep a deleted row's bytes until a vacuum reuses the space,
    and its WAL keeps what it kept: those are not read here.)"""
    wanted = sorted({n.encode() for n in needles})
    hits: dict[str, list[str]] = {}

    def scan(name: str, data: bytes) -> None:
        found = [n.decode() for n in wanted if n in data.lower()]
        if found:
            hits[name] = found

    if not is_postgres(location):
        for path in sorted(Path(location).parent.iterdir()):
            if path.is_file():
                scan(path.name, path.read_bytes())
        return hits
    from stratamem.store.postgres.connection import connect
    from stratamem.store.postgres.files import index_base

    conn = connect(str(location), application="stratamem-test")
    try:
        names = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        for (table,) in conn.execute(names).fetchall():
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            scan(table, b"\n".join(_as_bytes(v) for row in rows for v in row))
        (store_id,) = conn.execute("SELECT value FROM settings WHERE key = 'store.id'").fetchone()
    finally:
        conn.close()
    for path in sorted(index_base(store_id).parent.iterdir()):
        if path.is_file():
            scan(path.name, path.read_bytes())
    return hits


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def shown_as(location: str | Path) -> str:
    """The store's location as the store shows it (a URL without its password)."""
    return redact(str(location))


def masked(text: str, location: str | Path) -> str:
    """``text`` with the store's location put as ``<db>``: as given, as the store shows it,
    and (a table may cut a long URL short) the name of its database."""
    text = text.replace(str(location), "<db>").replace(shown_as(location), "<db>")
    if is_postgres(location):
        text = text.replace(_database(str(location)), "<db>")
    return text


def open_memory(
    path: str | Path,
    *,
    principal: str | None = None,
    unlock: Mapping[str, str] | Sequence[str] | None = None,
) -> Memory:
    return stratamem.open(
        path,
        embedder=HashingEmbedder(),
        reranker=OverlapReranker(),
        tree_config=TREES,
        principal=principal,
        unlock=unlock,
    )


def fast_writes(mem: Memory) -> None:
    """No fsync per commit: a test store need not survive a power cut, and a build makes
    dozens of small commits (on SQLite, sealing sets its own level, and restores FULL after)."""
    if mem.store.name == "sqlite":
        mem.store.conn.execute("PRAGMA synchronous = OFF")  # type: ignore[attr-defined]
    else:
        mem.store.conn.execute("SET synchronous_commit = off")  # type: ignore[attr-defined]


def build(
    path: str | Path,
    specs: Sequence[SourceSpec],
    principals: Sequence[PrincipalSpec],
    *,
    quick_principals: bool = False,
) -> None:
    """Write ``specs`` in order, embed, seal every tree, and add the principals. Trees are
    sealed once at the end, so that no seal depends on when another source was written.

    ``quick_principals`` stores each principal with a dummy token hash instead of the slow
    one ``add_principal`` computes: reads go by name and never check a token, and the
    property test builds two stores per example."""
    with open_memory(path) as mem:
        fast_writes(mem)
        for spec in specs:
            if spec.fixture is not None:
                # One clock for every store built: the facts a source's structure states
                # (a Slack channel's topic) are recorded at the ingest's time, and a reduced
                # store must hold them as the full one does.
                report = mem.ingest(
                    spec.fixture,
                    access=spec.access or None,
                    trees=False,
                    parallel=False,
                    now=INGESTED_AT,
                )
                got = {s.scope for s in report.sources}
                if got != set(spec.scopes):
                    raise ValueError(f"{spec.fixture} gave scopes {got}, not {spec.scopes}")
            for item in spec.items:
                mem.items.add(
                    item.text,
                    source=spec.scopes[0],
                    kind=spec.kind,
                    author=item.author,
                    time=item.time,
                    id=item.id,
                    thread=item.thread,
                    tags=item.tags,
                )
            for scope in spec.scopes:
                mem.sources.set_access(scope, scopes=list(spec.access))
        mem.indexes.embed()
        mem.trees.build()
        mem.trees.flush()
        for p in principals:
            if quick_principals:
                found = Principal(name=p.name, scopes=tuple(sorted(p.scopes)), sources=p.sources)
                mem.store.put_principal(PrincipalRow(found, f"quick-{p.name}", "-"))
            else:
                mem.principals.add(p.name, list(p.scopes), sources=list(p.sources))


# -- the canary store ---------------------------------------------------------------------------


def _items(
    prefix: str,
    texts: Sequence[str],
    *,
    start: datetime,
    authors: Sequence[str | None] = (None,),
    tags: Sequence[tuple[str, ...]] = ((),),
    thread: str | None = None,
) -> tuple[Item, ...]:
    """Items ``prefix0``, ``prefix1``, … three hours apart from ``start``."""
    return tuple(
        Item(
            id=f"{prefix}{n}",
            text=text,
            time=start + timedelta(hours=3 * n),
            author=authors[n % len(authors)],
            thread=thread,
            tags=tags[n % len(tags)],
        )
        for n, text in enumerate(texts)
    )


ENG = SourceSpec(
    scopes=("eng",),
    kind="chat",
    access=("eng",),
    canaries=("frobnicator",),
    items=(
        *_items(
            "eng",
            [
                "Proposal: drop Redis and keep the job queue in SQLite. cc @alice #release",
                "Approved, the queue stays in SQLite. Alice Chen agrees with @bob on the "
                "Frobnicator",
                "Release checklist: queue metrics at https://wiki.example.com/release and @alice",
                "Postmortem of the queue stall, e-mail thread with ops@example.com attached",
                "The Frobnicator rollout waits for the SQLite migration; @bob owns it #release",
                "Decision: the queue moves to SQLite on Friday, Alice Chen signs off",
            ],
            start=T0,
            authors=("Bob Martins", "Alice Chen", "Carol Diaz"),
            tags=((), (), (), (), (), ("decision",)),
        ),
        # A key the hidden HR source holds too: the item API must not say "several sources".
        Item("shared-key", "Queue retro notes, shared key on purpose", T0 + timedelta(days=2)),
    ),
)
TEAM = SourceSpec(
    scopes=("team-notes",),
    kind="record",
    access=("team",),
    canaries=("gallimaufry",),
    items=_items(
        "team",
        [
            "Team offsite agenda: queue roadmap and Redis retirement #roadmap @carol",
            "Alice Chen will own the SQLite migration; the gallimaufry of scripts goes away",
            "Gallimaufry cleanup: release notes for the queue are due on March 22",
        ],
        start=T0 + timedelta(days=1),
        authors=("Carol Diaz",),
    ),
)
OPS = SourceSpec(
    scopes=("irc:phoenix-dev",),
    kind="chat",
    access=("ops",),
    fixture=FIXTURES / "irc" / "phoenix-dev",
)
SLACK = SourceSpec(
    scopes=("slack:#eng", "slack:#general"),
    kind="chat",
    access=("team",),
    fixture=FIXTURES / "slack",
)
NOTES = SourceSpec(
    scopes=("notes:til-like",),
    kind="document",
    access=("eng",),
    fixture=FIXTURES / "markdown" / "til-like",
)
MAIL = SourceSpec(
    scopes=("mbox:sample",),
    kind="email",
    access=("team", "hr"),
    fixture=FIXTURES / "email" / "sample.mbox",
)
HR = SourceSpec(
    scopes=("hr-secret",),
    kind="record",
    access=("hr",),
    canaries=(
        "zanzibarquux",
        "zorblat",
        "quimby",
        "zorbhandle",
        "zorbtag",
        "canary-mail.example",
        "canary.example/zx-ledger",
        "quuxinatorboard",
    ),
    items=(
        *_items(
            "hr",
            [
                "Zanzibarquux payroll dispute: write to zorblat@canary-mail.example or see "
                "https://canary.example/zx-ledger #zorbtag @zorbhandle; the queue budget and "
                "@alice",
                "Zorblat Quimby escalated Zanzibarquux to the QuuxinatorBoard; Alice Chen copied; "
                "queue queue queue SQLite",
                "Zanzibarquux settlement: @zorbhandle and @alice agree, #zorbtag closed, Redis "
                "spared",
                "Zorblat Quimby notes: QuuxinatorBoard meets about the release and the queue",
            ],
            start=T0 + timedelta(hours=1),
            authors=("Zorblat Quimby", "Alice Chen"),
        ),
        Item("shared-key", "Zanzibarquux retro, the same key", T0 + timedelta(days=2, hours=1)),
    ),
)
LEGAL = SourceSpec(
    scopes=("legal-chat",),
    kind="chat",
    access=("legal",),
    canaries=("merovingian", "vexhandle", "vextag", "vex morrow"),
    items=_items(
        "legal",
        [
            "Merovingian settlement draft for @vexhandle #vextag about the queue",
            "Vex Morrow: the Merovingian clause covers SQLite and Redis licences",
            "Merovingian review with @alice and @vexhandle, release blocked",
            "Vex Morrow closes the Merovingian thread #vextag",
        ],
        start=T0 + timedelta(hours=2),
        authors=("Vex Morrow", "Alice Chen"),
        thread="m1",
    ),
)
ORPHAN = SourceSpec(
    scopes=("orphan",),
    kind="record",
    access=(),
    canaries=("xylophonic", "orphanhandle", "orphantag", "orphan@canary", "ophelia xylo"),
    items=_items(
        "orph",
        [
            "Xylophonic memo from orphan@canary.example #orphantag @orphanhandle about the queue",
            "Ophelia Xylo: xylophonic release plan, SQLite and Redis, with @alice",
        ],
        start=T0 + timedelta(hours=4),
        authors=("Ophelia Xylo",),
    ),
)

# Sources every principal but one would see, were they not locked.
WIDE = ("eng", "team", "hr", "legal", "ops")
VAULT = SourceSpec(
    scopes=("vault",),
    kind="record",
    access=WIDE,
    canaries=("plutonic", "vaulthandle", "vaulttag", "canary-vault.example", "vera locksley"),
    items=_items(
        "vault",
        [
            "Plutonic reserve figures for the queue: vera@canary-vault.example #vaulttag",
            "Vera Locksley: plutonic budget with @vaulthandle and @alice, SQLite ledger",
            "Plutonic audit closed; Vera Locksley signs the release #vaulttag",
        ],
        start=T0 + timedelta(hours=5),
        authors=("Vera Locksley",),
    ),
)
VAULT_CHAT = SourceSpec(
    scopes=("vault-chat",),
    kind="chat",
    access=WIDE,
    canaries=("quasimodal", "lockhandle", "locktag"),
    items=_items(
        "vchat",
        [
            "Quasimodal migration of the queue, ask @lockhandle #locktag",
            "Quasimodal rollback plan with Alice Chen and @alice",
            "Quasimodal done, Redis retired #locktag",
        ],
        start=T0 + timedelta(hours=6),
        authors=("Alice Chen", "Bob Martins"),
        thread="q1",
    ),
)
LOCKED = (VAULT, VAULT_CHAT)

#: Every source of the canary store, in the order they are written.
SPECS: tuple[SourceSpec, ...] = (ENG, HR, SLACK, TEAM, MAIL, LEGAL, NOTES, ORPHAN, OPS)

PRINCIPALS: tuple[PrincipalSpec, ...] = (
    PrincipalSpec("ann", ("eng",)),  # one scope
    PrincipalSpec("bea", ("eng", "team")),  # two scopes
    PrincipalSpec("cat", ("*",)),  # any scope: all but the source with none
    PrincipalSpec("dan", ("*",), sources=("slack:*",)),  # any scope, narrowed by a glob
    # A scope it holds, narrowed away by a source id.
    PrincipalSpec("eve", ("eng", "hr"), sources=(source_id_for("eng"),)),
    PrincipalSpec("gil", ("team",), sources=("team*",)),  # a glob that keeps one of two
    PrincipalSpec("fay", ("nobody",)),  # a scope no source has: sees nothing
)


# -- what a principal must not see ----------------------------------------------------------------


@dataclass
class Hidden:
    """Everything of the sources hidden from one principal: the canary strings, and the ids
    of their sources, trees, summaries and chunks."""

    words: set[str] = field(default_factory=set)
    source_ids: set[str] = field(default_factory=set)
    tree_ids: set[str] = field(default_factory=set)
    summary_ids: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)

    def merged(self, other: Hidden) -> Hidden:
        return Hidden(
            words=self.words | other.words,
            source_ids=self.source_ids | other.source_ids,
            tree_ids=self.tree_ids | other.tree_ids,
            summary_ids=self.summary_ids + other.summary_ids,
            chunk_ids=self.chunk_ids + other.chunk_ids,
        )

    @property
    def canaries(self) -> set[str]:
        """What must never be shown: words, and ids (a scope such as ``orphan`` is a word too
        common to scan for, so it is probed by name instead)."""
        return (
            {w.lower() for w in self.words}
            | self.source_ids
            | self.tree_ids
            | set(self.summary_ids)
            | set(self.chunk_ids)
        )


def tree_nodes(mem: Memory, tree_id: str) -> tuple[list[RetrievalHit], list[RetrievalHit]]:
    """(summaries, leaves) of a tree, as its reader sees them, highest level first."""
    summaries: list[RetrievalHit] = []
    leaves: list[RetrievalHit] = []
    for top in mem.trees.tops(tree_id):
        summaries.append(top)
        for hit in mem.drill_down(top.node_id, max_depth=32):
            (summaries if hit.node_kind is NodeKind.SUMMARY else leaves).append(hit)
    return summaries, leaves


def hidden_from(
    owner: Memory,
    principal: PrincipalSpec,
    specs: Sequence[SourceSpec],
    *,
    hide_all: bool = False,
) -> Hidden:
    """What of ``specs`` is hidden from ``principal`` (``hide_all``: everything of them)."""
    out = Hidden()
    shown = [] if hide_all else visible_specs(principal, specs)
    for spec in specs:
        if spec in shown:
            continue
        out.words.update(spec.canaries)
        for scope in spec.scopes:
            out.source_ids.add(source_id_for(scope))
            tree = owner.trees.get(scope)
            out.tree_ids.add(tree.id)
            summaries, leaves = tree_nodes(owner, tree.id)
            out.summary_ids.extend(h.node_id for h in summaries)
            out.chunk_ids.extend(h.node_id for h in leaves)
    return out


def canary_sanity(
    owner: Memory, principal: PrincipalSpec, specs: Sequence[SourceSpec], hidden: Hidden
) -> None:
    """No canary may be in a source the principal sees: the scan would cry wolf."""
    for spec in visible_specs(principal, specs):
        for scope in spec.scopes:
            for hit in tree_nodes(owner, owner.trees.get(scope).id)[1]:
                text = hit.content.lower()
                found = [w for w in hidden.words if w in text]
                if found:
                    raise AssertionError(f"canaries {found} are in visible source {scope}")


# -- counting -------------------------------------------------------------------------------------


@dataclass
class ProbeCounts:
    """What the route probes covered: routes, principals, canaries checked."""

    routes: set[str] = field(default_factory=set)
    principals: set[str] = field(default_factory=set)
    checks: int = 0  # (route, principal, canary) triples scanned
    compared: int = 0  # (route, principal) pairs compared with the reduced store

    def to_dict(self) -> dict[str, int]:
        return {
            "routes": len(self.routes),
            "principals": len(self.principals),
            "route_principal_pairs": self.compared,
            "route_principal_canary_checks": self.checks,
        }


COUNTS: dict[str, ProbeCounts] = {}


def counts(group: str) -> ProbeCounts:
    return COUNTS.setdefault(group, ProbeCounts())


# -- comparing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raised:
    """An exception as a value: its class and message, the store's path taken out."""

    type: str
    message: str


def outcome(call: Callable[[], Any], path: str) -> Any:
    try:
        return call()
    except Exception as exc:
        return Raised(type(exc).__name__, masked(str(exc), path))


def plain(value: Any, *, leave_out: frozenset[str] = VOLATILE) -> Any:
    """``value`` as JSON-like data, the fields ``leave_out`` names left out (by default the
    volatile ones: see :data:`VOLATILE`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: plain(getattr(value, f.name), leave_out=leave_out)
            for f in dataclasses.fields(value)
            if f.name not in leave_out
        } | {"<type>": type(value).__name__}
    if isinstance(value, Mapping):
        return {
            str(k): plain(v, leave_out=leave_out) for k, v in value.items() if k not in leave_out
        }
    if isinstance(value, list | tuple):
        return [plain(v, leave_out=leave_out) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def assert_same(full: Any, reduced: Any, where: str = "$") -> None:
    """Equal, floats within 1e-9 (relative); raises naming the first place they differ."""
    if isinstance(full, float) and isinstance(reduced, float | int):
        if not math.isclose(full, reduced, rel_tol=1e-9, abs_tol=1e-12):
            raise AssertionError(f"{where}: {full!r} != {reduced!r}")
        return
    if isinstance(full, dict) and isinstance(reduced, dict):
        if full.keys() != reduced.keys():
            raise AssertionError(f"{where}: keys {sorted(full)} != {sorted(reduced)}")
        for key in full:
            assert_same(full[key], reduced[key], f"{where}.{key}")
        return
    if isinstance(full, list) and isinstance(reduced, list):
        if len(full) != len(reduced):
            raise AssertionError(f"{where}: {len(full)} items != {len(reduced)}: {full!r}")
        for n, (a, b) in enumerate(zip(full, reduced, strict=True)):
            assert_same(a, b, f"{where}[{n}]")
        return
    if full != reduced:
        raise AssertionError(f"{where}: {full!r} != {reduced!r}")


def text_of(value: Any) -> str:
    """Everything a caller could read in ``value``, lowercased, for the canary scan."""
    return repr(plain(value)).lower()


def leaked(value: Any, canaries: Iterable[str], *, named: Iterable[str] = ()) -> list[str]:
    """The canaries found in ``value``; what the call itself named (and so may be echoed in
    an error message) is taken out first."""
    text = text_of(value)
    for echo in named:
        text = text.replace(echo.lower(), "<named>")
    return sorted(c for c in canaries if c in text)


def reads(mem: Memory, query: str, entity: str, source: str) -> dict[str, Any]:
    """A read of every kind, each as plain data (an exception as :class:`Raised`)."""
    window = {"since": T0 + timedelta(hours=24), "until": T0 + timedelta(hours=200)}
    calls = {
        "keyword": lambda: mem.search(query, mode="keyword"),
        "vector": lambda: mem.search(query, mode="vector"),
        "graph": lambda: mem.search(query, mode="graph"),
        "hybrid": lambda: mem.search(query),
        # Relevance is read from the legs' raw signals (the keyword leg's Σ idf among them):
        # the floor and nothing_relevant must come out as on a store of the visible alone.
        "hybrid-floor": lambda: mem.search(query, min_relevance=0.2),
        "keyword-floor": lambda: mem.search(query, mode="keyword", min_relevance=0.2),
        "hybrid-filtered": lambda: mem.search(query, sources=[source], **window),
        "keyword-filtered": lambda: mem.search(query, kinds=["chat"], mode="keyword", **window),
        "query_source": lambda: mem.query_source(query=query),
        "query_source-one": lambda: mem.query_source(source, query=query),
        "query_global": lambda: mem.query_global(**window, query=query),
        "query_topic": lambda: mem.query_topic(entity, query=query),
        "cover_window": lambda: mem.cover_window(**window),
        "search_entities": lambda: mem.search_entities(entity.partition(":")[2][:4], limit=50),
        "related": lambda: mem.related(entity, limit=50),
        "top_entities": lambda: mem.entities.top(limit=100),
        "entity_mentions": lambda: mem.entities.mentions(entity),
        "facts_about": lambda: mem.facts.about(entity),
        "stats": lambda: mem.stats(),
        "sources": lambda: mem.sources.list(),
    }
    return {name: plain(outcome(read, str(mem.path))) for name, read in calls.items()}


# -- the work behind an answer --------------------------------------------------------------------


def server_snapshot(mem: Memory) -> str:
    """On PostgreSQL the server's snapshot, which any commit on the server moves; nothing
    on SQLite, where only a write to the file would (and none is made meanwhile)."""
    if mem.store.name != "postgresql":
        return ""
    row = mem.store.conn.command(b"SELECT pg_current_snapshot()::text").fetchone()  # type: ignore[attr-defined]
    return str(row[0])


def traced_pair(
    mem: Memory,
    warm: Callable[[], object],
    first: Callable[[], Any],
    second: Callable[[], Any],
    *,
    tries: int = 20,
) -> tuple[tuple[Any, list[str]], tuple[Any, list[str]]]:
    """``first()`` and ``second()`` run one after the other once ``warm()`` has run, each
    with the statements it ran. On PostgreSQL the store's caches follow the server's
    snapshot, which any commit on the server moves (autovacuum's, which come in bursts,
    another database's): where one fell between the warming and the second call, a cache may
    have been read again for neither call's sake, and all three are run again, up to
    ``tries`` times."""
    for _ in range(tries):
        before = server_snapshot(mem)
        warm()
        with statements(mem) as first_sql:
            got = first()
        with statements(mem) as second_sql:
            want = second()
        if server_snapshot(mem) == before:
            break
    return (got, first_sql), (want, second_sql)


# -- the ids a probe may name ----------------------------------------------------------------------


@dataclass(frozen=True)
class Refs:
    """Ids of one source as its owner sees them: what a probe names to ask for it."""

    scope: str
    source_id: str
    tree_id: str
    top: str  # its highest summary
    summary: str  # a level-1 summary
    leaf: str
    item: str | None
    entities: tuple[str, ...]


def refs_of(owner: Memory, scope: str, item: str | None) -> Refs:
    tree = owner.trees.get(scope)
    summaries, leaves = tree_nodes(owner, tree.id)
    level_one = next(h for h in summaries if h.level == 1)
    return Refs(
        scope=scope,
        source_id=source_id_for(scope),
        tree_id=tree.id,
        top=summaries[0].node_id,
        summary=level_one.node_id,
        leaf=leaves[0].node_id,
        item=item,
        entities=tuple(sorted({e for h in leaves for e in h.entities})),
    )


#: Ids that name nothing, shaped as the real ones are.
NOWHERE = Refs(
    scope="no-such-scope",
    source_id="src_" + "0" * 16,
    tree_id="tree_" + "0" * 16,
    top="sum_" + "0" * 32,
    summary="sum_" + "1" * 32,
    leaf="0" * 32,
    item="no-such-item",
    entities=("handle:no-such-handle",),
)


def named_refs(owner: Memory, scopes: Sequence[str]) -> dict[str, Refs]:
    """:class:`Refs` of these sources, and ``nowhere`` for nothing."""
    items = {spec.scopes[0]: spec.items[0].id for spec in (*SPECS, *LOCKED) if spec.items}
    out = {scope: refs_of(owner, scope, items.get(scope)) for scope in scopes}
    out["nowhere"] = NOWHERE
    return out


# -- the canary world -------------------------------------------------------------------------

OWNER = "owner"  # the name the reads of the owner (no principal) go by here
PASSPHRASE = "correct horse battery staple"
INGESTED_AT = datetime(2025, 1, 1, tzinfo=UTC)  # the clock of every ingest of a world


@dataclass
class CanaryWorld:
    """The full store, the owner's view of it, and per principal the reduced store: the
    sources of ``specs`` it may see, less the ``locked`` ones, which nobody reads. Each store
    is kept (:meth:`Places.keep`) as built, for copies."""

    places: Places
    specs: tuple[SourceSpec, ...]
    locked: tuple[SourceSpec, ...] = ()
    full: str = field(init=False)
    owner: Memory = field(init=False)
    locked_hidden: Hidden = field(default_factory=Hidden)
    locked_refs: dict[str, Refs] = field(default_factory=dict)
    opened: dict[tuple[str, str], Memory] = field(default_factory=dict)
    reduced_paths: dict[str, str] = field(default_factory=dict)
    hidden: dict[str, Hidden] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.full = self.places.new("f-all")
        build(self.full, self.specs, PRINCIPALS)
        if not self.locked:  # only the stores of a world without locks are copied
            self.places.keep(self.full)
        self.owner = open_memory(self.full)
        if self.locked:
            # What the locked sources were, read before they are locked.
            everyone = PrincipalSpec(OWNER, ("*",))
            self.locked_hidden = hidden_from(self.owner, everyone, self.locked, hide_all=True)
            self.locked_refs = named_refs(self.owner, [s.scopes[0] for s in self.locked])
            for spec in self.locked:
                for scope in spec.scopes:
                    self.owner.locks.lock(scope, passphrase=PASSPHRASE)

    @property
    def unlocked(self) -> tuple[SourceSpec, ...]:
        return tuple(s for s in self.specs if s not in self.locked)

    def principal(self, name: str) -> PrincipalSpec | None:
        if name == OWNER:
            return None
        return next(p for p in PRINCIPALS if p.name == name)

    def visible(self, name: str) -> Sequence[SourceSpec]:
        spec = self.principal(name)
        return self.unlocked if spec is None else visible_specs(spec, self.unlocked)

    def reduced(self, name: str) -> str:
        """The store holding only what ``name`` may see (built on first use)."""
        if name not in self.reduced_paths:
            # Paths of one length: a table that shows the path is laid out the same.
            location = self.places.new(f"r-{name[:3]}")
            spec = self.principal(name)
            # Only the principal that reads it: each token hash takes a while.
            build(location, self.visible(name), [] if spec is None else [spec])
            if not self.locked:
                self.places.keep(location)
            self.reduced_paths[name] = location
        return self.reduced_paths[name]

    def read(self, store: str, name: str) -> Memory:
        """``store`` opened for principal ``name`` (or the owner): ``full``, ``reduced``,
        ``unlocked`` (the full store with its locked sources readable in this process), or
        ``reduced-in-memory`` (the reduced store read as an unlocked one is: copied into
        memory, which on PostgreSQL makes it a SQLite store, whose vector scores are
        computed here rather than by pgvector, and differ from those in the last bits)."""
        key = (store, name)
        if key not in self.opened:
            who = None if self.principal(name) is None else name
            if store == "reduced":
                found = open_memory(self.reduced(name), principal=who)
            elif store == "reduced-in-memory":
                # Naming a source that is not locked copies the store into memory as it is.
                scopes = [s for spec in self.visible(name) for s in spec.scopes]
                found = open_memory(self.reduced(name), principal=who, unlock=scopes[:1] or None)
            elif store == "unlocked":
                unlock = {s: PASSPHRASE for spec in self.locked for s in spec.scopes}
                found = open_memory(self.full, principal=who, unlock=unlock)
            else:
                found = open_memory(self.full, principal=who)
            self.opened[key] = found
        return self.opened[key]

    def hidden_from(self, name: str) -> Hidden:
        """What ``name`` must not be shown: what its scopes hide, and every locked source."""
        if name not in self.hidden:
            spec = self.principal(name)
            found = Hidden()
            if spec is not None:
                found = hidden_from(self.owner, spec, self.unlocked)
                canary_sanity(self.owner, spec, self.unlocked, found)
            self.hidden[name] = found.merged(self.locked_hidden)
        return self.hidden[name]

    def close(self) -> None:
        for mem in self.opened.values():
            mem.close()
        self.owner.close()


# -- writes: the same write on two stores ----------------------------------------------------------

#: The texts a writer writes, which a hidden source and a locked one hold too: a write's report
#: must not tell whether a text is held elsewhere (a vector reused from the embedding cache).
ECHOED = (
    "Zqechoalpha budget review for the quarterly ledger and the queue",
    "Zqechobravo release plan: the SQLite queue ships on Friday",
)
ECHO = SourceSpec(
    scopes=("echo-secret",),
    kind="record",
    access=("hr",),
    canaries=("echo-secret",),
    items=_items("echo", ECHOED, start=T0 + timedelta(hours=7)),
)
#: A hidden source whose seal the failing summarizer refuses (see :class:`FailingSummarizer`).
BROKEN = SourceSpec(
    scopes=("broken-seal",),
    kind="record",
    access=("legal",),
    canaries=("zqbrokenseal",),
    items=_items("brk", ["Zqbrokenseal minutes of the queue board"], start=T0),
)
MAYA = SourceSpec(
    scopes=("maya-notes",),
    kind="record",
    access=("user:maya",),
    canaries=(),
    items=_items("maya", ["Maya prefers the SQLite queue and morning releases"], start=T0),
)
LOCKED_ECHO = SourceSpec(
    scopes=("echo-vault",),
    kind="record",
    access=(*WIDE, "team", "user:maya"),
    canaries=("echo-vault",),
    items=_items("lecho", ECHOED, start=T0 + timedelta(hours=8)),
)
#: Every source of the store writes are made to, in the order they are written; the last is
#: locked once built.
WRITE_SPECS: tuple[SourceSpec, ...] = (ENG, TEAM, HR, LEGAL, MAYA, ECHO, BROKEN, LOCKED_ECHO)
#: Who writes: a team writer and a user-scoped writer.
WRITERS: tuple[PrincipalSpec, ...] = (
    PrincipalSpec("tess", ("team",)),
    PrincipalSpec("uma", ("user:maya",)),
)
#: What a writer's write left waiting, in the sources hidden from it, before the write: chunks
#: with no vector, a seal job, and a seal that fails.
PENDING_TEXTS = ("Zqpendingone payroll note", "Zqpendingtwo payroll note")


class FailingSummarizer:
    """The extractive summarizer, but for any input naming ``zqbrokenseal``, which it refuses:
    a hidden source's seal that fails."""

    name = "failing"

    def __init__(self) -> None:
        from stratamem.tree.extractive import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()

    def summarize(self, items: Sequence[Any], *, budget: int) -> str:
        if any("zqbrokenseal" in str(getattr(i, "text", i)).lower() for i in items):
            raise RuntimeError("the summarizer refuses broken-seal")
        return self.inner.summarize(items, budget=budget)


@contextmanager
def serve_for_writes(location: str, folder: Path) -> Iterator[Any]:
    """A :class:`~stratamem.server.service.Service` over ``location`` for the write suites:
    writes on, ingest root ``folder/in``, the hashing embedder, the overlap reranker and the
    summarizer that fails on a broken seal."""
    from stratamem.server.service import Service

    (folder / "in").mkdir(parents=True, exist_ok=True)
    with Service(
        location,
        embedder=HashingEmbedder(),
        reranker=OverlapReranker(),
        summarizer=FailingSummarizer(),
        allow_writes=True,
        ingest_roots=[folder / "in"],
    ) as service:
        yield service


def build_for_writes(location: str, specs: Sequence[SourceSpec], writer: PrincipalSpec) -> None:
    """A store of ``specs`` (built as :func:`build` does) that ``writer`` may write to; where
    ``specs`` hold them, ``LOCKED_ECHO`` is then locked, and the hidden ``ECHO``, ``HR`` and
    ``BROKEN`` are left with work waiting: chunks with no vector, seal jobs, one that fails."""
    build(location, specs, [], quick_principals=True)
    with open_memory(location) as mem:
        fast_writes(mem)
        found = Principal(writer.name, tuple(sorted(writer.scopes)), writer.sources, write=True)
        mem.store.put_principal(PrincipalRow(found, f"quick-{writer.name}", "-"))
        if LOCKED_ECHO in specs:
            mem.locks.lock(LOCKED_ECHO.scopes[0], passphrase=PASSPHRASE)
    scopes = [s.scopes[0] for s in (HR, ECHO, BROKEN) if s in specs]
    if not scopes:
        return
    with stratamem.open(location, embedder=None, tree_config=TREES) as bare:
        for scope in scopes:
            for n, text in enumerate(PENDING_TEXTS):
                bare.items.add(text, source=scope, id=f"pending{n}", time=T0)
        bare.trees.tree_builder.enqueue(scopes, force=True)


# Fields a write's answer or a later read carries that say when it ran, not what it did. (The
# store's path and size are not among them: a principal is shown neither.)
WHEN_FIELDS = frozenset(
    {
        "seconds",
        "recorded_at",
        "closed_at",
        "made_at",
        "undone_at",
        "expired_at",
        "updated_at",
        "submitted",
        "started",
        "ingested_at",
        "created_at",
        "sealed_at",
    }
)
_RANDOM_ID = re.compile(r"\b(?:item_[0-9a-f]{16}|fact_[0-9a-f]{24}|job-[0-9a-f]{32})\b")


def canonical(value: Any) -> Any:
    """``value`` as plain data (see :func:`plain`) with what is random by design taken out:
    the fields of :data:`WHEN_FIELDS` (and no other), and ids made of a random number or the
    clock (a new item's, a fact's, a write job's), each put as ``<id N>`` in the order first
    met; an entity decision's id, a random number, likewise."""
    names: dict[str, str] = {}

    def rename(found: re.Match[str]) -> str:
        return names.setdefault(found.group(0), f"<id {len(names)}>")

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            if "entity_a" in item and isinstance(item.get("id"), int):
                item = item | {
                    "id": names.setdefault(f"decision {item['id']}", f"<id {len(names)}>")
                }
            return {k: walk(v) for k, v in item.items() if k not in WHEN_FIELDS}
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, str):
            return _RANDOM_ID.sub(rename, item)
        return item

    return walk(plain(value, leave_out=WHEN_FIELDS))


def folder_masked(value: Any, folder: Path) -> Any:
    """``value`` as plain data (what :func:`canonical` leaves out left out) with ``folder`` put
    as ``<folder>``: two stores' writes read files each of its own folder."""
    text = json.dumps(plain(value, leave_out=WHEN_FIELDS), default=str)
    return json.loads(text.replace(str(folder), "<folder>"))
