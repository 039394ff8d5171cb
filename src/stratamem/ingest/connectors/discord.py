"""Discord channels exported as JSON by DiscordChatExporter.

DiscordChatExporter writes one JSON document per channel: ``guild`` and ``channel`` objects,
then ``dateRange``, then a ``messages`` array and ``messageCount``. A path is one such file or a
folder of them (searched recursively; the ``*_Files`` asset folders are left alone). Each file
becomes one :class:`SourceStream`.

The stream's guild and channel are read from the first 16 KiB of the file, where
DiscordChatExporter writes them; the messages are only parsed when the records are iterated.
A file is one JSON document, so it is parsed whole: memory grows with the largest single file,
only one file is held at a time, and a file larger than ``ReadContext.max_item_bytes`` is
skipped and reported. Only regular files are opened. A file that cannot be read, or one
message that cannot (JSON nested too deeply, a field of the wrong type), is skipped and the
rest goes on; only a single file that is no export at all ends the ingest.

Message markup is made readable: ``<@id>`` and ``<@!id>`` become ``@nickname`` from the
message's ``mentions``, ``<#id>`` becomes ``#channel`` where the channel is one of the files
read, ``<:name:id>`` becomes ``:name:`` and ``<t:1710148502:f>`` a UTC time. A message
without words says what it carries: its embeds' titles and descriptions, else ``Attached:``
and its files' names and ``[sticker: Wave]`` for each sticker. System messages
(joins, pins, thread creation) are left out silently; broken JSON and malformed messages are
reported through :meth:`ReadContext.skip` (``message N`` counts from 1).

The channel's ``topic`` is the stream's ``structure`` (a fact about the channel, see
:mod:`stratamem.memory.structure_chat`), as of when the export saw it: its ``exportedAt``, else
its latest message when it runs up to the present; DiscordChatExporter writes no notice of a
topic change.

A message with ``isPinned`` true is tagged ``pinned``, and so is the chat window holding it: a
tier-0 item for search. A later export where it is no longer pinned takes the tag away.

A reply keeps the id it answers in ``reply_to``, and no thread: Discord shows a reply inline,
in the channel's flow (a thread is a channel of its own, exported to ``_threads/`` and read as
its own source), so replies are windowed with the messages around them. It also makes a
message's record depend on the message alone, not on which replies the same file holds, so
that exports split by date merge into what one export of the whole gives.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from stratamem.entities.aliases import Alias, profile_aliases
from stratamem.errors import SourceFormatError
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    describe_failure,
    from_epoch,
    open_regular,
    read_capped,
    utc_or_none,
    walk,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.memory.structure_chat import Setting
from stratamem.types import SourceKind

_HEAD_BYTES = 16_384
_HEADER_KEY = re.compile(r'"(guild|channel)"\s*:\s*')
_MARKUP = re.compile(
    r"<(?:@!?(?P<user>\d+)|#(?P<channel>\d+)|a?:(?P<emoji>\w+):\d+"
    r"|t:(?P<time>-?\d+)(?::[tTdDfFR])?)>"
)
# The tag of a pinned message's record, and so of the chat window holding it.
_PINNED = "pinned"
_URL = re.compile(r"https?://[^\s<>()]+[^\s<>().,;:!?'\"]")

# Message kinds that carry what someone wrote; the rest (GuildMemberJoin, ChannelPinnedMessage,
# ThreadCreated, RecipientAdd, Call, ...) are notices Discord generates.
_CONVERSATION_TYPES = frozenset(
    {"Default", "Reply", "ChatInputCommand", "ContextMenuCommand", "ApplicationCommand"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Header:
    file: Path
    guild: Mapping[str, Any]
    channel: Mapping[str, Any]

    @property
    def guild_name(self) -> str:
        return _str(self.guild.get("name")) or _str(self.guild.get("id")) or "unknown"

    @property
    def channel_name(self) -> str:
        return _str(self.channel.get("name")) or _str(self.channel.get("id")) or self.file.stem


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _shown(value: Any) -> str:
    """``repr`` of a value for a problem message, cut short."""
    if isinstance(value, list | dict):
        return f"<{type(value).__name__}>"
    text = repr(value[:81] if isinstance(value, str) else value)
    return text if len(text) <= 80 else text[:79] + "…"


def _head(path: Path) -> str:
    with open_regular(path) as f:
        return f.read(_HEAD_BYTES).decode("utf-8", errors="ignore")


def _looks_like_export(head: str, keys: tuple[str, ...] = ("guild", "channel", "messages")) -> bool:
    return all(f'"{key}"' in head for key in keys)


def _candidates(folder: Path) -> list[Path]:
    """The JSON files under ``folder``, outside DiscordChatExporter's ``*_Files`` asset folders."""
    found: list[Path] = []
    for top, folders, files in walk(folder):
        folders[:] = [name for name in folders if not name.endswith("_Files")]
        found.extend(Path(top, name) for name in files if name.endswith(".json"))
    return sorted(found)


