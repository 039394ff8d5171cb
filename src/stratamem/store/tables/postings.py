"""Entity postings held in memory: for each entity, the chunks that mention it.

The graph leg and the expansion step score nodes by the entities they share with the query or
with a seed. In SQL that reads every mention row of every entity involved, joins it to its
source and groups it, for each query and for each seed; an entity named by thousands of chunks
makes that the slowest part of a search. Here every mention is read once, into arrays of node
codes per entity, and scored with numpy.

Staying current: mentions are written only with new chunks and removed only with their
chunks (a removal bumps the store's chunk generation). So when the database has changed (this
connection's change counter or SQLite's ``data_version``, which moves when another connection
commits), the mentions of chunks above the highest rowid read so far are appended, unless the
generation moved, in which case everything is read again. Either way the number of mentions
held must then equal the table's, or everything is read again. The state and the rows are read
in one read snapshot (the caller's, when a search holds one), so what is held is one version
of the table, and the state it is keyed on is that version's.

One copy may serve several connections (a server's threads, each with its own): ``reader``
names the caller's, and each one's state is remembered apart. A connection whose snapshot is
older than what is held (a lower generation, or the same one and fewer chunks) uses what is
held rather than reading the table back to its version: its nodes are the older snapshot's
plus what was committed since, which the caller's own gated reads then find or leave out.
"""

from __future__ import annotations

import heapq
import threading
from array import array
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager

import numpy as np
import numpy.typing as npt

from stratamem.store.caches import LastFew
from stratamem.store.dialect import Connection, Dialect

Codes = npt.NDArray[np.int32]


# The count of mentions the store keeps by triggers (SQLite's migration 13, PostgreSQL's 3).
COUNTED_MENTIONS = "SELECT n FROM row_counts WHERE name = 'entity_index'"


