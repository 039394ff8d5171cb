"""Merging and splitting entities by hand: what resolution from the sources cannot infer.

A merge or a split is a row (:class:`~stratamem.types.EntityDecision`) with who made it and
when; nothing is deleted, and undoing one marks it undone, so the history stays listable.

- ``merge(A, B)``: A is B (B the canonical id). Where a split keeps A and B apart, the split
  is undone instead, and the alias it hid counts again.
- ``split(A, B)``: undoes a merge between A and B (either way round); otherwise it records
  that the alias a source states between A and B is not to be followed.

Each is checked against the store as the caller reads it (``reader``): both ids must be
named somewhere the caller can see (an id it cannot see answers as unknown, so a merge never
tells a caller of one), an id is not merged with itself nor with what is already one entity
with it, and a merge back (B into A after A into B) is a cycle. The row is then written
through ``writer`` (the owner's store) in one transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime

from stratamem.entities.resolve import MERGE, SPLIT
from stratamem.errors import InvalidArgument, NotFoundError
from stratamem.store.base import Store
from stratamem.types import EntityDecision

MAX_HISTORY = 1000


def _ids(reader: Store, entity_a: str, entity_b: str) -> tuple[str, str]:
    a, b = _clean(entity_a), _clean(entity_b)
    if a == b:
        raise InvalidArgument(f"cannot merge or split {a!r} with itself")
    seen = reader.entities_seen([a, b])
    for entity in (a, b):
        if entity not in seen:
            raise NotFoundError(f"no entity {entity!r}")
    return a, b


def _clean(entity: str) -> str:
    kind, colon, value = entity.strip().partition(":")
    if not colon or not kind.strip() or not value.strip():
        raise InvalidArgument(
            f"{entity!r} is not an entity id (kind:value, such as person:carol diaz)"
        )
    return f"{kind.strip().lower()}:{' '.join(value.lower().split())}"


def _active(reader: Store, action: str, a: str, b: str) -> list[EntityDecision]:
    return [
        d
        for d in reader.entity_decisions()
        if d.active and d.action == action and {d.entity_a, d.entity_b} == {a, b}
    ]


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
    a, b = _ids(reader, entity_a, entity_b)
    at = now or datetime.now(UTC)
    splits = _active(reader, SPLIT, a, b)
    if splits:
        with writer.transaction():
            for split in splits:
                writer.undo_entity_decision(split.id, by=by, at=at)
        return _decision(writer, splits[0].id)
    resolution = reader.entity_resolution()
    if resolution.joined(a, b):
        back = _active(reader, MERGE, a, b)
        if back:
            raise InvalidArgument(
                f"{a!r} and {b!r} are one entity already: {back[0].entity_a!r} was merged "
                f"into {back[0].entity_b!r} (merge #{back[0].id}); merging back would make a "
                "cycle (split them to undo it)"
            )
        raise InvalidArgument(
            f"{a!r} and {b!r} are one entity already ({resolution.canonical(a)!r})"
        )
    with writer.transaction():
        new_id = writer.record_entity_decision(MERGE, a, b, by=by, at=at)
    return _decision(writer, new_id)


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
    a, b = _ids(reader, entity_a, entity_b)
    at = now or datetime.now(UTC)
    merges = _active(reader, MERGE, a, b)
    if merges:
        with writer.transaction():
            for done in merges:
                writer.undo_entity_decision(done.id, by=by, at=at)
        return _decision(writer, merges[0].id)
    stated = {frozenset((alias, entity)) for alias, entity, _ in reader.alias_rows()}
    if frozenset((a, b)) not in stated:
        raise InvalidArgument(
            f"no merge or alias joins {a!r} and {b!r} directly: see the entity's aliases "
            "and its merge history"
        )
    if _active(reader, SPLIT, a, b):
        raise InvalidArgument(f"{a!r} and {b!r} are split already")
    with writer.transaction():
        new_id = writer.record_entity_decision(SPLIT, a, b, by=by, at=at)
    return _decision(writer, new_id)


def history(reader: Store, *, entity: str | None = None, limit: int = 100) -> list[EntityDecision]:
    """The merges and splits recorded, newest first, undone ones too; only those whose two
    ids the reader can see, and with ``entity``, only those of its entity's ids."""
    decisions = reader.entity_decisions()
    seen = reader.entities_seen([e for d in decisions for e in d.pair])
    found = [d for d in decisions if set(d.pair) <= seen]
    if entity is not None:
        members = set(reader.entity_resolution().members(_clean(entity)))
        found = [d for d in found if set(d.pair) & members]
    found.sort(key=lambda d: -d.id)
    return found[: max(1, min(limit, MAX_HISTORY))]


def _decision(store: Store, decision_id: int) -> EntityDecision:
    return next(d for d in store.entity_decisions() if d.id == decision_id)
