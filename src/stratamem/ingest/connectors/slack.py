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
:meth:`ReadContext.skip` (``message N`` counts from 1) and the rest is read. The topic and
purpose notices, with the topic, purpose and creator ``channels.json`` gives, are the stream's
``structure``: facts about the channel (see :mod:`stratamem.memory.structure_chat`).

A message pinned in its conversation (its ``pinned_to`` names it, or the conversation's
``pins`` in ``channels.json`` lists its ``ts``) is tagged ``pinned``, and so is the chat window
holding it: a tier-0 item for search. The export says what is pinned when it was taken, so a
later export that no longer marks a message unpins it; ``pinned_item`` notices are left out.

Whatever one file or message does, it costs only itself: a day file larger than
``ReadContext.max_item_bytes`` is skipped before a byte of it is inflated (a zip member is read
through a capped stream, so a member that lies about its size is stopped at the cap too); a
corrupt member, JSON nested too deeply or a field of the wrong type skips that file or
message. Only regular files are opened, and a zip member whose path could climb out of the
export (``..``, an absolute path, a backslash) is reported and never read. Only a folder or zip
that cannot be listed at all ends the ingest.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from stratamem.entities.aliases import Alias, profile_aliases
from stratamem.errors import SourceFormatError
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    describe_failure,
    entries,
    from_epoch,
    open_regular,
    read_capped,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.memory.structure_chat import Setting
from stratamem.types import SourceKind

_DAY_FILE = re.compile(r"\d{4}-\d{2}-\d{2}\.json")
_DRIVE = re.compile(r"[A-Za-z]:")
_MARKERS = ("channels.json", "users.json")
_TS = re.compile(r"(\d+)(?:\.(\d{1,6}))?")
_MARKUP = re.compile(r"<([^<>]+)>")
_DELETED_TEXT = "This message was deleted."
# The tag of a pinned message's record, and so of the chat window holding it.
_PINNED = "pinned"

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
# Notices of a change to what a conversation says of itself: the property, and the message
# field holding its new value ("" when it was cleared).
_SETTING_SUBTYPES = {
    "channel_topic": "topic",
    "channel_purpose": "purpose",
    "group_topic": "topic",
    "group_purpose": "purpose",
}


@dataclass(frozen=True, slots=True)
class _Conversation:
    folder: str
    name: str
    kind: str
    id: str | None = None
    topic: str = ""
    purpose: str = ""
    members: tuple[str, ...] = ()
    topic_set: datetime | None = None
    purpose_set: datetime | None = None
    creator: str = ""
    created: datetime | None = None
    # The ``ts`` of the messages the conversation list names as pinned (its ``pins``).
    pins: frozenset[str] = frozenset()


class _TooLarge(Exception):
    """A file over the size limit for one item; the message says by how much."""


Reader = Callable[[str], bytes]


class _Tree:
    """The files of an export, by path relative to its root, read from a folder or a zip.

    Only the top-level JSON files and the day files one folder down are listed. Reads are
    capped at ``ctx.max_item_bytes`` and raise :class:`_TooLarge` beyond it.
    """

    def __init__(self, path: Path, ctx: ReadContext) -> None:
        self.path = path
        self.ctx = ctx
        self.is_zip = not path.is_dir()
        self.prefix = ""
        self.members: dict[str, zipfile.ZipInfo] = {}
        if self.is_zip:
            try:
                with open_regular(path) as handle, zipfile.ZipFile(handle) as zf:
                    infos = zf.infolist()
            except Exception as exc:  # a zip whose directory cannot be read is no export
                reason = f"not a valid zip file: {describe_failure(exc)}"
                raise SourceFormatError(str(path), "", reason) from None
            members = _safe_members(infos, lambda name, why: ctx.skip(path, name, why))
            self.prefix = _zip_root(list(members))
            self.members = {
                name[len(self.prefix) :]: info
                for name, info in members.items()
                if name.startswith(self.prefix)
            }
            self.names = _listing(self.members)
        else:
            try:
                self.names = _folder_listing(path, lambda name, why: ctx.skip(path, name, why))
            except OSError as exc:
                reason = f"cannot be read: {exc.strerror or exc}"
                raise SourceFormatError(str(path), "", reason) from None

    def label(self, name: str) -> str:
        """How a file is named in refs and problems: the export path, then the file in it."""
        if self.is_zip:
            return f"{self.path}/{self.prefix}{name}"
        return str(self.path / name)

    @contextmanager
    def opener(self) -> Iterator[Reader]:
        limit = self.ctx.max_item_bytes
        if not self.is_zip:

            def read_file(name: str) -> bytes:
                with open_regular(self.path / name) as handle:
                    data = read_capped(handle, limit)
                    if data is None:
                        raise _TooLarge(self.ctx.size_reason(os.fstat(handle.fileno()).st_size))
                return data

            yield read_file
            return
        with open_regular(self.path) as archive, zipfile.ZipFile(archive) as zf:

            def read_member(name: str) -> bytes:
                info = self.members[name]
                if self.ctx.too_large(info.file_size):
                    raise _TooLarge(self.ctx.size_reason(info.file_size))
                with zf.open(info) as member:
                    data = read_capped(member, limit)
                if data is None:  # the member inflates past what its header says
                    raise _TooLarge(
                        self.ctx.size_reason(limit + 1).replace("bytes", "bytes or more", 1)
                    )
                return data

            yield read_member


