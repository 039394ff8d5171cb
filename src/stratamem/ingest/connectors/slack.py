"""Slack workspace exports, as a ``.zip`` or an unpacked folder.

An export holds ``users.json``, ``channels.json`` (and, for fuller exports, ``groups.json``,
``mpims.json`` and ``dms.json``) beside one folder per conversation, which holds one JSON file
per day (``2024-03-11.json``): an array of message objects. Every conversation becomes one
:class:`SourceStream`; its records are read one day file at a time, and a zip is read in place,
never extracted.

Message markup is made readable: ``<@U123>`` becomes ``@Real Name``, ``<#C123|eng>`` becomes
``#eng``, ``<https://x|label>`` becomes ``label (https://x)``, ``<!here>`` becomes ``@here``,
and ``&amp; &lt; &gt;`` are unescaped. Join/leave/topic notices and deleted messages are left
out silently; a broken day file or a message that is not an object is reported through
:meth:`ReadContext.skip` (``message N`` counts from 1) and the rest is read.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from stratamem.errors import SourceFormatError
from stratamem.ingest.model import ReadContext, Record, SourceStream, from_epoch
from stratamem.ingest.registry import register
from stratamem.types import SourceKind

_DAY_FILE = re.compile(r"\d{4}-\d{2}-\d{2}\.json")
_MARKERS = ("channels.json", "users.json")
_TS = re.compile(r"(\d+)(?:\.(\d{1,6}))?")
_MARKUP = re.compile(r"<([^<>]+)>")
_DELETED_TEXT = "This message was deleted."

# The conversation lists of an export, and what each kind of entry is called in stream meta.
_LISTS = (
    ("channels.json", "channel"),
    ("groups.json", "private"),
    ("mpims.json", "mpim"),
    ("dms.json", "dm"),
)

# Notices Slack writes into the history; they carry no conversation.
_SYSTEM_SUBTYPES = frozenset(
    {
        "bot_add",
        "bot_disable",
        "bot_enable",
        "bot_remove",
        "channel_archive",
        "channel_canvas_updated",
        "channel_convert_to_private",
        "channel_convert_to_public",
        "channel_join",
        "channel_leave",
        "channel_name",
        "channel_posting_permissions",
        "channel_purpose",
        "channel_topic",
        "channel_unarchive",
        "ekm_access_denied",
        "group_archive",
        "group_join",
        "group_leave",
        "group_name",
        "group_purpose",
        "group_topic",
        "group_unarchive",
        "message_replied",
        "pinned_item",
        "reminder_add",
        "sh_room_created",
        "unpinned_item",
    }
)
_DELETED_SUBTYPES = frozenset({"message_deleted", "tombstone"})


@dataclass(frozen=True, slots=True)
class _Conversation:
    folder: str
    name: str
    kind: str
    id: str | None = None
    topic: str = ""
    purpose: str = ""
    members: tuple[str, ...] = ()


class _Tree:
    """The files of an export, by path relative to its root, read from a folder or a zip.

    Only the top-level JSON files and the day files one folder down are listed.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.is_zip = path.is_file()
        self.prefix = ""
        if self.is_zip:
            try:
                with zipfile.ZipFile(path) as zf:
                    members = [n for n in zf.namelist() if not n.endswith("/")]
            except (zipfile.BadZipFile, OSError) as exc:
                raise SourceFormatError(str(path), "", f"not a valid zip file: {exc}") from None
            self.prefix = _zip_root(members)
            self.names = _listing(
                n[len(self.prefix) :] for n in members if n.startswith(self.prefix)
            )
        else:
            try:
                self.names = _folder_listing(path)
            except OSError as exc:
                raise SourceFormatError(str(path), "", f"cannot be read: {exc}") from None

    def label(self, name: str) -> str:
        """How a file is named in refs and problems: the export path, then the file in it."""
        if self.is_zip:
            return f"{self.path}/{self.prefix}{name}"
        return str(self.path / name)

    @contextmanager
    def opener(self) -> Iterator[Callable[[str], bytes]]:
        if not self.is_zip:
            yield lambda name: (self.path / name).read_bytes()
            return
        with zipfile.ZipFile(self.path) as zf:
            yield lambda name: zf.read(self.prefix + name)


