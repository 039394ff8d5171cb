"""Entity resolution: which ids name one entity, and which of them is its canonical id.

Two kinds of evidence join ids:

- **What the sources state** (``entity_aliases``, see :mod:`stratamem.entities.aliases`): a
  mail From gives a name and an address, a Slack profile a real name, a display name, an
  email and a user id, a Discord author an id, a user name and a nickname, a person's note
  its title and front matter. Each statement is read through the reader's gate, so what a
  hidden or locked source says joins nothing for that reader.
- **What someone decided** (``entity_merges``): ``merge A B`` says A is B; ``split A B``
  says an alias a source states between A and B is not to be followed. A merge counts for a
  reader only where that reader can see both A and B named somewhere, so it never tells a
  reader of an id it could not see.

The ids joined by these edges (less the split ones) form the connected components of a
graph; each component is one entity. Its canonical id is the member that ranks first by:
not merged away (the ``A`` of a merge), then the target of a merge (its ``B``), then kind
(``person`` before ``user``, ``email``, ``handle``, the rest), then being the named side of
some statement (a real name rather than a display name), then the number of words (a full
name before a first name), then the id itself. So resolution is deterministic and does not
depend on the order sources were ingested in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stratamem.types import EntityDecision

MERGE = "merge"
SPLIT = "split"
_KIND_RANK = {"person": 0, "user": 1, "email": 2, "handle": 3}


@dataclass(frozen=True, slots=True)
class Resolution:
    """The entities a reader sees: each id that belongs to a component of more than one id
    mapped to its canonical id, and each canonical id to its members (canonical first)."""

    canonical_of: dict[str, str]
    members_of: dict[str, tuple[str, ...]]

    def canonical(self, entity_id: str) -> str:
        return self.canonical_of.get(entity_id, entity_id)

    def members(self, entity_id: str) -> tuple[str, ...]:
        """Every id of ``entity_id``'s entity, canonical first (just itself when alone)."""
        return self.members_of.get(self.canonical(entity_id), (entity_id,))

    def joined(self, a: str, b: str) -> bool:
        return self.canonical(a) == self.canonical(b)

    def matching(self, needle: str) -> list[str]:
        """Ids of a component of several that contain ``needle`` (lowercased)."""
        return sorted(e for e in self.canonical_of if needle in e.lower())


def active_decisions(decisions: Iterable[EntityDecision]) -> list[EntityDecision]:
    return [d for d in decisions if d.active]


def build(
    aliases: Sequence[tuple[str, str, str]],
    decisions: Sequence[EntityDecision],
    seen: set[str] | None = None,
) -> Resolution:
    """The resolution of ``aliases`` (``(alias, entity id, origin)``, what the reader's
    sources state) and the ``decisions`` recorded; a merge counts only when both its ids are
    in ``seen`` (None: every merge counts)."""
    active = active_decisions(decisions)
    splits = {frozenset((d.entity_a, d.entity_b)) for d in active if d.action == SPLIT}
    merges = [
        d
        for d in active
        if d.action == MERGE and (seen is None or {d.entity_a, d.entity_b} <= seen)
    ]
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    def union(a: str, b: str) -> None:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    named: set[str] = set()
    for alias, entity, _ in aliases:
        pair = frozenset((alias, entity))
        if len(pair) < 2 or pair in splits:
            continue
        union(alias, entity)
        named.add(entity)
    merged_away = {d.entity_a for d in merges}
    targets = {d.entity_b for d in merges}
    for d in merges:
        union(d.entity_a, d.entity_b)
    groups: dict[str, list[str]] = {}
    for entity in parent:
        groups.setdefault(find(entity), []).append(entity)

    def rank(entity: str) -> tuple[int, int, int, int, int, str]:
        kind, _, value = entity.partition(":")
        return (
            entity in merged_away,
            entity not in targets,
            _KIND_RANK.get(kind, len(_KIND_RANK)),
            entity not in named,
            -len(value.split()),
            entity,
        )

    canonical_of: dict[str, str] = {}
    members_of: dict[str, tuple[str, ...]] = {}
    for group in groups.values():
        ordered = tuple(sorted(group, key=rank))
        members_of[ordered[0]] = ordered
        for entity in ordered:
            canonical_of[entity] = ordered[0]
    return Resolution(canonical_of, members_of)