class EntityPostings:
    def __init__(
        self,
        conn: Callable[[], Connection],
        *,
        state: Callable[[], tuple[int, int]],
        generation: Callable[[], int],
        snapshot: Callable[[], AbstractContextManager[None]],
        writing: Callable[[], bool],
        reader: Callable[[], object] = lambda: None,
        count_sql: str = "SELECT count(*) FROM entity_index",
        dialect: Dialect,
    ) -> None:
        self._conn = conn
        self.dialect = dialect
        self._count_sql = count_sql  # how many mentions the store holds (one row, one value)
        self._state = state
        self._generation = generation
        self._snapshot = snapshot
        self._writing = writing
        self._reader = reader
        self._lock = threading.Lock()
        self._keys: dict[object, tuple[int, int]] = {}  # reader → its state when last current
        self._loaded = False
        self._at: tuple[int, int] = (-1, 0)  # (generation, highest chunk rowid) read
        self._lists: dict[str, array[int]] = {}
        self._arrays: dict[str, Codes] = {}
        self._node_codes: dict[str, int] = {}
        self._node_ids: list[str] = []
        self._node_source: array[int] = array("i")
        self._source_codes: dict[str, int] = {}
        self._total = 0
        self._masks: LastFew[npt.NDArray[np.bool_]] = LastFew()

    def frequencies(
        self, entity_ids: Sequence[str], sources: Collection[str] | None = None
    ) -> dict[str, int]:
        """How many nodes (of ``sources``; all when None) mention each of these entities;
        those none mentions are left out."""
        with self._lock:
            self._current()
            if sources is None:
                return {e: len(self._lists[e]) for e in entity_ids if e in self._lists}
            admitted = self._admitted(sources)
            out: dict[str, int] = {}
            for entity in entity_ids:
                if entity in self._lists:
                    count = int(np.count_nonzero(admitted[self._codes(entity)]))
                    if count:
                        out[entity] = count
            return out

    def _admitted(self, sources: Collection[str]) -> npt.NDArray[np.bool_]:
        """Which nodes belong to ``sources``: one mask over every node, kept while the
        postings and the set of sources stay the same (a principal asks with the same set
        query after query)."""
        key = frozenset(sources)
        found = self._masks.get(key)
        if found is not None:
            return found
        wanted = np.asarray(
            [self._source_codes[s] for s in sources if s in self._source_codes], np.int32
        )
        mask = np.isin(np.frombuffer(self._node_source, dtype=np.int32), wanted)
        return self._masks.put(key, mask)

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
        return self.score_many([weights], sources, limit, exclude=exclude)[0]

    def score_many(
        self,
        weights: Sequence[dict[str, float]],
        sources: Collection[str] | None,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> list[dict[str, float]]:
        """:meth:`score` of each of ``weights``, summed in one pass over all their postings
        (the expansion scores five seeds a search). Each node's weights are added in the
        order its set names its entities, as :meth:`score` alone would add them."""
        out: list[dict[str, float]] = [{} for _ in weights]
        if limit <= 0:
            return out
        with self._lock:
            self._current()
            codes: list[Codes] = []
            values: list[npt.NDArray[np.float64]] = []
            sets: list[npt.NDArray[np.int64]] = []
            for i, each in enumerate(weights):
                for entity, weight in each.items():
                    if entity in self._lists:
                        found = self._codes(entity)
                        codes.append(found)
                        values.append(np.full(len(found), weight))
                        sets.append(np.full(len(found), i, np.int64))
            if not codes:
                return out
            nodes = np.concatenate(codes)
            value = np.concatenate(values)
            keep = np.ones(len(nodes), np.bool_)
            if sources is not None:
                keep &= self._admitted(sources)[nodes]
            if exclude:
                skip = [self._node_codes[n] for n in exclude if n in self._node_codes]
                keep &= ~np.isin(nodes, np.asarray(skip, dtype=np.int32))
            pairs = np.concatenate(sets) * len(self._node_ids) + nodes
            if not keep.all():
                pairs, value = pairs[keep], value[keep]
            if not len(pairs):
                return out
            unique, inverse = _unique_runs(pairs)
            totals = np.bincount(inverse, weights=value).astype(np.float64, copy=False)
            owner, node = np.divmod(unique, len(self._node_ids))
            bounds = np.searchsorted(owner, np.arange(len(weights) + 1))
            for i in range(len(weights)):
                start, end = int(bounds[i]), int(bounds[i + 1])
                if end > start:
                    out[i] = self._top(node[start:end], totals[start:end], limit)
            return out

    def _codes(self, entity: str) -> Codes:
        """The codes of the nodes that mention ``entity``, ascending (kept until it gets
        more): the postings of a set of entities are then runs a stable sort merges."""
        codes = self._arrays.get(entity)
        if codes is None:
            codes = self._arrays[entity] = np.sort(
                np.frombuffer(self._lists[entity], dtype=np.int32)
            )
        return codes

    def _top(self, nodes: Codes, totals: npt.NDArray[np.float64], limit: int) -> dict[str, float]:
        names = self._node_ids
        if len(nodes) > limit:
            # Everything scoring above the limit-th score, and the ties at it by smallest id.
            cut = _kth_highest(totals, limit)
            above = totals > cut
            ranked = _negated_pairs(totals[above], nodes[above], names)
            tied = [names[n] for n in nodes[totals == cut].tolist()]
            at_cut = -float(cut)
            ranked += [(at_cut, name) for name in heapq.nsmallest(limit - len(ranked), tied)]
        else:
            ranked = _negated_pairs(totals, nodes, names)
        ranked.sort()  # by score descending, then id (ids are unique)
        return {name: -negated for negated, name in ranked}

    # -- keeping current -------------------------------------------------------------------

    def _current(self) -> None:
        d = self.dialect
        reader = self._reader()
        if self._loaded and self._keys.get(reader) == self._state():
            return
        conn = self._conn()
        with self._snapshot():  # one version for the state, the rows and the count
            key, generation = self._state(), self._generation()
            top = int(conn.execute("SELECT coalesce(max(rowid), 0) FROM chunks").fetchone()[0])
            read_generation, read_top = self._at
            if self._loaded and (generation, top) < (read_generation, read_top):
                # This reader's snapshot is older than what is held: use what is held.
                self._keys[reader] = key
                return
            if not self._loaded or generation != read_generation:
                self._reset()
                self._add(conn.execute("SELECT entity_id, node_id, source_id FROM entity_index"))
            elif top > read_top:
                self._add(
                    conn.execute(
                        f"""SELECT e.entity_id, e.node_id, e.source_id FROM chunks c
                           JOIN entity_index e ON e.node_id = c.id WHERE c.rowid > {d.p}""",
                        (read_top,),
                    )
                )
            count = int(conn.execute(self._count_sql).fetchone()[0])
            if count != self._total:
                # Mentions changed some other way: read them all again.
                self._reset()
                self._add(conn.execute("SELECT entity_id, node_id, source_id FROM entity_index"))
        if self._writing():
            # What was read may yet be rolled back, and neither the change counter nor the
            # generation goes back with it: check again next time, and read everything then.
            self._loaded = False
            self._keys.clear()
        else:
            self._loaded, self._at = True, (generation, top)
            self._keys[reader] = key

    def _reset(self) -> None:
        self._lists.clear()
        self._arrays.clear()
        self._node_codes.clear()
        self._node_ids.clear()
        self._node_source = array("i")
        self._source_codes.clear()
        self._total = 0
        self._masks.clear()
        self._keys.clear()

    def _add(self, rows: Iterable[tuple[str, str, str]]) -> None:
        self._masks.clear()
        lists, arrays, codes, sources = (
            self._lists,
            self._arrays,
            self._node_codes,
            self._source_codes,
        )
        names, of_node = self._node_ids, self._node_source
        added = 0
        for entity, node, source in rows:
            code = codes.get(node)
            if code is None:
                code = codes[node] = len(names)
                names.append(node)
                of_node.append(sources.setdefault(source, len(sources)))
            found = lists.get(entity)
            if found is None:
                found = lists[entity] = array("i")
            else:
                arrays.pop(entity, None)
            found.append(code)
            added += 1
        self._total += added


def _negated_pairs(
    totals: npt.NDArray[np.float64], nodes: Codes, names: list[str]
) -> list[tuple[float, str]]:
    """(−total, node id) of each node: sorted, best first and ties by id."""
    return list(zip((-totals).tolist(), [names[n] for n in nodes.tolist()], strict=True))


def _unique_runs(
    values: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]]:
    """``np.unique(values, return_inverse=True)`` for values that are a few ascending runs
    (each entity's postings): a stable sort merges runs where a quicksort sorts from
    scratch, 4-10× faster on the expansion's postings."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.empty(len(ordered), np.bool_)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(len(ordered), np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _kth_highest(values: npt.NDArray[np.float64], k: int) -> float:
    """The ``k``-th highest of ``values`` counted with repeats (1 ≤ k ≤ len(values)). A few
    passes of max and count find it for a small ``k`` (the expansion asks for 3), where a
    partition of thousands of tied totals costs ten times as much."""
    if k > _FEW:
        return float(np.partition(values, len(values) - k)[len(values) - k])
    rest = values
    while True:
        top = rest.max()
        count = int(np.count_nonzero(rest == top))
        if count >= k:
            return float(top)
        k -= count
        rest = rest[rest < top]


_FEW = 8