def _listing(names: Iterable[str]) -> list[str]:
    kept = []
    for name in names:
        parts = PurePosixPath(name).parts
        top_level_json = len(parts) == 1 and parts[0].endswith(".json")
        if top_level_json or (len(parts) == 2 and _DAY_FILE.fullmatch(parts[1])):
            kept.append(name)
    return sorted(kept)


def _folder_listing(root: Path) -> list[str]:
    names: list[str] = []
    for entry in root.iterdir():
        if entry.is_dir():
            names.extend(f"{entry.name}/{day.name}" for day in entry.iterdir() if day.is_file())
        elif entry.is_file():
            names.append(entry.name)
    return _listing(names)


def _zip_root(members: list[str]) -> str:
    """The folder inside the zip that holds the export; ``""`` when it is the zip's top."""
    members = [n for n in members if not n.startswith("__MACOSX/")]
    markers = [n for n in members if PurePosixPath(n).name in _MARKERS]
    if not markers:
        markers = [
            str(PurePosixPath(n).parent)
            for n in members
            if _DAY_FILE.fullmatch(PurePosixPath(n).name) and "/" in n
        ]
    if not markers:
        return ""
    first = min(markers, key=lambda n: (n.count("/"), n))
    parent = str(PurePosixPath(first).parent)
    return "" if parent == "." else parent + "/"


def _has_export(names: list[str]) -> bool:
    has_marker = any(n in _MARKERS for n in names)
    return has_marker and any("/" in n for n in names)


def detect(path: Path) -> int:
    """95 for a folder or zip holding ``channels.json`` or ``users.json`` and day files."""
    try:
        if path.is_dir():
            names = _folder_listing(path)
        elif path.suffix.lower() == ".zip" and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                members = [n for n in zf.namelist() if not n.endswith("/")]
            prefix = _zip_root(members)
            names = _listing(n[len(prefix) :] for n in members if n.startswith(prefix))
        else:
            return 0
    except (OSError, zipfile.BadZipFile):
        return 0
    return 95 if _has_export(names) else 0


class SlackConnector:
    """Reads a Slack export into one chat stream per channel, private channel or DM."""

    name: str = "slack"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        tree = _Tree(path)
        with tree.opener() as read:
            users = _load_users(tree, read, ctx)
            conversations = _load_conversations(tree, read, ctx)
        channel_names = {c.id: c.name for c in conversations if c.id and c.kind != "dm"}

        days: dict[str, list[str]] = {}
        for name in tree.names:
            folder, _, day = name.partition("/")
            if day:
                days.setdefault(folder, []).append(day)

        known = {c.folder for c in conversations}
        inferred = [_Conversation(f, f, "channel") for f in sorted(days) if f not in known]
        for conv in [*conversations, *inferred]:
            if conv.folder not in days:
                continue
            yield _stream(tree, conv, sorted(days[conv.folder]), users, channel_names, ctx)


def _stream(
    tree: _Tree,
    conv: _Conversation,
    days: list[str],
    users: Mapping[str, str],
    channels: Mapping[str, str],
    ctx: ReadContext,
) -> SourceStream:
    member_names = [users.get(m, m) for m in conv.members]
    if conv.kind in ("dm", "mpim"):
        scope = ctx.scope_for(f"slack:dm:{conv.name}", f"dm:{conv.name}")
        title = "DM: " + ", ".join(member_names) if member_names else conv.name
    else:
        scope = ctx.scope_for(f"slack:#{conv.name}", f"#{conv.name}")
        title = f"#{conv.name}"
    return SourceStream(
        scope=scope,
        kind=SourceKind.CHAT,
        platform="slack",
        location=tree.label(conv.folder),
        records=_records(tree, conv, days, users, channels, ctx),
        title=title,
        meta={
            "channel_id": conv.id,
            "channel": conv.name,
            "type": conv.kind,
            "topic": conv.topic,
            "purpose": conv.purpose,
            "members": list(conv.members),
            "member_names": member_names,
        },
    )


