"""Entity extraction at ingest: people, addresses, handles, channels, tags, links and topics,
and the user and agent whose memory a chunk is (``user:maya``, ``agent:planner``).

Canonical ids are ``kind:value`` with the value lowercased and trimmed of trailing punctuation
(``@Bob.`` → ``handle:bob``). Extraction is pattern-based and deterministic, so re-ingesting the
same text yields the same index rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Set

from stratamem.entities.stopwords import STOPWORDS
from stratamem.types import Identity, Mention, Record, SourceKind

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_HANDLE = re.compile(r"(?<![\w@.])@([A-Za-z][\w.-]{1,38})")
_HASHTAG = re.compile(r"(?<![\w#&/])#([A-Za-z][\w-]{1,49})")
# Written to begin with the letter and look back for the word boundary (the same matches as
# ``\b[a-z]…``), which the scan tries faster than a boundary at every position.
_LONG_WORD = re.compile(r"[a-z](?<=\b[a-z])[a-z0-9'+-]{3,}[a-z0-9+]")
# Runs of capitalised words. Written to begin with the capital rather than the word boundary
# (``\b(?:[A-Z][a-z]+|[A-Z]{2,}[a-z]*)…``, the same matches) so that the scan skips ahead to
# the next capital letter instead of trying every position.
_PROPER = re.compile(
    r"[A-Z](?<=\b[A-Z])(?:[a-z]+|[A-Z]+[a-z]*)(?:[ \t]+(?:[A-Z][a-z]+|[A-Z]{2,}))+\b"
)
# A product-style name (``PostgreSQL``, ``iPhone``): a whole word of ASCII letters with a
# capital after its first letter. Only words holding a capital after a letter are tried.
_CAMEL = re.compile(r"[A-Z]?[a-z]+[A-Z][A-Za-z]+|[A-Z][a-z]*[A-Z][A-Za-z]*")
_INNER_CAPITAL = re.compile(r"[A-Z](?<=[A-Za-z][A-Z])")
_WORD_REST = re.compile(r"\w*")
_LINK_TARGET = re.compile(r"\[\[([^\]\n]+)\]\]|\]\(([^)\s]+)\)")
_HEX_COLOUR = re.compile(r"[0-9a-fA-F]{3,8}")
_TRAILING = ".,;:!?)]}'\"-_"
_TOPICS_PER_CHUNK = 3


def canonical(kind: str, value: str) -> str:
    return f"{kind}:{' '.join(value.strip().strip(_TRAILING).lower().split())}"


class _Collector:
    def __init__(self) -> None:
        self.seen: dict[str, Mention | None] = {}

    def add(self, kind: str, value: str | None, surface: str | None = None) -> None:
        if not value:
            return
        entity_id = canonical(kind, value)
        if entity_id == f"{kind}:" or entity_id in self.seen:
            return
        self.seen[entity_id] = Mention(entity_id, kind, (surface or value).strip())

    def result(self) -> list[Mention]:
        return [m for m in self.seen.values() if m is not None]


def extract(
    content: str, records: Iterable[Record], *, scope: str, kind: SourceKind
) -> list[Mention]:
    """The entities of one chunk: from its records' structured fields, then from its text."""
    found, skip_words = record_mentions(content, records, scope=scope, kind=kind)
    found += topic_mentions(content, known=found, skip_words=skip_words)
    return found + text_mentions(
        content, skip_ids={m.entity_id for m in found}, skip_handles=skip_words
    )