def _safe_members(
    infos: list[zipfile.ZipInfo], report: Callable[[str, str], None]
) -> dict[str, zipfile.ZipInfo]:
    """The zip's files by normalised path; a path that could climb out of the export
    (``..``, absolute, a drive, a backslash) or repeats an earlier one is reported."""
    found: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        if info.is_dir():
            continue
        place = f"member {name!r}"
        parts = [part for part in name.split("/") if part not in ("", ".")]
        if "\\" in name or name.startswith("/") or ".." in parts or _DRIVE.match(name):
            report(place, "a path outside the export; not read")
            continue
        normal = "/".join(parts)
        if not normal:
            continue
        if normal in found:
            report(place, "a second member with this path; the first is read")
            continue
        found[normal] = info
    return found


def _listing(names: Iterable[str]) -> list[str]:
    kept = []
    for name in names:
        parts = PurePosixPath(name).parts
        top_level_json = len(parts) == 1 and parts[0].endswith(".json")
        if top_level_json or (len(parts) == 2 and _DAY_FILE.fullmatch(parts[1])):
            kept.append(name)
    return sorted(kept)


def _folder_listing(root: Path, report: Callable[[str, str], None] | None = None) -> list[str]:
    """The export's files; what is not a regular file is listed all the same, so that
    reading it reports it. A conversation folder that cannot be listed is reported."""
    names: list[str] = []
    for entry in entries(root):
        if entry.is_dir:
            try:
                names.extend(f"{entry.name}/{day.name}" for day in entries(entry.path))
            except OSError as exc:
                if report is not None:
                    report(f"folder {entry.name}", f"cannot be read: {exc.strerror or exc}")
        else:
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
        elif path.suffix.lower() == ".zip" and path.is_file():
            with open_regular(path) as handle:
                if not zipfile.is_zipfile(handle):
                    return 0
                handle.seek(0)
                with zipfile.ZipFile(handle) as zf:
                    infos = zf.infolist()
            members = list(_safe_members(infos, lambda name, why: None))
            prefix = _zip_root(members)
            names = _listing(n[len(prefix) :] for n in members if n.startswith(prefix))
        else:
            return 0
    except Exception:  # detection never fails: a path it cannot read is not an export
        return 0
    return 95 if _has_export(names) else 0


class SlackConnector:
    """Reads a Slack export into one chat stream per channel, private channel or DM."""

    name: str = "slack"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        tree = _Tree(path, ctx)
        said = any(_DAY_FILE.fullmatch(name.partition("/")[2]) for name in tree.names)
        if not said and not set(_MARKERS) & set(tree.names):
            raise SourceFormatError(
                str(path),
                "",
                "not a Slack export: no channel folder holds a day file (general/2024-03-01.json)",
            )
        try:
            with tree.opener() as read:
                profiles: dict[str, list[Alias]] = {}
                users = _load_users(tree, read, ctx, profiles)
                conversations = _load_conversations(tree, read, ctx)
        except OSError as exc:  # the zip itself vanished or became unreadable
            raise SourceFormatError(str(path), "", f"cannot be read: {exc}") from None
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
            yield _stream(
                tree, conv, sorted(days[conv.folder]), users, channel_names, ctx, profiles
            )


