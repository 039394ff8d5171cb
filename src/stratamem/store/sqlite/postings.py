"""Entity postings held in memory: for each entity, the chunks that mention it.

The graph leg and the expansion step score nodes by the entities they share with the query or
with a seed. In SQL that reads every mention row of every entity involved, joins it to its
source and groups it, for each query and for each seed; an entity named by thousands of chunks
makes that the slowest part of a search. Here the mentions of an entity are read once, kept as
arrays of node and source codes, and scored with numpy.

The cache is filled per entity, when a query first needs it, and emptied whenever the
database changes (this connection's change counter or SQLite's ``data_version``, which moves
when another connection commits), so it never answers from a state that is gone. It holds at
most ``max_postings`` mentions; past that it starts again empty.
"""

from __future__ import annotations

import heapq
import sqlite3
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from stratamem.store.sqlite.connection import batches

MAX_POSTINGS: Final = 4_000_000

Codes = npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class _Postings:
    nodes: Codes
    sources: Codes


class EntityPostings:
    def __init__(
        self,
        conn: sqlite3.Connection,
        state: Callable[[], tuple[int, int]],
        *,
        max_postings: int = MAX_POSTINGS,
    ) -> None:
        self._conn = conn
        self._state = state
        self.max_postings = max_postings
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._counts: dict[str, int] = {}
        self._postings: dict[str, _Postings] = {}
        self._size = 0
        self._node_codes: dict[str, int] = {}
        self._node_ids: list[str] = []
        self._source_codes: dict[str, int] = {}

    def frequencies(self, entity_ids: Sequence[str]) -> dict[str, int]:
        """How many nodes mention each of these entities (absent ones are left out)."""
        with self._lock:
            self._check()
            counts = self._counts
            missing = sorted({e for e in entity_ids if e not in counts})
            for entity in missing:
                counts[entity] = 0
            for part, marks in batches(missing):
                counts.update(
                    self._conn.execute(
                        f"""SELECT entity_id, count(*) FROM entity_index
                            WHERE entity_id IN ({marks}) GROUP BY entity_id""",
                        part,
                    ).fetchall()
                )
            return {e: counts[e] for e in entity_ids if counts[e]}

    def score(
        self,
        weights: dict[str, float],
        sources: Collection[str] | None,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> dict[str, float]:
        """The ``limit`` nodes with the highest summed weight of the entities they mention,
        among those of ``sources`` (all when None) and not in ``exclude``; ties go to the
        smaller node id, as ``ORDER BY score DESC, node_id`` would have them."""
        if not weights or limit <= 0:
            return {}
        with self._lock:
            found = self._load(list(weights))
            parts = [(p, weights[e]) for e, p in found.items() if len(p.nodes)]
            if not parts:
                return {}
            nodes = np.concatenate([p.nodes for p, _ in parts])
            values = np.concatenate([np.full(len(p.nodes), w) for p, w in parts])
            keep = np.ones(len(nodes), np.bool_)
            if sources is not None:
                codes = [self._source_codes[s] for s in sources if s in self._source_codes]
                source_codes = np.concatenate([p.sources for p, _ in parts])
                keep &= np.isin(source_codes, np.asarray(codes, dtype=np.int32))
            if exclude:
                codes = [self._node_codes[n] for n in exclude if n in self._node_codes]
                keep &= ~np.isin(nodes, np.asarray(codes, dtype=np.int32))
            if not keep.all():
                nodes, values = nodes[keep], values[keep]
            if not len(nodes):
                return {}
            unique, inverse = np.unique(nodes, return_inverse=True)
            totals = np.bincount(inverse, weights=values).astype(np.float64, copy=False)
            return self._top(unique, totals, limit)

    def _top(self, nodes: Codes, totals: npt.NDArray[np.float64], limit: int) -> dict[str, float]:
        if len(nodes) > limit:
            # Everything scoring above the limit-th score, and the ties at it by smallest id.
            cut = np.partition(totals, len(totals) - limit)[len(totals) - limit]
            above = np.flatnonzero(totals > cut)
            tied = np.flatnonzero(totals == cut)
            names = self._node_ids
            smallest = heapq.nsmallest(
                limit - len(above), tied.tolist(), key=lambda i: names[int(nodes[i])]
            )
            chosen = np.concatenate([above, np.asarray(smallest, dtype=np.int64)])
            nodes, totals = nodes[chosen], totals[chosen]
        ranked = sorted(
            zip(totals.tolist(), nodes.tolist(), strict=True),
            key=lambda pair: (-pair[0], self._node_ids[pair[1]]),
        )
        return {self._node_ids[node]: total for total, node in ranked}

    def _check(self) -> None:
        key = self._state()
        if key != self._key or self._size > self.max_postings:
            self._counts.clear()
            self._postings.clear()
            self._node_codes.clear()
            self._node_ids.clear()
            self._source_codes.clear()
            self._size = 0
            self._key = key

    def _load(self, entity_ids: Sequence[str]) -> dict[str, _Postings]:
        self._check()
        missing = sorted({e for e in entity_ids if e not in self._postings})
        if missing:
            rows: dict[str, tuple[list[int], list[int]]] = {e: ([], []) for e in missing}
            nodes, sources = self._node_codes, self._source_codes
            for part, marks in batches(missing):
                for entity, node, source in self._conn.execute(
                    f"""SELECT entity_id, node_id, source_id FROM entity_index
                        WHERE entity_id IN ({marks})""",
                    part,
                ):
                    code = nodes.get(node)
                    if code is None:
                        code = nodes[node] = len(self._node_ids)
                        self._node_ids.append(node)
                    node_list, source_list = rows[entity]
                    node_list.append(code)
                    source_list.append(sources.setdefault(source, len(sources)))
            for entity, (node_list, source_list) in rows.items():
                self._postings[entity] = _Postings(
                    np.asarray(node_list, dtype=np.int32), np.asarray(source_list, dtype=np.int32)
                )
                self._size += len(node_list)
        return {e: self._postings[e] for e in entity_ids if e in self._postings}