def record_mentions(
    content: str, records: Iterable[Record], *, scope: str, kind: SourceKind
) -> tuple[list[Mention], frozenset[str]]:
    """Entities from structured fields (authors, recipients, mentions, tags, links).

    Also returns the lowercased words of resolved mention names: ``@Alice Chen`` in the text
    is that person, not a handle ``alice``.
    """
    out = _Collector()
    if kind is SourceKind.CHAT:
        out.add("channel", scope)
    # Every chunk of a user's or an agent's memory names them (``user:maya``), so that an
    # entity lookup or a topic query finds whose memory it is.
    # The id as the identity holds it (already canonical), not trimmed as a surface is.
    for part, value in Identity.parse(scope).parts():
        if part != "session":
            out.seen.setdefault(f"{part}:{value}", Mention(f"{part}:{value}", part, value))
    mention_words: set[str] = set()
    for record in records:
        _person_or_address(out, record.author, record.author_id)
        for recipient in record.recipients:
            _person_or_address(out, None, recipient)
        for name in record.mentions:
            out.add("person", name)
            mention_words.update(part.lower() for part in name.split())
        for tag in chunk_tags(content, record) if kind is SourceKind.DOCUMENT else record.tags:
            out.add("tag", tag.lstrip("#"))
        links = record.links
        if kind is SourceKind.DOCUMENT and len(links) > 8:
            # A long document's links belong to the chunk that holds them, not to every chunk.
            links = tuple(_links_in(content, links))
        for link in links:
            if _URL.match(link):
                out.add("url", _normal_url(link), link)
            else:
                out.add("note", link)
    return out.result(), frozenset(mention_words)


def text_mentions(
    content: str, *, skip_ids: Set[str] = frozenset(), skip_handles: Set[str] = frozenset()
) -> list[Mention]:
    """Entities found by pattern in the text: addresses, URLs, handles and hashtags."""
    out = _Collector()
    out.seen = dict.fromkeys(skip_ids)
    # The cheap substring tests skip most regex scans: most chunks hold no '@', '://' or '#'.
    if "@" in content:
        for match in _EMAIL.finditer(content):
            out.add("email", match.group(0))
        for match in _HANDLE.finditer(content):
            handle = match.group(1).rstrip(_TRAILING)
            if handle.lower() not in skip_handles:
                out.add("handle", handle, "@" + handle)
    if "://" in content:
        for match in _URL.finditer(content):
            out.add("url", _normal_url(match.group(0)), match.group(0))
    if "#" in content:
        for match in _HASHTAG.finditer(content):
            tag = match.group(1).rstrip(_TRAILING)
            if not _HEX_COLOUR.fullmatch(tag):
                out.add("tag", tag, "#" + tag)
    return [m for m in out.seen.values() if m is not None]


def topic_mentions(
    content: str, *, known: Iterable[Mention] = (), skip_words: Set[str] = frozenset()
) -> list[Mention]:
    """Topic keyphrases of the text, leaving out names already known as people or notes
    ("Alice Chen: …" chat lines repeat a name, which is not a topic)."""
    names = {m.entity_id.partition(":")[2] for m in known if m.kind in ("person", "note")}
    names |= {word for name in names for word in name.split()} | set(skip_words)
    return [
        Mention(canonical("topic", phrase), "topic", phrase)
        for phrase in topics(content)
        if phrase not in names
    ]


def _person_or_address(out: _Collector, name: str | None, address: str | None) -> None:
    if address and _EMAIL.fullmatch(address.strip()):
        out.add("email", address)
    if name and "@" in name and not _EMAIL.fullmatch(name.strip()):
        # "Carol Diaz <carol@acme.io>" (a note's author): the person and the address apart.
        found = _EMAIL.search(name)
        if found is not None:
            out.add("email", found.group(0))
            name = " ".join(
                (name[: found.start()] + " " + name[found.end() :]).strip(" <>()\"'").split()
            )
    if name and not _EMAIL.fullmatch(name.strip()):
        out.add("person", name)