def _load_json(
    tree: _Tree, read: Callable[[str], bytes], name: str, ctx: ReadContext
) -> tuple[bool, Any]:
    """``(True, data)``, or ``(False, None)`` after reporting a file that cannot be parsed."""
    label = tree.label(name)
    try:
        return True, json.loads(read(name))
    except json.JSONDecodeError as exc:
        ctx.skip(label, f"line {exc.lineno} col {exc.colno}", f"invalid JSON: {exc.msg}")
    except UnicodeDecodeError as exc:
        ctx.skip(label, "", f"not UTF-8 text: {exc.reason}")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        ctx.skip(label, "", f"cannot be read: {exc}")
    return False, None


def _load_users(tree: _Tree, read: Callable[[str], bytes], ctx: ReadContext) -> dict[str, str]:
    if "users.json" not in tree.names:
        ctx.skip(str(tree.path), "users.json", "missing; user ids are not resolved to names")
        return {}
    ok, data = _load_json(tree, read, "users.json", ctx)
    if not ok:
        return {}
    if not isinstance(data, list):
        ctx.skip(tree.label("users.json"), "", "expected a JSON array of users")
        return {}
    users = {}
    for user in data:
        if isinstance(user, dict) and isinstance(user.get("id"), str):
            name = _person_name(user)
            if name:
                users[user["id"]] = name
    return users


def _person_name(user: Mapping[str, Any]) -> str | None:
    profile = user.get("profile")
    candidates = [
        profile.get("real_name") if isinstance(profile, dict) else None,
        user.get("real_name"),
        user.get("name"),
    ]
    return next((c for c in candidates if isinstance(c, str) and c.strip()), None)


def _load_conversations(
    tree: _Tree, read: Callable[[str], bytes], ctx: ReadContext
) -> list[_Conversation]:
    """The conversations the export lists; an absent list is inferred from the folders."""
    found: list[_Conversation] = []
    for list_name, kind in _LISTS:
        if list_name not in tree.names:
            continue
        ok, data = _load_json(tree, read, list_name, ctx)
        if not ok:
            continue
        if not isinstance(data, list):
            ctx.skip(tree.label(list_name), "", "expected a JSON array of conversations")
            continue
        for n, entry in enumerate(data, 1):
            conv = _conversation(entry, kind)
            if conv is None:
                ctx.skip(tree.label(list_name), f"entry {n}", "no id or name")
            else:
                found.append(conv)
    return found


def _conversation(entry: Any, kind: str) -> _Conversation | None:
    if not isinstance(entry, dict):
        return None
    conv_id = entry.get("id") if isinstance(entry.get("id"), str) else None
    name = entry.get("name")
    if kind == "dm":
        name = conv_id  # a DM's folder is named by its id
    if not isinstance(name, str) or not name:
        return None
    members = entry.get("members")
    members = members if isinstance(members, list) else []
    return _Conversation(
        folder=name,
        name=name,
        kind=kind,
        id=conv_id,
        topic=_text_field(entry.get("topic")),
        purpose=_text_field(entry.get("purpose")),
        members=tuple(m for m in members if isinstance(m, str)),
    )


