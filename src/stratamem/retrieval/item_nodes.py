"""Ids that name items where a node id is read: an item's own id (its key), which survives
its edits, and a chunk id an item had before an edit or a removal took it away.

- An item's id reads as the item as it is now: a hit whose ``node_id`` is that id, whose
  content is the item's text and whose entities, tree and score are those of the chunks it
  is derived into now. A removed item reads as missing.
- A chunk id that is gone, of an item's version, reads as that version (the closed one, or
  the current one where a chat window holding the item was derived again around it): a hit
  whose ``node_id`` is the chunk id asked, whose content is what the version said.

Either hit's ``explain["item"]`` says which version it is (``version``, ``action``,
``recorded_at``, ``closed_at``, ``nodes``) and what the item is now: ``current`` (its
version number and chunk ids now) or, when it was removed, ``removed_at``. Only items that
keep versions (:mod:`stratamem.store.items`) are read this way, through the reader's gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stratamem.retrieval.tree_hits import leaf_hits
from stratamem.store.base import Store
from stratamem.store.items import ItemVersion
from stratamem.types import Filters, NodeKind, RetrievalHit, SourceKind, TreeKind, rfc3339

REASON = "item"


@dataclass(frozen=True, slots=True)
class ItemRef:
    """What an id that is no chunk or summary names: ``named``, the version it names (an
    item's id: its current version; a chunk id: the version it was derived from); ``now``,
    the item's open version (a removal while the item is removed); ``nodes``, the chunks the
    item is derived into now (none while removed)."""

    asked: str
    named: ItemVersion
    now: ItemVersion
    nodes: tuple[str, ...] = ()

    @property
    def removed(self) -> bool:
        return self.now.removed

    @property
    def standing(self) -> int:
        """The number of the version that stands for the item: its current one, or while
        removed the one the removal closed."""
        return self.now.version - 1 if self.removed else self.now.version

    def explain(self) -> dict[str, object]:
        named = self.named
        out: dict[str, object] = {
            "id": named.id,
            "version": named.version,
            "action": named.action,
            "recorded_at": rfc3339(named.recorded_at),
            "closed_at": rfc3339(named.closed_at),
            "nodes": list(named.nodes),
        }
        if self.removed:
            out["removed_at"] = rfc3339(self.now.recorded_at)
        else:
            out["current"] = {"version": self.now.version, "nodes": list(self.nodes)}
        return out


def item_refs(store: Store, ids: Sequence[str]) -> dict[str, list[ItemRef]]:
    """What each of ``ids`` names as an item, for those that name one the reader may read:
    a chunk id once derived from an item's version names one; an item's id names the item
    in each source that holds it (removed ones included: see :attr:`ItemRef.removed`)."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return {}
    by_node = store.item_node_versions(ids)
    keys = [i for i in ids if i not in by_node]
    wanted = list(dict.fromkeys([*keys, *(key for _, key, _ in by_node.values())]))
    histories: dict[tuple[str, str], list[ItemVersion]] = {}
    for version in store.item_versions(wanted):
        histories.setdefault((version.source_id, version.id), []).append(version)
    kinds = store.source_kinds()
    live: dict[tuple[str, str], tuple[str, ...]] = {}

    def nodes_now(history: list[ItemVersion]) -> tuple[str, ...]:
        now = history[-1]
        where = (now.source_id, now.id)
        if where not in live:
            live[where] = () if now.removed else _chunks_now(store, now, kinds)
        return live[where]

    found: dict[str, list[ItemRef]] = {}
    for node, (source_id, key, number) in by_node.items():
        history = histories.get((source_id, key), [])
        named = next((v for v in history if v.version == number), None)
        if named is not None:
            found[node] = [ItemRef(node, named, history[-1], nodes_now(history))]
    for key in keys:
        for (_, held), history in sorted(histories.items()):
            if held == key:
                found.setdefault(key, []).append(
                    ItemRef(key, history[-1], history[-1], nodes_now(history))
                )
    return found


def _chunks_now(store: Store, now: ItemVersion, kinds: dict[str, SourceKind]) -> tuple[str, ...]:
    """The chunks the item is derived into now: those its current version was written into,
    where they still stand; else those derived from its record since (a chat window holding
    it derived again when a message was added beside it)."""
    alive = store.existing_ids(list(now.nodes)) if now.nodes else set()
    if alive:
        return tuple(n for n in now.nodes if n in alive)
    chat = kinds.get(now.source_id) is SourceKind.CHAT
    return tuple(store.item_chunks(now.source_id, now.id, within=now.time if chat else None))


def item_hits(store: Store, ids: Sequence[str]) -> dict[str, list[RetrievalHit]]:
    """The hits of the ids among ``ids`` that name items (see the module docstring), one per
    source holding the item; an item's id of a removed item is left out, a chunk id of one
    is not."""
    refs = {
        asked: [r for r in found if asked != r.named.id or not r.removed]
        for asked, found in item_refs(store, ids).items()
    }
    wanted = list(dict.fromkeys(n for found in refs.values() for r in found for n in r.nodes))
    leaves: dict[str, RetrievalHit] = {}
    if wanted:
        found_leaves = store.trees.leaves_by_id(wanted, Filters())
        leaves = {h.node_id: h for h in leaf_hits(store, list(found_leaves.values()))}
    scopes = store.scopes()
    out: dict[str, list[RetrievalHit]] = {}
    for asked, found in refs.items():
        if found:
            out[asked] = [_hit(r, scopes.get(r.named.source_id, ""), leaves) for r in found]
    return out


def _hit(ref: ItemRef, scope: str, leaves: dict[str, RetrievalHit]) -> RetrievalHit:
    version = ref.named
    chunks = [leaves[n] for n in ref.nodes if n in leaves]
    first = chunks[0] if chunks else None
    entities = tuple(dict.fromkeys(e for h in chunks for e in h.entities))
    return RetrievalHit(
        node_id=ref.asked,
        node_kind=NodeKind.LEAF,
        tree_id=first.tree_id if first is not None else "",
        tree_kind=TreeKind.SOURCE,
        tree_scope=scope,
        level=0,
        content=version.text,
        entities=entities,
        topics=version.tags,
        time_start=version.time,
        time_end=version.time,
        score=first.score if first is not None else 0.0,
        source_ref=version.ref or (first.source_ref if first is not None else None),
        source_id=version.source_id,
        author=version.author,
        title=version.title or "",
        explain={"reason": REASON, "item": ref.explain()},
    )
