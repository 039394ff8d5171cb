"""Merging and splitting entities by hand: what resolution from the sources cannot infer.

A merge or a split is a row (:class:`~stratamem.types.EntityDecision`) with who made it and
when, under a random id; undoing one marks it undone, so the history stays listable (a
decision naming an id only one source names goes with that source when it is locked or
forgotten). A principal is told who made one only as ``you``, ``owner`` or ``another
principal`` (:func:`as_seen_by`).

- ``merge(A, B)``: A is B (B the canonical id). Where a split keeps A and B apart, the split
  is undone instead, and the alias it hid counts again; a split of an alias the caller does
  not read is neither undone nor shown to it (the split says that some source states it),
  and the merge is recorded.
- ``split(A, B)``: undoes a merge between A and B (either way round); otherwise it records
  that the alias a source states between A and B is not to be followed.

Each is checked against the store as the caller reads it (``reader``): both ids must be
named somewhere the caller can see (an id it cannot see answers as unknown, so a merge never
tells a caller of one), an id is not merged with itself nor with what is already one entity
with it, and a merge back (B into A after A into B) is a cycle. The row is then written
through ``writer`` (the owner's store) in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from stratamem.errors import InvalidArgument, NotFoundError
from stratamem.store.base import Store
from stratamem.store.resolution import MERGE, SPLIT
from stratamem.types import EntityDecision

MAX_HISTORY = 1000


def _ids(reader: Store, entity_a: str, entity_b: str) -> tuple[str, str]:
    a, b = _clean(entity_a, "entity_a"), _clean(entity_b, "entity_b")
    if a == b:
        raise InvalidArgument("entity_a and entity_b are the same id: nothing to merge or split")
    seen = reader.entities_seen([a, b])
    for entity, name in ((a, "entity_a"), (b, "entity_b")):
        if entity not in seen:
            raise NotFoundError(f"{name} names no entity")
    return a, b


def _clean(entity: str, name: str = "entity") -> str:
    """The id as the store keeps it (kind and value lowercased, spaces collapsed). Errors
    name the argument, never echo its value (a server does not hand a caller's text back)."""
    kind, colon, value = entity.strip().partition(":")
    if not colon or not kind.strip() or not value.strip():
        raise InvalidArgument(f"{name} is not an entity id (kind:value, such as person:carol diaz)")
    return f"{kind.strip().lower()}:{' '.join(value.lower().split())}"


def _active(reader: Store, action: str, a: str, b: str) -> list[EntityDecision]:
    return [
        d
        for d in reader.entity_decisions()
        if d.active and d.action == action and {d.entity_a, d.entity_b} == {a, b}
    ]


@dataclass(frozen=True, slots=True)
class Change:
    """What a merge or a split checked as its caller reads the store comes to: a decision
    to record (``record``: merge or split, of ``entity_a`` and ``entity_b``), or the
    decisions to mark undone (``undo``)."""

    record: str | None
    entity_a: str
    entity_b: str
    undo: tuple[int, ...] = ()


def _stated(reader: Store) -> set[frozenset[str]]:
    """The pairs of ids an alias joins in the sources ``reader`` reads."""
    return {frozenset((alias, entity)) for alias, entity, _ in reader.alias_rows()}


def _counts_for(reader: Store, decision: EntityDecision, stated: set[frozenset[str]]) -> bool:
    """Whether ``reader`` is told of ``decision`` (both of whose ids it sees): a merge, yes;
    a split only where it reads the alias split (the owner always), for a split says that
    some source states that alias."""
    return (
        decision.action != SPLIT
        or reader.visible_ids() is None
        or frozenset(decision.pair) in stated
    )


def plan_merge(reader: Store, entity_a: str, entity_b: str) -> Change:
    """The change ``merge(entity_a, entity_b)`` makes, checked against ``reader``'s view: a
    split it is told of (see :func:`_counts_for`) is undone, else a merge recorded."""
    a, b = _ids(reader, entity_a, entity_b)
    stated = _stated(reader)
    splits = [d for d in _active(reader, SPLIT, a, b) if _counts_for(reader, d, stated)]
    if splits:
        return Change(None, a, b, tuple(d.id for d in splits))
    resolution = reader.entity_resolution()
    if resolution.joined(a, b):
        back = _active(reader, MERGE, a, b)
        if back:
            raise InvalidArgument(
                f"entity_a and entity_b are one entity already: merge #{back[0].id} merged one "
                "into the other, and merging back would make a cycle (split them to undo it)"
            )
        raise InvalidArgument("entity_a and entity_b are one entity already")
    return Change(MERGE, a, b)


def plan_split(reader: Store, entity_a: str, entity_b: str) -> Change:
    """The change ``split(entity_a, entity_b)`` makes, checked against ``reader``'s view."""
    a, b = _ids(reader, entity_a, entity_b)
    merges = _active(reader, MERGE, a, b)
    if merges:
        return Change(None, a, b, tuple(d.id for d in merges))
    if frozenset((a, b)) not in _stated(reader):
        raise InvalidArgument(
            "no merge or alias joins entity_a and entity_b directly: see the entity's "
            "aliases and its merge history"
        )
    if _active(reader, SPLIT, a, b):
        raise InvalidArgument("entity_a and entity_b are split already")
    return Change(SPLIT, a, b)


def apply(
    writer: Store, change: Change, *, by: str | None = None, now: datetime | None = None
) -> EntityDecision:
    """Write ``change`` through ``writer`` in one transaction; returns the decision recorded,
    or the first one undone."""
    at = now or datetime.now(UTC)
    with writer.transaction():
        if change.record is not None:
            decision_id = writer.record_entity_decision(
                change.record, change.entity_a, change.entity_b, by=by, at=at
            )
        else:
            for undone in change.undo:
                writer.undo_entity_decision(undone, by=by, at=at)
            decision_id = change.undo[0]
    return _decision(writer, decision_id)


def merge(
    reader: Store,
    writer: Store,
    entity_a: str,
    entity_b: str,
    *,
    by: str | None = None,
    now: datetime | None = None,
) -> EntityDecision:
    """Record that ``entity_a`` is ``entity_b`` (see the module's docstring); returns the
    merge recorded, or the split undone."""
    return apply(writer, plan_merge(reader, entity_a, entity_b), by=by, now=now)


def split(
    reader: Store,
    writer: Store,
    entity_a: str,
    entity_b: str,
    *,
    by: str | None = None,
    now: datetime | None = None,
) -> EntityDecision:
    """Undo a merge between the two, or stop following the alias a source states between
    them (see the module's docstring); returns the merge undone or the split recorded."""
    return apply(writer, plan_split(reader, entity_a, entity_b), by=by, now=now)


def history(
    reader: Store, *, entity_id: str | None = None, limit: int = 100
) -> list[EntityDecision]:
    """The merges and splits recorded, newest first, undone ones too; only those whose two
    ids the reader can see (a split, whose alias it reads: see :func:`_counts_for`), and
    with ``entity_id``, only those of its entity's ids."""
    decisions = reader.entity_decisions()
    seen = reader.entities_seen([e for d in decisions for e in d.pair])
    stated = _stated(reader)
    found = [d for d in decisions if set(d.pair) <= seen and _counts_for(reader, d, stated)]
    if entity_id is not None:
        members = set(reader.entity_resolution().members(_clean(entity_id, "entity_id")))
        found = [d for d in found if set(d.pair) & members]
    found.sort(key=lambda d: (d.made_at is not None, d.made_at, d.id), reverse=True)
    principal = reader.principal()
    name = None if principal is None else principal.name
    return [as_seen_by(d, name) for d in found[: max(1, min(limit, MAX_HISTORY))]]


YOU, OWNER, ANOTHER = "you", "owner", "another principal"


def as_seen_by(decision: EntityDecision, principal: str | None) -> EntityDecision:
    """``decision`` as ``principal`` is told of it (None: the owner, who sees every name):
    who made and undid it only as ``you``, ``owner`` or ``another principal``, so a
    principal learns no other principal's name."""
    if principal is None:
        return decision

    def who(name: str | None) -> str:
        return OWNER if name is None else YOU if name == principal else ANOTHER

    return replace(
        decision,
        made_by=who(decision.made_by),
        undone_by=None if decision.undone_at is None else who(decision.undone_by),
    )


def _decision(store: Store, decision_id: int) -> EntityDecision:
    return next(d for d in store.entity_decisions() if d.id == decision_id)