def _stream(
    tree: _Tree,
    conv: _Conversation,
    days: list[str],
    users: Mapping[str, str],
    channels: Mapping[str, str],
    ctx: ReadContext,
    profiles: Mapping[str, list[Alias]] | None = None,
) -> SourceStream:
    member_names = [users.get(m, m) for m in conv.members]
    # Who wrote here, for what their users.json profiles say of them (see entities.aliases).
    people: set[str] = set(conv.members)

    def read_records() -> Iterator[Record]:
        for record in _records(tree, conv, days, users, channels, ctx, notices):
            if record.author_id:
                people.add(record.author_id)
            yield record

    def said() -> list[Any]:
        known = profiles or {}
        stated = [a for user in sorted(people) for a in known.get(user, ())]
        return [*_described(conv, users, channels), *notices, *stated]

    if conv.kind in ("dm", "mpim"):
        scope = ctx.scope_for(f"slack:dm:{conv.name}", f"dm:{conv.name}")
        title = "DM: " + ", ".join(member_names) if member_names else conv.name
    else:
        scope = ctx.scope_for(f"slack:#{conv.name}", f"#{conv.name}")
        title = f"#{conv.name}"
    notices: list[Setting] = []
    return SourceStream(
        scope=scope,
        kind=SourceKind.CHAT,
        platform="slack",
        location=tree.label(conv.folder),
        records=read_records(),
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
        structure=said,
    )


def _described(
    conv: _Conversation, users: Mapping[str, str], channels: Mapping[str, str]
) -> list[Setting]:
    """What the conversation list says of ``conv`` now: its topic and purpose (an empty one
    only with the time it was cleared: an empty value set at no time was never set) and who
    created it (when ``users.json`` names them)."""
    found = []
    for predicate, value, at in (
        ("topic", conv.topic, conv.topic_set),
        ("purpose", conv.purpose, conv.purpose_set),
    ):
        text = render(value, users, channels)[0].strip()
        if text or at is not None:
            found.append(Setting(predicate, text, at, current=True))
    creator = users.get(conv.creator)
    if creator and conv.created is not None:
        found.append(Setting("created_by", f"person:{creator}", conv.created, current=True))
    return found


def _notice(
    raw: Mapping[str, Any], users: Mapping[str, str], channels: Mapping[str, str]
) -> Setting | None:
    """The change a ``channel_topic``/``channel_purpose`` notice records, or None for one
    without a time or a value field."""
    field = _SETTING_SUBTYPES.get(_text_or_none(raw.get("subtype")) or "")
    parsed = _parse_ts(raw.get("ts"))
    value = raw.get(field) if field else None
    if field is None or parsed is None or not isinstance(value, str):
        return None
    return Setting(field, render(value, users, channels)[0].strip(), parsed[0])


def _load_json(tree: _Tree, read: Reader, name: str, ctx: ReadContext) -> tuple[bool, Any]:
    """``(True, data)``, or ``(False, None)`` after reporting a file that cannot be read."""
    label = tree.label(name)
    try:
        data = read(name)
        return True, json.loads(data.decode("utf-8-sig"))
    except _TooLarge as exc:
        ctx.skip(label, "file", str(exc))
    except json.JSONDecodeError as exc:
        ctx.skip(label, f"line {exc.lineno} col {exc.colno}", f"invalid JSON: {exc.msg}")
    except UnicodeDecodeError as exc:
        ctx.skip(label, f"byte {exc.start}", f"not UTF-8 text: {exc.reason}")
    except Exception as exc:  # a corrupt member, JSON nested too deeply, a FIFO: this file only
        ctx.skip(label, "file", describe_failure(exc))
    return False, None