def _links_in(content: str, links: tuple[str, ...]) -> list[str]:
    global _stem_cache
    if _stem_cache[0] is not links:
        by_stem: dict[str, list[str]] = {}
        for link in links:
            stem = link.rstrip("/").rsplit("/", 1)[-1].removesuffix(".md").lower()
            by_stem.setdefault(stem, []).append(link)
        _stem_cache = (links, by_stem)
    by_stem = _stem_cache[1]
    found: list[str] = []
    for match in _LINK_TARGET.finditer(content):
        target = match.group(1) or match.group(2)
        stem = target.split("|")[0].split("#")[0].rstrip("/").rsplit("/", 1)[-1]
        for link in by_stem.get(stem.removesuffix(".md").lower(), ()):
            if link not in found:
                found.append(link)
    return found


_stem_cache: tuple[tuple[str, ...] | None, dict[str, list[str]]] = (None, {})

# A document with more tags than this gives each chunk only its own (see chunk_tags).
_MANY_TAGS = 8


def chunk_tags(content: str, record: Record) -> tuple[str, ...]:
    """The tags of ``record`` that belong to the chunk ``content`` of it.

    A note with a handful of tags is about all of them, so every chunk keeps them all. A long
    note with many inline ``#tags`` is not: giving each of its chunks every tag would cost
    tags × chunks entity rows, quadratic in the note's length. Such a chunk keeps the tags
    written in it, and the tags written nowhere in the note's text (front matter), which
    describe the whole note.
    """
    tags = record.tags
    if len(tags) <= _MANY_TAGS:
        return tags
    global _tag_cache
    if _tag_cache[0] is not record:
        by_key = {_tag_key(tag): tag for tag in tags}
        written = {_tag_key(m.group(1)) for m in _HASHTAG.finditer(record.text)}
        _tag_cache = (record, tuple(t for t in tags if _tag_key(t) not in written), by_key)
    _, floating, by_key = _tag_cache
    found = dict.fromkeys(floating)
    if "#" in content:
        for match in _HASHTAG.finditer(content):
            tag = by_key.get(_tag_key(match.group(1)))
            if tag is not None:
                found.setdefault(tag)
    return tuple(found)


def _tag_key(tag: str) -> str:
    return tag.lstrip("#").rstrip(_TRAILING).lower()


_tag_cache: tuple[Record | None, tuple[str, ...], dict[str, str]] = (None, (), {})


def _normal_url(url: str) -> str:
    url = url.rstrip(_TRAILING)
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}".rstrip("/")


def topics(text: str, limit: int = _TOPICS_PER_CHUNK) -> list[str]:
    """Up to ``limit`` keyphrases: proper-noun phrases, product-style names, repeated terms.

    A phrase scores its frequency times its length in words; ties break alphabetically so the
    result is deterministic.
    """
    scores: Counter[str] = Counter()
    for match in _PROPER.finditer(text):
        words = match.group(0).split()
        while words and words[0].lower() in STOPWORDS:
            words = words[1:]
        if len(words) >= 2:
            phrase = " ".join(words[:3]).lower()
            scores[phrase] += len(words[:3])
    for word in _camel_words(text):
        if len(word) >= 4:
            scores[word.lower()] += 2
    for word, count in Counter(_LONG_WORD.findall(text.lower())).items():
        if count >= 2 and word not in STOPWORDS:
            scores[word] += count
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [phrase for phrase, score in ranked[:limit] if score >= 2]


def _camel_words(text: str) -> list[str]:
    """The words ``\\b(?:[A-Z]?[a-z]+[A-Z][A-Za-z]+|[A-Z][a-z]*[A-Z][A-Za-z]*)\\b`` finds.

    Such a match is a whole word (a run of ``\\w``, bounded on both sides) with a capital
    after a letter, so only the words around such capitals are tried.
    """
    found: list[str] = []
    end = 0
    for capital in _INNER_CAPITAL.finditer(text):
        at = capital.start()
        if at < end:  # in the word just tried
            continue
        start = at - 1
        while start and ((c := text[start - 1]).isalnum() or c == "_"):  # \w, as re has it
            start -= 1
        rest = _WORD_REST.match(text, at)
        end = at if rest is None else rest.end()
        word = text[start:end]
        if _CAMEL.fullmatch(word):
            found.append(word)
    return found