def _text_field(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("value")
    return value if isinstance(value, str) else ""


def _records(
    tree: _Tree,
    conv: _Conversation,
    days: list[str],
    users: Mapping[str, str],
    channels: Mapping[str, str],
    ctx: ReadContext,
) -> Iterator[Record]:
    with tree.opener() as read:
        for day in days:
            name = f"{conv.folder}/{day}"
            label = tree.label(name)
            ok, data = _load_json(tree, read, name, ctx)
            if not ok:
                continue
            if not isinstance(data, list):
                ctx.skip(label, "", "expected a JSON array of messages")
                continue
            kept: list[tuple[tuple[int, int], Record]] = []
            for n, raw in enumerate(data, 1):
                if not isinstance(raw, dict):
                    ctx.skip(label, f"message {n}", "not a JSON object")
                    continue
                item = _record(raw, f"message {n}", label, conv, users, channels, ctx)
                if item is not None:
                    kept.append(item)
            kept.sort(key=lambda pair: pair[0])
            yield from (record for _, record in kept)


def _record(
    raw: dict[str, Any],
    where: str,
    label: str,
    conv: _Conversation,
    users: Mapping[str, str],
    channels: Mapping[str, str],
    ctx: ReadContext,
) -> tuple[tuple[int, int], Record] | None:
    subtype = raw.get("subtype")
    edited = "edited" in raw
    if subtype == "message_changed":
        inner = raw.get("message")
        if not isinstance(inner, dict):
            ctx.skip(label, where, "message_changed without the changed message")
            return None
        raw, subtype, edited = inner, inner.get("subtype"), True
    if subtype in _DELETED_SUBTYPES or subtype in _SYSTEM_SUBTYPES:
        return None
    raw_text = raw.get("text")
    raw_text = raw_text if isinstance(raw_text, str) else ""
    if raw_text.strip() == _DELETED_TEXT:
        return None

    ts_raw = raw.get("ts")
    parsed = _parse_ts(ts_raw)
    if parsed is None:
        ctx.skip(label, where, f"no valid ts: {ts_raw!r}")
        return None
    ts, key = parsed
    ts_id = ts_raw if isinstance(ts_raw, str) else f"{key[0]}.{key[1]:06d}"

    text, mentions, links = render(raw_text, users, channels)
    if not text.strip():
        text, mentions, links = render(_attachment_text(raw), users, channels)
    files = _files(raw)
    if not text.strip() and files:
        text = _files_text(files)
    text = text.strip()
    if not text:
        return None

    user = raw.get("user") if isinstance(raw.get("user"), str) else None
    bot_id = raw.get("bot_id") if isinstance(raw.get("bot_id"), str) else None
    is_bot = subtype == "bot_message" or bot_id is not None
    thread_ts = raw.get("thread_ts") if isinstance(raw.get("thread_ts"), str) else None
    return key, Record(
        text=text,
        ref=f"{label}#{ts_id}",
        ts=ts,
        author=_author(raw, user, is_bot, users),
        author_id=user or bot_id,
        id=ts_id,
        thread=thread_ts,
        reply_to=thread_ts if thread_ts and thread_ts != ts_id else None,
        mentions=mentions,
        links=links,
        meta={
            "channel": conv.name,
            "edited": edited,
            "files": [name for name, _ in files],
            "reactions": _reactions(raw),
            "subtype": subtype if isinstance(subtype, str) else None,
            "bot": is_bot,
        },
    )


def _parse_ts(value: Any) -> tuple[datetime, tuple[int, int]] | None:
    """Slack's ``"1710148502.123459"`` as an exact UTC time and a sort key."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value:.6f}"
    if not isinstance(value, str):
        return None
    match = _TS.fullmatch(value)
    if match is None:
        return None
    seconds = int(match.group(1))
    micros = int((match.group(2) or "").ljust(6, "0"))
    try:
        return from_epoch(seconds) + timedelta(microseconds=micros), (seconds, micros)
    except (OverflowError, OSError, ValueError):
        return None


def _author(
    raw: Mapping[str, Any], user: str | None, is_bot: bool, users: Mapping[str, str]
) -> str | None:
    candidates: list[Any] = []
    if is_bot:
        bot = raw.get("bot_profile")
        candidates += [raw.get("username"), bot.get("name") if isinstance(bot, dict) else None]
    # users.json first: one name per person across the whole export, even after a rename.
    if user is not None:
        candidates.append(users.get(user))
    profile = raw.get("user_profile")
    if isinstance(profile, dict):
        candidates += [profile.get("real_name"), profile.get("display_name"), profile.get("name")]
    candidates += [user, raw.get("bot_id")]
    return next((c for c in candidates if isinstance(c, str) and c.strip()), None)


def _attachment_text(raw: Mapping[str, Any]) -> str:
    """What a bot's message attachments say, for messages whose ``text`` is empty."""
    parts: list[str] = []
    attachments = raw.get("attachments")
    for att in attachments if isinstance(attachments, list) else []:
        if not isinstance(att, dict):
            continue
        fields = [att.get(k) for k in ("pretext", "title", "text")]
        own = [p for p in fields if isinstance(p, str) and p.strip()]
        fallback = att.get("fallback")
        if not own and isinstance(fallback, str):
            own = [fallback]
        parts.extend(own)
    return "\n".join(parts)


def _files(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(name, title)`` of each file shared with the message; deleted files have neither."""
    files = raw.get("files")
    found = []
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict):
            continue
        name, title = f.get("name"), f.get("title")
        name = name.strip() if isinstance(name, str) else ""
        title = title.strip() if isinstance(title, str) else ""
        if name or title:
            found.append((name or title, title or name))
    return found


def _files_text(files: list[tuple[str, str]]) -> str:
    shown = [title if title == name else f"{title} ({name})" for name, title in files]
    return "Shared file: " + "; ".join(shown)


def _reactions(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    reactions = raw.get("reactions")
    out = []
    for r in reactions if isinstance(reactions, list) else []:
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            users = r.get("users")
            out.append(
                {
                    "name": r["name"],
                    "count": r.get("count", len(users) if isinstance(users, list) else 0),
                    "users": list(users) if isinstance(users, list) else [],
                }
            )
    return out


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def render(
    text: str, users: Mapping[str, str], channels: Mapping[str, str]
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Slack markup made readable: ``(text, mentioned user names, link URLs)``.

    Slack escapes ``& < >`` in message text, so every ``<…>`` is markup; the entities are
    unescaped only after the markup is replaced.
    """
    out: list[str] = []
    mentions: list[str] = []
    links: list[str] = []
    pos = 0
    for match in _MARKUP.finditer(text):
        out.append(_unescape(text[pos : match.start()]))
        out.append(_token(match.group(1), users, channels, mentions, links))
        pos = match.end()
    out.append(_unescape(text[pos:]))
    return "".join(out), tuple(dict.fromkeys(mentions)), tuple(dict.fromkeys(links))


def _token(
    body: str,
    users: Mapping[str, str],
    channels: Mapping[str, str],
    mentions: list[str],
    links: list[str],
) -> str:
    target, _, label = body.partition("|")
    label = _unescape(label)
    if target.startswith("@"):
        user_id = target[1:]
        name = users.get(user_id) or label.lstrip("@") or user_id
        mentions.append(name)
        return f"@{name}"
    if target.startswith("#"):
        channel = label or channels.get(target[1:]) or target[1:]
        return f"#{channel.lstrip('#')}"
    if target.startswith("!"):
        word = target[1:]
        if word in ("here", "channel", "everyone"):
            return f"@{word}"
        # <!subteam^S123|@devs>, <!date^1710148502^{date}|Mar 11>: the label is the reading.
        return label or f"@{word.split('^')[0]}"
    url = _unescape(target)
    links.append(url)
    if url.startswith("mailto:"):
        address = url.removeprefix("mailto:")
        return address if not label or label == address else f"{label} ({address})"
    return f"{label} ({url})" if label and label != url else url


register(
    "slack",
    SlackConnector,
    detect,
    "Slack workspace export (.zip or unpacked folder): one stream per channel",
)