def _load_users(
    tree: _Tree,
    read: Reader,
    ctx: ReadContext,
    profiles: dict[str, list[Alias]] | None = None,
) -> dict[str, str]:
    """Each user id's name (see :func:`_person_name`); ``profiles`` gathers what each
    profile says of who the user is (display name, user name, email: see
    :func:`_profile_aliases`)."""
    if "users.json" not in tree.names:
        ctx.skip(str(tree.path), "users.json", "missing; user ids are not resolved to names")
        return {}
    ok, data = _load_json(tree, read, "users.json", ctx)
    if not ok:
        return {}
    if not isinstance(data, list):
        ctx.skip(tree.label("users.json"), "file", "expected a JSON array of users")
        return {}
    users = {}
    for n, user in enumerate(data, 1):
        with ctx.item(tree.label("users.json"), f"user {n}"):
            if isinstance(user, dict) and isinstance(user.get("id"), str):
                name = _person_name(user)
                if name:
                    users[user["id"]] = name
                    if profiles is not None:
                        profiles[user["id"]] = _profile_aliases(user, name)
    return users


def _profile_aliases(user: Mapping[str, Any], name: str) -> list[Alias]:
    profile = user.get("profile")
    profile = profile if isinstance(profile, dict) else {}

    def texts(*values: Any) -> list[str]:
        return [v for v in values if isinstance(v, str) and v.strip()]

    return profile_aliases(
        "slack",
        user["id"],
        name,
        display=texts(profile.get("display_name"), profile.get("real_name"), user.get("real_name")),
        handles=texts(user.get("name")),
        emails=texts(profile.get("email")),
        origin="slack users.json",
    )


def _person_name(user: Mapping[str, Any]) -> str | None:
    profile = user.get("profile")
    candidates = [
        profile.get("real_name") if isinstance(profile, dict) else None,
        user.get("real_name"),
        user.get("name"),
    ]
    return next((c for c in candidates if isinstance(c, str) and c.strip()), None)


def _load_conversations(tree: _Tree, read: Reader, ctx: ReadContext) -> list[_Conversation]:
    """The conversations the export lists; an absent list is inferred from the folders."""
    found: dict[str, _Conversation] = {}
    for list_name, kind in _LISTS:
        if list_name not in tree.names:
            continue
        label = tree.label(list_name)
        ok, data = _load_json(tree, read, list_name, ctx)
        if not ok:
            continue
        if not isinstance(data, list):
            ctx.skip(label, "file", "expected a JSON array of conversations")
            continue
        for n, entry in enumerate(data, 1):
            with ctx.item(label, f"entry {n}"):
                conv = _conversation(entry, kind)
                if conv is None:
                    ctx.skip(label, f"entry {n}", "no id or name")
                elif conv.folder in found:
                    ctx.skip(label, f"entry {n}", f"{conv.folder!r} is listed already")
                else:
                    found[conv.folder] = conv
    return list(found.values())


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
    creator = entry.get("creator")
    return _Conversation(
        folder=name,
        name=name,
        kind=kind,
        id=conv_id,
        topic=_text_field(entry.get("topic")),
        purpose=_text_field(entry.get("purpose")),
        members=tuple(m for m in members if isinstance(m, str)),
        topic_set=_set_at(entry.get("topic")),
        purpose_set=_set_at(entry.get("purpose")),
        creator=creator if isinstance(creator, str) else "",
        created=_epoch(entry.get("created")),
        pins=_pins(entry.get("pins")),
    )


def _pins(value: Any) -> frozenset[str]:
    """The message ``ts`` of each entry of a conversation's ``pins`` list."""
    entries = value if isinstance(value, list) else []
    return frozenset(
        pin["id"] for pin in entries if isinstance(pin, dict) and isinstance(pin.get("id"), str)
    )


def _pinned(raw: Mapping[str, Any], ts_id: str, conv: _Conversation) -> bool:
    """Whether the message is pinned in its conversation now: its ``pinned_to`` names the
    conversation (or, for one whose id the export does not give, anything), or the
    conversation's ``pins`` lists its ``ts``."""
    if ts_id in conv.pins:
        return True
    targets = raw.get("pinned_to")
    if not isinstance(targets, list):
        return False
    named = [t for t in targets if isinstance(t, str) and t]
    return conv.id in named if conv.id else bool(named)


def _set_at(value: Any) -> datetime | None:
    """When a topic or purpose was last set (its ``last_set``); None for 0 (never)."""
    return _epoch(value.get("last_set")) if isinstance(value, dict) else None


