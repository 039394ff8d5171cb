"""What sources state about who is who: alias statements read at ingest.

An :class:`Alias` says that two canonical ids name one entity: ``alias`` is another name of
``entity_id`` (the fuller, more canonical one), and ``origin`` says where the source said so.
They are stored per source (``entity_aliases``) and followed at read time by
:mod:`stratamem.store.resolution`. Only what a source itself states is taken, never a guess
from similar names:

=====================  ==============================================================
source                 statements
=====================  ==============================================================
any record             its author's address (``email:``) or platform id
                       (``account:<platform>:<id>``) → ``person:<author name>``
Slack ``users.json``   display name, user name (``handle:``), email and user id
                       → ``person:<real name>``
Discord author         user name (``person:``, ``handle:``) and id → ``person:<nickname>``
note front matter      ``author: Name <address>`` → the address to the name; a link to a
                       name a people field states (``attendees``, ``author``,
                       ``proposed_by``…) → that person; a person's
                       note (tagged ``people``/``person``, or in a ``people/`` folder):
                       its link names (``note:``), ``aliases`` and ``email`` → its title
=====================  ==============================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any

from stratamem.entities.extract import canonical
from stratamem.types import Record

_EMAIL = re.compile(r"[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
PERSON_TAGS = frozenset({"people", "person", "persons", "contact", "contacts"})
PERSON_FOLDERS = frozenset({"people", "persons", "contacts"})
PERSON_FIELDS = (
    "author",
    "authors",
    "attendees",
    "participants",
    "owner",
    "owners",
    "assignee",
    "assignees",
    "reviewers",
    "proposed_by",
    "approved_by",
)


@dataclass(frozen=True, slots=True)
class Alias:
    """``alias`` names the same entity as ``entity_id``; ``origin`` says who said so."""

    alias: str
    entity_id: str
    origin: str

    def row(self) -> tuple[str, str, str]:
        return (self.alias, self.entity_id, self.origin)


def name_and_address(text: str | None) -> tuple[str, str]:
    """``("Carol Diaz", "carol@acme.io")`` from ``Carol Diaz <carol@acme.io>``, ``Carol Diaz
    carol@acme.io`` or ``carol@acme.io (Carol Diaz)``; either may be empty."""
    if not text or not text.strip():
        return "", ""
    text = text.strip()
    found = _EMAIL.search(text)
    if found is None:
        return text, ""
    name, address = parseaddr(text)
    if not _EMAIL.fullmatch(address or ""):
        address = found.group(0)
        name = text[: found.start()] + " " + text[found.end() :]
    name = " ".join(name.replace("<", " ").replace(">", " ").strip("\"'() ").split())
    if _EMAIL.fullmatch(name) or name.lower() == address.lower():
        name = ""
    return name, address.lower()


def person(name: str) -> str:
    return canonical("person", name)


def record_aliases(record: Record, platform: str) -> list[Alias]:
    """What one record says of its author: the address or the platform id it wrote from
    names the person it is shown as."""
    name, address = name_and_address(record.author)
    if not name:
        return []
    out = []
    if address:
        out.append(Alias(f"email:{address}", person(name), f"{platform} author"))
    author_id = (record.author_id or "").strip()
    if author_id and author_id.lower() != name.lower():
        if _EMAIL.fullmatch(author_id):
            out.append(Alias(f"email:{author_id.lower()}", person(name), f"{platform} author"))
        else:
            out.append(Alias(account(platform, author_id), person(name), f"{platform} author"))
    return out


def account(platform: str, user_id: str) -> str:
    return canonical("account", f"{platform}:{user_id}")


def profile_aliases(
    platform: str,
    user_id: str,
    name: str,
    *,
    display: Iterable[str] = (),
    handles: Iterable[str] = (),
    emails: Iterable[str] = (),
    origin: str,
) -> list[Alias]:
    """What a platform's profile of one user says: its id, display names, user names and
    addresses all name ``person:<name>``."""
    target = person(name)
    out = [Alias(account(platform, user_id), target, origin)] if user_id else []
    out += [Alias(person(d), target, origin) for d in display if d.strip()]
    out += [Alias(canonical("handle", h.lstrip("@")), target, origin) for h in handles if h]
    out += [Alias(f"email:{e.strip().lower()}", target, origin) for e in emails if e.strip()]
    return [a for a in out if a.alias != a.entity_id and not a.alias.endswith(":")]


def note_aliases(record: Record) -> list[Alias]:
    """What a note's front matter says: its author's address names its author, and a
    person's note (tagged as one, or in a ``people/`` folder) names that person by its
    title, its file name and path (what a ``[[link]]`` to it becomes), its ``aliases`` and
    its ``email``."""
    front = record.meta.get("front_matter")
    if not isinstance(front, Mapping):
        return []
    out: list[Alias] = []
    for author in _strings(front.get("author")) + _strings(front.get("authors")):
        name, address = name_and_address(author)
        if name and address:
            out.append(Alias(f"email:{address}", person(name), "front matter author"))
    # Front matter fields whose values are people: each names ``person:<value>``, and a
    # ``[[link]]`` to that name (``note:<value>``) means that person.
    for key in PERSON_FIELDS:
        for value in _strings(front.get(key)):
            name, address = name_and_address(value)
            if name:
                out.append(Alias(canonical("note", name), person(name), "front matter people"))
    title = (record.title or "").strip()
    doc = (record.doc or "").replace("\\", "/")
    folders = {part.lower() for part in doc.split("/")[:-1]}
    tags = {t.lstrip("#").lower() for t in record.tags}
    if not title or not (tags & PERSON_TAGS or folders & PERSON_FOLDERS):
        return out
    target = person(title)
    origin = "person note"
    path = doc.rsplit(".", 1)[0] if doc.lower().endswith((".md", ".markdown", ".txt")) else doc
    for link in sorted({path, path.rsplit("/", 1)[-1], title}):
        if link:
            out.append(Alias(canonical("note", link), target, origin))
    # What the note's front matter states is said of ``topic:<title>`` (memory.structure).
    out.append(Alias(canonical("topic", title), target, origin))
    for other in _strings(front.get("aliases")) + _strings(front.get("alias")):
        out.append(Alias(person(other), target, origin))
    for email in _strings(front.get("email")) + _strings(front.get("emails")):
        _, address = name_and_address(email)
        if address:
            out.append(Alias(f"email:{address}", target, origin))
    return [a for a in out if a.alias != a.entity_id]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list | tuple):
        return [str(v) for v in value if isinstance(v, str | int) and str(v).strip()]
    return []
