"""Source names: what a new source may be called, and how a reference names a source.

A source's name is its scope (``slack:#eng``, ``mbox:personal``); its id is ``src_`` and the
first 16 hex digits of sha256(scope) (:func:`~stratamem.store.sources.source_id_for`). The two
never overlap: no name may look like an id, and a reference that looks like an id
(:func:`looks_like_id`) names a source by id alone, never by name, so that no name can stand
in for another source's id.

A new name (:func:`check_name`) is in NFC form (a door normalises what it is given first:
:func:`normal_name`), has no space at either end (refused, not trimmed: a name that lands
somewhere other than where it was asked to would surprise), no control character (C0, C1,
DEL, the Unicode line and paragraph separators), no invisible format character (the
bidirectional overrides and isolates, zero-width spaces and joiners: Unicode's ``Cf``) and no
space but U+0020 (whatever ``str.isprintable`` refuses), no
``.`` or ``..`` between slashes (a URL or a shell path would read ``bob/../memory`` as
``memory``), and at most :data:`MAX_NAME` characters.
Names stored before these rules are left as they are, and read as they are.

Two names are *too close* when they read alike: the same after NFKC and case folding
(:func:`name_key`: ``ｍｂｏｘ:personal``, ``MBOX:Personal`` and ``mbox:personal``). A store
refuses a new name too close to a source another writer created.

A principal's new sources live under its name (:func:`namespaced`): ``bob`` ingesting into
``mbox:personal`` makes ``bob/mbox:personal``, unless it may write an existing source of the
name asked, which is how the owner lends a name.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection

from stratamem.errors import InvalidArgument

MAX_NAME = 512

_ID = re.compile(r"src_[0-9a-fA-F]{16}")


def looks_like_id(ref: str) -> bool:
    """Whether ``ref`` has the form of a source id (``src_`` + 16 hex digits, any case)."""
    return _ID.fullmatch(ref) is not None


def names_source(ref: str, source_id: str, scope: str) -> bool:
    """Whether ``ref`` names the source of ``source_id`` and ``scope``: by id where it looks
    like one (and then only by id), by exact name otherwise."""
    return ref == source_id if looks_like_id(ref) else ref == scope


def normal_name(name: str) -> str:
    """``name`` in NFC form: what every write door does to a name it is given, before it
    looks the source up."""
    return unicodedata.normalize("NFC", name)


def check_name(name: str) -> str:
    """``name`` when it may name a new source, else :class:`InvalidArgument` (a
    ``ValueError``) naming the rule it breaks."""
    if not name:
        raise InvalidArgument("a source needs a name")
    if len(name) > MAX_NAME:
        raise InvalidArgument(
            f"source name {name[:40]!r}… is {len(name):,} characters long: at most {MAX_NAME}"
        )
    if name != name.strip():
        raise InvalidArgument(f"source name {name!r} begins or ends with a space: name it without")
    odd = next((c for c in name if not c.isprintable()), None)
    if odd is not None:
        # Python's notion of printable, as the access log's escaping uses: no control
        # character, no separator but the space, no invisible format character.
        what = {
            "Cf": "an invisible format character",
            "Zs": "a space other than U+0020",
            "Cn": "an unassigned character",
            "Co": "a private-use character",
        }.get(unicodedata.category(odd), "a control character")
        raise InvalidArgument(
            f"source name {name!r} holds {what} (U+{ord(odd):04X}): "
            "names are one line of text that reads as it is"
        )
    if any(part in (".", "..") for part in name.split("/")):
        raise InvalidArgument(
            f"source name {name!r} holds a '.' or '..' part between slashes: "
            "a path or URL would read it as another name"
        )
    if looks_like_id(name):
        raise InvalidArgument(
            f"source name {name!r} looks like a source id (src_ and 16 hex digits): a name may not"
        )
    if normal_name(name) != name:
        raise InvalidArgument(f"source name {name!r} is not in Unicode NFC form")
    return name


def name_key(name: str) -> str:
    """What two names that read alike share: NFKC, case folded, NFKC again."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def namespaced(writer: str, name: str) -> str:
    """``name`` in ``writer``'s namespace: ``writer/name`` (a name there already is kept)."""
    return name if name.startswith(f"{writer}/") else f"{writer}/{name}"


def placer(existing: Collection[str], writer: str | None) -> Callable[[str], str]:
    """Where a write asked of name ``x`` goes: ``x`` itself where ``existing`` (the names the
    writer may write) holds it, else its NFC form, put in ``writer``'s namespace (None: the
    owner's writes, which have none). A name no source may take is left as asked, for the
    store to refuse it with the rule it breaks."""

    def place(name: str) -> str:
        if name in existing:
            return name
        normal = normal_name(name)
        if writer is None or normal in existing:
            return normal
        try:
            check_name(normal)
        except InvalidArgument:
            return normal  # as asked, to be refused where the source would be made
        return namespaced(writer, normal)

    return place
