"""Entities and their co-mention graph in the store (the ``GraphStore`` role)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, TypeVar

from stratamem.store.base import from_ms
from stratamem.store.dialect import Connection, Dialect
from stratamem.store.tables.filters import filter_sql, gate_sql, of_visible_sql
from stratamem.store.tables.owned import MENTIONS_OF_SOURCE, visible_mentions
from stratamem.store.tables.postings import EntityPostings
from stratamem.types import EntityMatch, Filters

MAX_EDGE_NODE_ENTITIES = 24

T = TypeVar("T")


def co_mention_pairs(mentions: Iterable[Collection[str]]) -> list[tuple[str, str, int]]:
    """(a, b, how many nodes name both) for each pair of entities, a before b, that the same
    node names, counting each node's entities once; a node that names more than
    :data:`MAX_EDGE_NODE_ENTITIES` adds none (see :meth:`GraphTables.add_edges`)."""
    pairs: Counter[tuple[str, str]] = Counter()
    for found in mentions:
        entities = sorted(set(found))
        if len(entities) <= MAX_EDGE_NODE_ENTITIES:
            pairs.update(combinations(entities, 2))
    return [(a, b, n) for (a, b), n in sorted(pairs.items())]


class GraphTables:
    """The graph half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect
    postings: EntityPostings

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

        def _cached_read(self, what: Hashable, read: Callable[[], T]) -> T: ...

    def add_edges(self, source_id: str, node_ids: Sequence[str], *, sign: int = 1) -> None:
        """Add (or with ``sign=-1`` take back) the co-mention pairs of these nodes' entities.

        Edges are kept up to date batch by batch as chunks come and go, so an ingest never
        pays for a whole-source rebuild. A node with more than :data:`MAX_EDGE_NODE_ENTITIES`
        entities adds none: such lists (a long CC line, a digest) say little about which
        entities belong together, and cost n².
        """
        d = self.dialect
        if not node_ids:
            return
        marks = d.marks(len(node_ids))
        self.conn.execute(
            f"""INSERT INTO entity_edges (a, b, source_id, weight)
                SELECT x.entity_id, y.entity_id, {d.marks(2)} * count(*)
                FROM entity_index x
                JOIN entity_index y ON y.node_id = x.node_id AND x.entity_id < y.entity_id
                WHERE x.node_id IN (
                    SELECT node_id FROM entity_index WHERE node_id IN ({marks})
                    GROUP BY node_id HAVING count(*) <= {d.p})
                GROUP BY x.entity_id, y.entity_id
                ON CONFLICT (a, b, source_id)
                DO UPDATE SET weight = entity_edges.weight + excluded.weight""",
            (source_id, sign, *node_ids, MAX_EDGE_NODE_ENTITIES),
        )

    def add_new_edges(self, source_id: str, mentions: Iterable[Collection[str]]) -> None:
        """Add the co-mention pairs of new nodes, given each node's entity ids.

        The same pairs :meth:`add_edges` finds in the stored mentions, counted here: the
        nodes are new, so what they mention is what the caller just wrote, and a join of the
        mention table with itself is not needed.
        """
        pairs = co_mention_pairs(mentions)
        if not pairs:
            return
        d = self.dialect
        self.conn.executemany(
            f"""INSERT INTO entity_edges (a, b, source_id, weight) VALUES ({d.marks(4)})
                ON CONFLICT (a, b, source_id)
                DO UPDATE SET weight = entity_edges.weight + excluded.weight""",
            [(a, b, source_id, n) for a, b, n in pairs],
        )

    def rebuild_edges(self, source_id: str) -> None:
        """Recompute the source's edges from scratch (a repair; ingest keeps them current)."""
        d = self.dialect
        self.conn.execute(f"DELETE FROM entity_edges WHERE source_id = {d.p}", (source_id,))
        mentions = MENTIONS_OF_SOURCE.format(source=d.named("source"))
        nodes = [
            row[0]
            for row in self.conn.execute(
                f"SELECT DISTINCT node_id FROM entity_index WHERE {mentions}",
                {"source": source_id},
            )
        ]
        for part, _ in d.batches(nodes):
            self.add_edges(source_id, part)

    def entity_frequencies(self, entity_ids: Sequence[str]) -> dict[str, int]:
        """How many nodes the reader may see mention each of these entities (absent ones are
        left out)."""
        return self.postings.frequencies(entity_ids, self.visible_ids())

    def nodes_by_entities(
        self,
        weights: dict[str, float],
        filters: Filters,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> dict[str, float]:
        """Nodes mentioning any of these entities, scored by the summed entity weights,
        filtered before the limit (ties to the smaller id).

        Without a time filter the gate is a set of sources and the in-memory postings
        answer; with one, the chunks' times are needed and SQL does.
        """
        d = self.dialect
        if not weights:
            return {}
        if filters.since is None and filters.until is None:
            sources = self._admitted_sources(filters)
            return self.postings.score(weights, sources, limit, exclude=exclude)
        values = ",".join(f"({d.marks(2)})" for _ in weights)
        visible = self.visible_ids()
        mine, mine_params = of_visible_sql(self.dialect, visible, "e.source_id")
        where, params = filter_sql(self.dialect, filters, visible)
        params = [*mine_params, *params]
        skip = ""
        if exclude:
            skip = f"AND e.node_id NOT IN ({d.marks(len(exclude))})"
        rows = self.conn.execute(
            f"""WITH q(entity_id, weight) AS (VALUES {values})
                SELECT e.node_id, sum(q.weight) AS score
                FROM q JOIN entity_index e ON e.entity_id = q.entity_id
                JOIN chunks c ON c.id = e.node_id JOIN sources s ON s.id = c.source_id
                WHERE {mine} AND {where} {skip}
                GROUP BY e.node_id ORDER BY score DESC, e.node_id LIMIT {d.p}""",
            (*[x for pair in weights.items() for x in pair], *params, *exclude, limit),
        ).fetchall()
        return {row[0]: float(row[1]) for row in rows}

    def _admitted_sources(self, filters: Filters) -> list[str]:
        """The sources the reader may see that ``filters`` admit (times aside)."""

        def admitted() -> list[str]:
            where, params = filter_sql(self.dialect, filters, self.visible_ids())
            rows = self.conn.execute(f"SELECT s.id FROM sources s WHERE {where}", params)
            return [row[0] for row in rows]

        return self._cached_read(("sources of", filters), admitted)

    def nodes_by_entities_many(
        self,
        weights: Sequence[dict[str, float]],
        filters: Filters,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> list[dict[str, float]]:
        """:meth:`nodes_by_entities` of each of ``weights`` (the same nodes, scores and
        order), in one read: with a time filter one SQL statement ranks every set's nodes
        apart (what would otherwise be a round trip to the database per set)."""
        if filters.since is None and filters.until is None:
            sources = self._admitted_sources(filters)
            return self.postings.score_many(weights, sources, limit, exclude=exclude)
        out: list[dict[str, float]] = [{} for _ in weights]
        asked = [(i, e, w) for i, each in enumerate(weights) for e, w in each.items()]
        if not asked or limit <= 0:
            return out
        d = self.dialect
        values = ",".join(f"({d.marks(3)})" for _ in asked)
        visible = self.visible_ids()
        mine, mine_params = of_visible_sql(d, visible, "e.source_id")
        where, params = filter_sql(d, filters, visible)
        skip = ""
        if exclude:
            skip = f"AND e.node_id NOT IN ({d.marks(len(exclude))})"
        rows = self.conn.execute(
            f"""WITH q(k, entity_id, weight) AS (VALUES {values}),
                scored AS (
                    SELECT q.k AS k, e.node_id AS node_id, sum(q.weight) AS score
                    FROM q JOIN entity_index e ON e.entity_id = q.entity_id
                    JOIN chunks c ON c.id = e.node_id JOIN sources s ON s.id = c.source_id
                    WHERE {mine} AND {where} {skip}
                    GROUP BY q.k, e.node_id),
                ranked AS (
                    SELECT k, node_id, score,
                           row_number() OVER (PARTITION BY k ORDER BY score DESC, node_id) AS n
                    FROM scored)
                SELECT k, node_id, score FROM ranked WHERE n <= {d.p} ORDER BY k, n""",
            (
                *[x for triple in asked for x in triple],
                *mine_params,
                *params,
                *exclude,
                limit,
            ),
        ).fetchall()
        for k, node, score in rows:
            out[int(k)][str(node)] = float(score)
        return out

    def neighbour_chunks(
        self, node_ids: Sequence[str], filters: Filters, *, window: int = 1
    ) -> dict[str, list[tuple[str, int]]]:
        """For each chat chunk, the chunks up to ``window`` places before and after it in its
        source, with their distance: the turns around it in the conversation. Independent
        documents have no such link."""
        d = self.dialect
        out: dict[str, list[tuple[str, int]]] = {n: [] for n in node_ids}
        if not node_ids:
            return out
        where, params = filter_sql(self.dialect, filters, self.visible_ids(), chunk="n")
        marks = d.marks(len(node_ids))
        for seed, node, distance in self.conn.execute(
            f"""SELECT c.id, n.id, abs(n.seq - c.seq) FROM chunks c
                JOIN chunks n ON n.source_id = c.source_id
                    AND n.seq BETWEEN c.seq - {d.p} AND c.seq + {d.p} AND n.seq != c.seq
                JOIN sources s ON s.id = n.source_id
                WHERE c.id IN ({marks}) AND s.kind = 'chat' AND {where}
                ORDER BY c.id, n.seq""",
            (window, window, *node_ids, *params),
        ):
            out[seed].append((node, int(distance)))
        return out

    def search_entities(self, needle: str, kinds: Sequence[str], limit: int) -> list[EntityMatch]:
        """Entities whose id or surface contains ``needle`` (lowercased), grouped by canonical id,
        most mentioned first, then most recently mentioned.

        A substring test (``instr``) rather than ``LIKE``: no wildcard to escape, and no limit on
        the pattern's length or complexity.
        """
        d = self.dialect
        kind_sql = f"AND e.kind IN ({d.marks(len(kinds))})" if kinds else ""
        gate, params = gate_sql(self.dialect, self.visible_ids())
        rows = self.conn.execute(
            f"""SELECT e.entity_id, min(e.kind) AS kind, min(e.surface) AS surface,
                       count(*) AS mentions, max(e.ts) AS last_seen
                FROM {visible_mentions(gate)}
                WHERE ({d.strpos}(lower(e.entity_id), {d.p}) > 0
                       OR {d.strpos}(lower(e.surface), {d.p}) > 0)
                  {kind_sql}
                GROUP BY e.entity_id
                ORDER BY mentions DESC, last_seen DESC, e.entity_id
                LIMIT {d.p}""",
            (*params, needle, needle, *kinds, limit),
        ).fetchall()
        return [
            EntityMatch(
                canonical_id=row["entity_id"],
                kind=row["kind"],
                surface=row["surface"],
                mention_count=row["mentions"],
                last_seen=from_ms(row["last_seen"]),
            )
            for row in rows
        ]

    def neighbours(self, entity_id: str, limit: int) -> list[tuple[str, float]]:
        """Entities co-mentioned with ``entity_id``, strongest first, over the sources the
        reader may see (edges are kept per source, so hidden ones add nothing)."""
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        rows = self.conn.execute(
            f"""SELECT other, sum(weight) AS w FROM (
                   SELECT b AS other, weight, source_id FROM entity_edges WHERE a = {d.p}
                   UNION ALL
                   SELECT a AS other, weight, source_id FROM entity_edges WHERE b = {d.p}
               ) x JOIN sources s ON s.id = x.source_id
               WHERE {gate}
               GROUP BY other ORDER BY w DESC, other LIMIT {d.p}""",
            (entity_id, entity_id, *params, limit),
        ).fetchall()
        return [(row["other"], float(row["w"])) for row in rows]