def _epoch(value: Any) -> datetime | None:
    """Whole seconds since the epoch (a number or its text) as a time; None for 0 or none."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    try:
        return from_epoch(value)
    except (OverflowError, OSError, ValueError):
        return None


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
    notices: list[Setting] | None = None,
) -> Iterator[Record]:
    with tree.opener() as read:
        for day in days:
            name = f"{conv.folder}/{day}"
            label = tree.label(name)
            ok, data = _load_json(tree, read, name, ctx)
            if not ok:
                continue
            if not isinstance(data, list):
                ctx.skip(label, "file", "expected a JSON array of messages")
                continue
            kept: list[tuple[tuple[int, int], Record]] = []
            for n, raw in enumerate(data, 1):
                where = f"message {n}"
                if not isinstance(raw, dict):
                    ctx.skip(label, where, "not a JSON object")
                    continue
                with ctx.item(label, where):
                    subtype = _text_or_none(raw.get("subtype"))
                    if notices is not None and subtype in _SETTING_SUBTYPES:
                        notice = _notice(raw, users, channels)
                        if notice is not None:
                            notices.append(notice)
                    item = _record(raw, where, label, conv, users, channels, ctx)
                    if item is not None:
                        kept.append(item)
            del data  # the records are all that is kept of the day
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
    subtype = _text_or_none(raw.get("subtype"))
    edited = "edited" in raw
    if subtype == "message_changed":
        inner = raw.get("message")
        if not isinstance(inner, dict):
            ctx.skip(label, where, "message_changed without the changed message")
            return None
        raw, subtype, edited = inner, _text_or_none(inner.get("subtype")), True
    if subtype in _DELETED_SUBTYPES or subtype in _SYSTEM_SUBTYPES:
        return None
    raw_text = raw.get("text")
    raw_text = raw_text if isinstance(raw_text, str) else ""
    if raw_text.strip() == _DELETED_TEXT:
        return None

    ts_raw = raw.get("ts")
    parsed = _parse_ts(ts_raw)
    if parsed is None:
        ctx.skip(label, where, f"no valid ts: {_shown(ts_raw)}")
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
    edit = raw.get("edited")
    edited_at = _parse_ts(edit.get("ts")) if isinstance(edit, dict) else None
    return key, Record(
        text=text,
        ref=f"{label}#{ts_id}",
        time=ts,
        author=_author(raw, user, is_bot, users),
        author_id=user or bot_id,
        id=ts_id,
        thread=thread_ts,
        reply_to=thread_ts if thread_ts and thread_ts != ts_id else None,
        mentions=mentions,
        links=links,
        # A pinned message is tier-0: its chat window carries the tag (see chunking).
        tags=(_PINNED,) if _pinned(raw, ts_id, conv) else (),
        meta={
            "channel": conv.name,
            "edited": edited,
            # When it was last edited: of two versions of a message, the later edit is kept.
            "edited_at": None if edited_at is None else edited_at[0].isoformat(),
            "files": [name for name, _ in files],
            "reactions": _reactions(raw),
            "subtype": subtype,
            "bot": is_bot,
        },
    )


def _shown(value: Any) -> str:
    """``repr`` of a value for a problem message, cut short."""
    if isinstance(value, list | dict):
        return f"<{type(value).__name__}>"
    text = repr(value[:81] if isinstance(value, str) else value)
    return text if len(text) <= 80 else text[:79] + "…"


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _parse_ts(value: Any) -> tuple[datetime, tuple[int, int]] | None:
    """Slack's ``"1710148502.123459"`` as an exact UTC time and a sort key."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            value = f"{value:.6f}"
        except OverflowError:  # an integer too large for a float
            return None
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
            users = [u for u in users if isinstance(u, str)] if isinstance(users, list) else []
            count = r.get("count")
            valid = isinstance(count, int) and not isinstance(count, bool) and 0 <= count < 2**53
            out.append({"name": r["name"], "count": count if valid else len(users), "users": users})
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


CONNECTOR = ConnectorSpec(
    "slack",
    SlackConnector,
    detect,
    "Slack workspace export (.zip or unpacked folder): one stream per channel",
)