def _is_export(path: Path) -> bool:
    try:
        return _looks_like_export(_head(path))
    except OSError:
        return False


def detect(path: Path) -> int:
    """90 for a DiscordChatExporter ``.json`` file; 85 for a folder holding one or more."""
    try:
        if path.is_file():
            return 90 if path.suffix.lower() == ".json" and _is_export(path) else 0
        if path.is_dir():
            return 85 if any(_is_export(p) for p in _candidates(path)) else 0
    except OSError:
        return 0
    return 0


def _header_from_head(path: Path, head: str) -> _Header | None:
    """Guild and channel decoded from the file's first bytes, or None if they are not there."""
    decoder = json.JSONDecoder()
    found: dict[str, Mapping[str, Any]] = {}
    for match in _HEADER_KEY.finditer(head):
        key = match.group(1)
        if key in found:
            continue
        try:
            value, _ = decoder.raw_decode(head, match.end())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            found[key] = value
    if "guild" in found and "channel" in found:
        return _Header(path, found["guild"], found["channel"])
    return None


def _load(path: Path, ctx: ReadContext) -> dict[str, Any] | None:
    """The whole document, or None after reporting why it cannot be read."""
    try:
        with open_regular(path) as f:
            data = read_capped(f, ctx.max_item_bytes)
            if data is None:
                ctx.skip(path, "file", ctx.size_reason(os.fstat(f.fileno()).st_size))
                return None
        doc = json.loads(data.decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        ctx.skip(path, f"line {exc.lineno} col {exc.colno}", f"invalid JSON: {exc.msg}")
        return None
    except UnicodeDecodeError as exc:
        ctx.skip(path, f"byte {exc.start}", f"not UTF-8 text: {exc.reason}")
        return None
    except OSError as exc:
        ctx.skip(path, "file", f"cannot be read: {exc.strerror or exc}")
        return None
    except Exception as exc:  # JSON nested too deeply, a number too long: this file only
        ctx.skip(path, "file", describe_failure(exc))
        return None
    if not isinstance(doc, dict):
        ctx.skip(path, "file", "not a DiscordChatExporter export: the top level is not an object")
        return None
    return doc


class DiscordConnector:
    """Reads DiscordChatExporter JSON exports into one chat stream per channel."""

    name: str = "discord"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        if path.is_dir():
            files = [p for p in _candidates(path) if self._check(p, ctx, strict=False)]
            if not files:
                raise SourceFormatError(
                    str(path), "", "no DiscordChatExporter JSON exports in this folder"
                )
        else:
            self._check(path, ctx, strict=True)
            files = [path]
        headers = [h for h in (self._header(p, ctx, strict=not path.is_dir()) for p in files) if h]
        channels = {_str(h.channel.get("id")): h.channel_name for h in headers}
        # The files of one channel (an export in parts, ``[part 2]``…, or taken twice) are
        # read one after another: one source, written together.
        by_channel: dict[str, list[_Header]] = {}
        for header in headers:
            by_channel.setdefault(_str(header.channel.get("id")) or str(header.file), []).append(
                header
            )
        for parts in by_channel.values():
            for header in parts:
                yield _stream(header, channels, ctx)

    @staticmethod
    def _check(path: Path, ctx: ReadContext, *, strict: bool) -> bool:
        """Whether ``path`` looks like an export; a single file that does not is an error."""
        try:
            # A long channel topic can push "messages" past the head; the records check it.
            ok = _looks_like_export(_head(path), ("guild", "channel"))
            problem = "not a DiscordChatExporter export (no guild and channel objects)"
        except OSError as exc:
            ok, problem = False, f"cannot be read: {exc}"
        if ok:
            return True
        if strict:
            raise SourceFormatError(str(path), "", problem)
        ctx.skip(path, "file", problem)
        return False

    @staticmethod
    def _header(path: Path, ctx: ReadContext, *, strict: bool) -> _Header | None:
        try:
            header = _header_from_head(path, _head(path))
        except OSError as exc:
            if strict:
                raise SourceFormatError(str(path), "", f"cannot be read: {exc}") from None
            ctx.skip(path, "file", f"cannot be read: {exc.strerror or exc}")
            return None
        if header is not None:
            return header
        # Cut off by the head (a very long topic, say): parse the whole file once to find out.
        doc = _load(path, ctx)
        if doc is None:
            return None
        guild, channel = doc.get("guild"), doc.get("channel")
        if isinstance(guild, dict) and isinstance(channel, dict):
            return _Header(path, guild, channel)
        problem = "not a DiscordChatExporter export: guild or channel is not an object"
        if strict:
            raise SourceFormatError(str(path), "", problem)
        ctx.skip(path, "file", problem)
        return None


def _stream(header: _Header, channels: Mapping[str, str], ctx: ReadContext) -> SourceStream:
    guild, channel = header.guild_name, header.channel_name
    as_of: list[datetime] = []  # when the export saw the channel as its header says
    people: dict[str, list[Alias]] = {}  # author id → who their author objects say they are
    return SourceStream(
        scope=ctx.scope_for(f"discord:{guild}/#{channel}", f"#{channel}"),
        kind=SourceKind.CHAT,
        platform="discord",
        location=str(header.file),
        records=_records(header, channels, ctx, as_of, people),
        title=f"#{channel}",
        meta={
            "guild": guild,
            "guild_id": _str(header.guild.get("id")) or None,
            "channel": channel,
            "channel_id": _str(header.channel.get("id")) or None,
            "channel_type": _str(header.channel.get("type")) or None,
            "category": _str(header.channel.get("category")) or None,
            "topic": _str(header.channel.get("topic")),
        },
        structure=lambda: [
            *(
                Setting("topic", render(_str(header.channel.get("topic")), {}, channels), at, True)
                for at in as_of[-1:]
            ),
            *(alias for person in sorted(people) for alias in people[person]),
        ],
    )


def _exported_at(doc: Mapping[str, Any], latest: datetime | None) -> datetime | None:
    """When the export saw its channel: its ``exportedAt``, else, for an export of the
    channel up to now (no ``dateRange.before``), its latest message; else unknown."""
    exported = _parse_time(doc.get("exportedAt"))
    if exported is not None:
        return exported
    span = doc.get("dateRange")
    if isinstance(span, dict) and span.get("before") is not None:
        return None
    return latest


def _records(
    header: _Header,
    channels: Mapping[str, str],
    ctx: ReadContext,
    as_of: list[datetime] | None = None,
    people: dict[str, list[Alias]] | None = None,
) -> Iterator[Record]:
    doc = _load(header.file, ctx)
    if doc is None:
        return
    messages = doc.get("messages")
    shape = {"exportedAt": doc.get("exportedAt"), "dateRange": doc.get("dateRange")}
    del doc  # the messages are all that is kept
    if not isinstance(messages, list):
        ctx.skip(header.file, "file", "not a DiscordChatExporter export: no messages array")
        return
    channel_id = _str(header.channel.get("id"))
    names: dict[str, str] = {}  # author id → display name, for mentions missing from the list
    latest: datetime | None = None
    for n, raw in enumerate(messages, 1):
        where = f"message {n}"
        if not isinstance(raw, dict):
            ctx.skip(header.file, where, "not a JSON object")
            continue
        when = _parse_time(raw.get("timestamp"))
        if when is not None and (latest is None or when > latest):
            latest = when
        record = None
        with ctx.item(header.file, where):
            record = _record(raw, where, header, channels, names, ctx)
            if people is not None and record is not None:
                _author_aliases(raw.get("author"), people)
            if record is not None and record.id is not None:
                record = dataclasses.replace(record, reply_to=_reply_to(raw, channel_id))
        if record is not None and record.id is not None:
            yield record
    seen = _exported_at(shape, latest)
    if as_of is not None and seen is not None:
        as_of.append(seen)


def _author_aliases(author: Any, people: dict[str, list[Alias]]) -> None:
    """What an author object says of who they are: the id, the user name and any earlier
    nickname name the person shown by this one's nickname (see entities.aliases)."""
    person_id, shown = _person(author)
    if not person_id or not shown or not isinstance(author, dict):
        return
    user_name = _str(author.get("name")).strip()
    found = people.setdefault(person_id, [])
    for alias in profile_aliases(
        "discord",
        person_id,
        shown,
        display=[user_name] if user_name else [],
        handles=[user_name] if user_name else [],
        origin="discord author",
    ):
        if alias not in found:
            found.append(alias)


def _reply_to(raw: Mapping[str, Any], channel_id: str) -> str | None:
    """The replied-to message id, when it is in this channel (crossposts point elsewhere)."""
    ref = raw.get("reference")
    if not isinstance(ref, dict):
        return None
    target, ref_channel = ref.get("messageId"), ref.get("channelId")
    if not isinstance(target, str) or not target:
        return None
    if isinstance(ref_channel, str) and ref_channel and channel_id and ref_channel != channel_id:
        return None
    return target


def _person(person: Any) -> tuple[str | None, str | None]:
    """``(id, display name)``: the server nickname, else the user name."""
    if not isinstance(person, dict):
        return None, None
    person_id = _str(person.get("id")) or None
    name = _str(person.get("nickname")).strip() or _str(person.get("name")).strip() or None
    return person_id, name


def _record(
    raw: Mapping[str, Any],
    where: str,
    header: _Header,
    channels: Mapping[str, str],
    names: dict[str, str],
    ctx: ReadContext,
) -> Record | None:
    kind = raw.get("type", "Default")
    if not isinstance(kind, str) or kind not in _CONVERSATION_TYPES:
        return None
    message_id = raw.get("id")
    if not isinstance(message_id, str | int) or isinstance(message_id, bool):
        ctx.skip(header.file, where, "no message id")
        return None
    message_id = str(message_id)
    ts = _parse_time(raw.get("timestamp"))
    if ts is None:
        ctx.skip(header.file, where, f"no valid timestamp: {_shown(raw.get('timestamp'))}")
        return None

    author_id, author = _person(raw.get("author"))
    author_raw = raw.get("author")
    is_bot = isinstance(author_raw, dict) and author_raw.get("isBot") is True
    if author_id and author:
        names[author_id] = author

    mentioned: dict[str, str] = {}
    mentions = raw.get("mentions")
    for person in mentions if isinstance(mentions, list) else []:
        person_id, name = _person(person)
        if person_id and name:
            mentioned[person_id] = name
    content = raw.get("content")
    text = render(content if isinstance(content, str) else "", {**names, **mentioned}, channels)
    attachments = _attachment_names(raw)
    if not text.strip():
        text = _embed_text(raw)
    if not text.strip():
        text = _bare_text(attachments, _sticker_names(raw))
    text = text.strip()
    if not text:
        return None

    edited_at = _parse_time(raw.get("timestampEdited"))
    pinned = raw.get("isPinned") is True
    return Record(
        text=text,
        ref=f"{header.file}#{message_id}",
        time=ts,
        author=author,
        author_id=author_id,
        id=message_id,
        mentions=tuple(dict.fromkeys(mentioned.values())),
        links=tuple(dict.fromkeys(_URL.findall(text))),
        # A pinned message is tier-0: its chat window carries the tag (see chunking).
        tags=(_PINNED,) if pinned else (),
        meta={
            "channel": header.channel_name,
            "guild": header.guild_name,
            "type": kind,
            "pinned": pinned,
            "edited": bool(raw.get("timestampEdited")),
            # When it was last edited: of two versions of a message, the later edit is kept.
            "edited_at": None if edited_at is None else edited_at.isoformat(),
            "bot": is_bot,
            "attachments": attachments,
            "reactions": _reactions(raw),
        },
    )


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return utc_or_none(datetime.fromisoformat(value))
    except ValueError:
        return None


def render(content: str, people: Mapping[str, str], channels: Mapping[str, str]) -> str:
    """Discord markup made readable; ``people`` and ``channels`` map ids to names."""

    def replace(match: re.Match[str]) -> str:
        if (user := match.group("user")) is not None:
            return f"@{people.get(user, user)}"
        if (channel := match.group("channel")) is not None:
            return f"#{channels.get(channel, channel)}"
        if (emoji := match.group("emoji")) is not None:
            return f":{emoji}:"
        try:
            when = from_epoch(int(match.group("time")))
        except (OverflowError, OSError, ValueError):
            return match.group(0)
        return when.strftime("%Y-%m-%d %H:%M UTC")

    return _MARKUP.sub(replace, content)


def _attachment_names(raw: Mapping[str, Any]) -> list[str]:
    attachments = raw.get("attachments")
    return [
        a["fileName"]
        for a in (attachments if isinstance(attachments, list) else [])
        if isinstance(a, dict) and isinstance(a.get("fileName"), str) and a["fileName"]
    ]


def _sticker_names(raw: Mapping[str, Any]) -> list[str]:
    """The names of a message's stickers (DiscordChatExporter: ``stickers: [{id, name,
    format, sourceUrl}]``), its id where a sticker has no name."""
    stickers = raw.get("stickers")
    names: list[str] = []
    for sticker in stickers if isinstance(stickers, list) else []:
        if isinstance(sticker, dict):
            name = _str(sticker.get("name")).strip() or _str(sticker.get("id")).strip()
            if name:
                names.append(name)
    return names


def _bare_text(attachments: list[str], stickers: list[str]) -> str:
    """The text of a message that says nothing in words: what it attaches, then its stickers
    (``[sticker: Wave]``), so that a sticker sent alone is still a message."""
    parts = ["Attached: " + ", ".join(attachments)] if attachments else []
    parts += [f"[sticker: {name}]" for name in stickers]
    return " ".join(parts)


def _embed_text(raw: Mapping[str, Any]) -> str:
    """What a message's embeds say (bots often post nothing else)."""
    embeds = raw.get("embeds")
    parts: list[str] = []
    for embed in embeds if isinstance(embeds, list) else []:
        if isinstance(embed, dict):
            parts += [
                v
                for v in (embed.get("title"), embed.get("description"))
                if isinstance(v, str) and v.strip()
            ]
    return "\n".join(parts)


def _reactions(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    reactions = raw.get("reactions")
    out = []
    for r in reactions if isinstance(reactions, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("emoji"), dict):
            continue
        emoji = r["emoji"]
        name = _str(emoji.get("code")) or _str(emoji.get("name"))
        if name:
            count = r.get("count")
            out.append({"name": name, "count": count if isinstance(count, int) else 0})
    return out


CONNECTOR = ConnectorSpec(
    "discord",
    DiscordConnector,
    detect,
    "DiscordChatExporter JSON export (a file or a folder of them): one stream per channel",
)
