"""Entity extraction at ingest: people, addresses, handles, channels, tags, links and topics.

Canonical ids are ``kind:value`` with the value lowercased and trimmed of trailing punctuation
(``@Bob.`` → ``handle:bob``). Extraction is pattern-based and deterministic, so re-ingesting the
same text yields the same index rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from stratamem.entities.stopwords import STOPWORDS
from stratamem.ingest.model import Record
from stratamem.types import Mention, SourceKind

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_HANDLE = re.compile(r"(?<![\w@.])@([A-Za-z][\w.-]{1,38})")
_HASHTAG = re.compile(r"(?<![\w#&/])#([A-Za-z][\w-]{1,49})")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'+-]*[A-Za-z0-9+]|[A-Za-z]")
_PROPER = re.compile(r"\b(?:[A-Z][a-z]+|[A-Z]{2,}[a-z]*)(?:[ \t]+(?:[A-Z][a-z]+|[A-Z]{2,}))+\b")
_CAMEL = re.compile(r"\b[A-Z]?[a-z]+[A-Z][A-Za-z]+\b|\b[A-Z][a-z]*[A-Z][A-Za-z]*\b")
_HEX_COLOUR = re.compile(r"[0-9a-fA-F]{3,8}")
_TRAILING = ".,;:!?)]}'\"-_"
_TOPICS_PER_CHUNK = 3


def canonical(kind: str, value: str) -> str:
    return f"{kind}:{' '.join(value.strip().strip(_TRAILING).lower().split())}"


class _Collector:
    def __init__(self) -> None:
        self.seen: dict[str, Mention] = {}

    def add(self, kind: str, value: str | None, surface: str | None = None) -> None:
        if not value:
            return
        entity_id = canonical(kind, value)
        if entity_id == f"{kind}:" or entity_id in self.seen:
            return
        self.seen[entity_id] = Mention(entity_id, kind, (surface or value).strip())

    def result(self) -> list[Mention]:
        return list(self.seen.values())


def extract(
    content: str, records: Iterable[Record], *, scope: str, kind: SourceKind
) -> list[Mention]:
    """The entities of one chunk: from its records' structured fields, then from its text."""
    out = _Collector()
    if kind is SourceKind.CHAT:
        out.add("channel", scope)
    mention_words: set[str] = set()
    for record in records:
        _person_or_address(out, record.author, record.author_id)
        for recipient in record.recipients:
            _person_or_address(out, None, recipient)
        for name in record.mentions:
            out.add("person", name)
            mention_words.update(part.lower() for part in name.split())
        for tag in record.tags:
            out.add("tag", tag.lstrip("#"))
        for link in record.links:
            if _URL.match(link):
                out.add("url", _normal_url(link), link)
            else:
                out.add("note", link)
    for match in _EMAIL.finditer(content):
        out.add("email", match.group(0))
    for match in _URL.finditer(content):
        out.add("url", _normal_url(match.group(0)), match.group(0))
    for match in _HANDLE.finditer(content):
        handle = match.group(1).rstrip(_TRAILING)
        if handle.lower() not in mention_words:
            out.add("handle", handle, "@" + handle)
    if kind is not SourceKind.DOCUMENT or "#" in content:
        for match in _HASHTAG.finditer(content):
            tag = match.group(1).rstrip(_TRAILING)
            if not _HEX_COLOUR.fullmatch(tag):
                out.add("tag", tag, "#" + tag)
    for phrase in topics(content):
        out.add("topic", phrase)
    return out.result()


def _person_or_address(out: _Collector, name: str | None, address: str | None) -> None:
    if address and _EMAIL.fullmatch(address.strip()):
        out.add("email", address)
    if name and not _EMAIL.fullmatch(name.strip()):
        out.add("person", name)


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
    for match in _CAMEL.finditer(text):
        word = match.group(0)
        if len(word) >= 4:
            scores[word.lower()] += 2
    counts = Counter(
        w.lower() for w in _WORD.findall(text) if len(w) >= 5 and w.lower() not in STOPWORDS
    )
    for word, count in counts.items():
        if count >= 2:
            scores[word] += count
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [phrase for phrase, score in ranked[:limit] if score >= 2]
