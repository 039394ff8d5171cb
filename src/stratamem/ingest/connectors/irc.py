"""IRC-style chat logs: ``[12:18] <nick> text``, ``[12:18] * nick waves``, ``=== system``.

One file or a folder of ``.txt``/``.log`` files is one chat source; each spoken line is one
:class:`Record` cited as ``file:line`` (1-based). Files in a folder that do not look like logs
(the reply annotations beside the Ubuntu logs) are reported and left out.

Keys. A line's record is keyed by its file's name and its line number (``2004-11-15_03.raw:117``),
which holds while a log only grows. A log saved again from a later line (its first lines cut
off) numbers every line differently, and a merge would take each line for an edit of the
message stored under its number. Given what the store holds of each log
(``IrcConnector(held=held_lines(store))``), the reader checks a file against it first:

* most lines read as the store holds them under their numbers (a log that grew, or one read the
  first time): keyed by their numbers, as always;
* most lines read otherwise, and one shift of the numbers puts nearly all of them on the lines
  the store holds with the same speaker and text (a log cut at its start, grown at its end or
  not): keyed by their numbers in the log as first stored, so that the merge sees the records it
  holds and only the new ones are added;
* most lines read otherwise with no such shift (lines removed from the middle, another log
  saved under the same name): the file is reported and not read, so that the messages stored
  from it are not overwritten.

Times. A line may carry a full timestamp (``[2024-03-11 12:18:02]``, ``2024-03-11T12:18:02``);
otherwise it carries a clock time and the date comes from the file name (``2004-11-15_03.raw.txt``)
or, failing that, from the file's modification time (reported once). Clock times are read as
steps forward from the previous line, so a time earlier than the one before means the next day.
Two things the Ubuntu logs need:

* Some old logs use a 12-hour clock without am/pm (``12:59`` then ``01:00``). A file whose clock
  hours stay within 1–12 and that steps from 12 to 1 is read modulo 12 hours, so that step is
  one minute, not eleven hours back plus a day.
* A name like ``2011-11-13_02`` gives the date and hour of a line inside the log, not of its first
  line (the logs start with context from the evening before). When some line's hour equals the
  name's hour, that line is put on the named date and the rest of the file is shifted with it;
  when none does, the first line is put on the named date.

A time that leaves the calendar (a full timestamp of year 1 with a zone east of UTC, a log of
9999-12-31 running past midnight) has no UTC equivalent: a line that states one is reported and
skipped; lines whose clock time is counted past the end are kept without a time, reported once.

Bounds: a line longer than ``ReadContext.max_item_bytes`` is reported and skipped without being
held; FIFOs, devices and sockets in a folder are reported, never opened for reading; each line
is parsed in time linear in its length. Any other failure of one line skips that line.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from pathlib import Path

from stratamem.errors import IngestError
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    capped_lines,
    clean_text,
    describe_failure,
    from_epoch,
    irregular,
    open_failure,
    open_regular,
    to_utc,
    walk,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.store.base import Store
from stratamem.store.records import RecordStore
from stratamem.store.sources import source_id_for
from stratamem.types import Source, SourceKind

NAME = "irc"

LogLines = Callable[[str], Mapping[int, str]]
"""What a store holds of one log of a source: given the file's key stem (``2004-11-15_03.raw``),
the :func:`line_print` of each line number it holds a record of."""
HeldLines = Callable[[str], LogLines]
"""What a store holds of the logs of a source, given its scope (see :func:`held_lines`)."""

_LOG_SUFFIXES = frozenset({".txt", ".log"})
_SNIFF_LINES = 20
_SNIFF_FILES = 10
# Most of the sniffed lines must parse; a few stray lines (a MOTD, a paste) are allowed.
_SNIFF_SHARE = 0.6
# A log line is short; sniffing looks no further into a longer one.
_SNIFF_LINE_BYTES = 64 * 1024

_STAMP = re.compile(
    r"\[?(?:(?P<date>\d{4}-\d{2}-\d{2})[ T])?"
    r"(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?(?:\.\d+)?"
    r"(?P<tz>Z|[+-]\d{2}:?\d{2})?\]?\s+"
)
_MESSAGE = re.compile(r"<\s*[@+%&~]?(?P<nick>[^>\s]+)\s*>(?:\s(?P<text>.*))?$")
_ACTION = re.compile(r"\*\s+(?P<nick>[^\s*]\S*)(?:\s+(?P<text>.*))?$")
_SYSTEM = re.compile(r"(?:===|-!-|\*\*\*|-->|<--|---?)(?:\s|$)")
_JOINED = re.compile(r"(?P<nick>\S+)\s.*\bhas joined\b")
_RENAMED = re.compile(r"\S+ is now known as (?P<nick>\S+)")
_NAME_DATE = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})(?:[_T ](?P<h>\d{2})(?!\d))?")
_TOKEN_EDGES = ".,:;!?\"'()<>@"
# Most lines of a file read otherwise than the store holds them: more than this share of the
# lines it holds under the same numbers.
_MOVED_SHARE = 0.5
# A shift that explains a moved file leaves at most this share of its lines misplaced (see
# shift_of).
_SHIFT_MISFIT = 0.1
# A text said on more lines than this in one log (a greeting, "ok") does not vote for a shift.
_MAX_PLACES = 16


class IrcConnector:
    """Reads an IRC log file, or a folder of them, into one chat source. With ``held`` (see
    :func:`held_lines`), a log saved again from a later line keeps the keys of its lines."""

    name = NAME

    def __init__(self, *, held: HeldLines | None = None) -> None:
        self.held = held

    def bind_store(
        self, store: Store, writes: Callable[[Source], bool] | None = None
    ) -> IrcConnector | None:
        """This reader checking each log against what ``store`` holds of it, where the store
        holds IRC logs (None otherwise: a first ingest has nothing to check against). It
        reads the store as it goes, so the ingest reads in the writer's process. Only the
        sources the store's reader may see, and ``writes`` accepts (the sources the writer
        of the ingest may write), are looked at: a log named like another source is read as
        a new one, and what it reports says nothing of that source."""
        if self.held is not None:
            return None
        visible = {
            s.scope
            for s in store.sources()
            if s.platform == "irc" and (writes is None or writes(s))
        }
        if not visible:
            return None
        lines = held_lines(store)

        def of_source(scope: str) -> LogLines:
            return lines(scope) if scope in visible else lambda stem: {}

        return IrcConnector(held=of_source)

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        if path.is_file():
            files = [path]
            prefix = ""
            label = path.stem
        elif path.is_dir():
            files = _candidate_files(path)
            label = path.resolve().name
            prefix = label + "/"
        else:
            reason = irregular(path) or "not a file or folder"
            raise IngestError(f"{clean_text(str(path))}: {reason}")
        scope = ctx.scope_for(f"irc:{label}")
        of_file = None if self.held is None else self.held(scope)
        yield SourceStream(
            scope=scope,
            kind=SourceKind.CHAT,
            platform="irc",
            location=str(path),
            records=_records(path, files, prefix, ctx, of_file),
            title=label,
            meta={"files": len(files)},
        )


def held_lines(store: RecordStore) -> HeldLines:
    """What ``store`` holds of each log, for ``IrcConnector(held=...)``: the keys of a source
    are listed when its first log is read, once per read of it, and a log's records when it is
    read. The store must be usable where the connector reads (an ingest that reads in a child
    process needs a connection of its own there)."""

    def of_source(scope: str) -> LogLines:
        source_id = source_id_for(scope)
        stems: dict[str, list[str]] | None = None

        def of_log(stem: str) -> Mapping[int, str]:
            nonlocal stems
            if stems is None:
                stems = {}
                for key in store.record_keys(source_id):
                    head, _, number = key.rpartition(":")
                    if number.isdigit():
                        stems.setdefault(head, []).append(key)
            return {
                int(held.key.rpartition(":")[2]): line_print(held.record.author, held.record.text)
                for held in store.records_by_key(source_id, stems.get(stem, []))
            }

        return of_log

    return of_source


def line_print(nick: str | None, text: str) -> str:
    """What tells one spoken line from another: its speaker and its text."""
    return f"{nick or ''}\x00{text}"


def detect(path: Path) -> int:
    """70 for a log file, or a folder holding logs, whose lines mostly parse as IRC lines."""
    if path.is_file():
        return 70 if path.suffix.lower() in _LOG_SUFFIXES and _looks_like_log(path) else 0
    if not path.is_dir():
        return 0
    sample = _candidate_files(path)[:_SNIFF_FILES]
    logs = sum(_looks_like_log(file) for file in sample)
    return 70 if logs and logs >= len(sample) - logs else 0


def _candidate_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder, dirnames, filenames in walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found.extend(
            Path(folder, name)
            for name in filenames
            if not name.startswith(".") and Path(name).suffix.lower() in _LOG_SUFFIXES
        )
    return sorted(found, key=lambda file: file.relative_to(root).as_posix())


def _looks_like_log(path: Path) -> bool:
    checked = matched = 0
    try:
        with open_regular(path) as handle:
            for raw in capped_lines(handle, _SNIFF_LINE_BYTES):
                line = "" if isinstance(raw, int) else raw.decode("utf-8", "replace").strip()
                if isinstance(raw, bytes) and not line:
                    continue
                checked += 1
                matched += _sniff(line)
                if checked >= _SNIFF_LINES:
                    break
    except OSError:
        return False
    return checked > 0 and matched >= _SNIFF_SHARE * checked


def _sniff(line: str) -> bool:
    try:
        return _parse(line) is not None
    except ValueError:  # a line of the format with an impossible time is still one
        return True


@dataclass(frozen=True, slots=True)
class _Line:
    """A parsed line. ``nick`` is None for a system line; ``clock`` is seconds into the day."""

    nick: str | None
    text: str
    action: bool
    clock: int | None
    stamp: datetime | None
    hour: int | None


def _parse(line: str) -> _Line | None:
    """A log line parsed, or None when it is no IRC line at all.

    Raises ``ValueError`` for a full timestamp with no UTC equivalent or an impossible zone.
    """
    stamp = _STAMP.match(line)
    rest = line[stamp.end() :] if stamp else line
    if _SYSTEM.match(rest):
        return _Line(None, rest, False, None, None, None)
    if stamp is None:
        return None
    message = _MESSAGE.match(rest)
    action = False
    if message is None:
        message = _ACTION.match(rest)
        action = True
        if message is None:
            return None
    hour, minute, second = int(stamp["h"]), int(stamp["m"]), int(stamp["s"] or 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    full: datetime | None = None
    if stamp["date"]:
        try:
            day = date.fromisoformat(stamp["date"])
        except ValueError:
            return None
        full = datetime.combine(day, time(hour, minute, second), tzinfo=_zone(stamp["tz"]))
        full = to_utc(full)
    return _Line(
        nick=message["nick"],
        text=(message["text"] or "").strip(),
        action=action,
        clock=hour * 3600 + minute * 60 + second,
        stamp=full,
        hour=hour,
    )


def _zone(text: str | None) -> timezone:
    """The zone of ``Z``/``+05:30``/``-0800``; ``ValueError`` for one a day or more from UTC."""
    if not text or text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise ValueError(f"no such time zone: {text}")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _records(
    root: Path,
    files: list[Path],
    prefix: str,
    ctx: ReadContext,
    held: LogLines | None,
) -> Iterator[Record]:
    for file in files:
        shown = clean_text(str(file))
        if root != file:
            not_regular = irregular(file)
            if not_regular is not None:
                ctx.skip(shown, "file", not_regular)
                continue
            if not _looks_like_log(file):
                ctx.skip(shown, "file", "does not look like an IRC log; skipped")
                continue
        rel = file.name if root == file else file.relative_to(root).as_posix()
        yield from _read_file(file, shown, clean_text(prefix + rel), ctx, held)


def _read_file(
    file: Path,
    shown: str,
    ref: str,
    ctx: ReadContext,
    held: LogLines | None = None,
) -> Iterator[Record]:
    try:
        parsed = _parse_file(file, shown, ctx)
    except OSError as exc:
        ctx.skip(shown, "file", open_failure(file, exc))
        return
    stem = clean_text(file.stem)
    shift = 0
    if held is not None:
        spoken = [(n, line_print(e.nick, e.text)) for n, e in parsed if e.nick and e.text]
        found = shift_of(spoken, held(stem))
        if isinstance(found, str):
            ctx.skip(shown, "file", found)
            return
        shift = found
    times = _times(file, shown, parsed, ctx)
    speakers: dict[str, str] = {}
    # Who speaks anywhere in the file may be addressed before their first line.
    present = {entry.nick.lower(): entry.nick for _, entry in parsed if entry.nick is not None}
    for (number, entry), ts in zip(parsed, times, strict=True):
        record: Record | None = None
        with ctx.item(shown, f"line {number}"):
            if entry.nick is None:
                _note_presence(entry.text, present)
                continue
            if entry.text:
                record = Record(
                    text=entry.text,
                    ref=f"{ref}:{number}",
                    time=ts,
                    author=entry.nick,
                    author_id=entry.nick.lower(),
                    id=f"{stem}:{number + shift}",
                    mentions=_mentions(entry, speakers, present),
                    meta={"action": entry.action},
                )
            speakers.setdefault(entry.nick.lower(), entry.nick)
        if record is not None:
            yield record


def shift_of(lines: list[tuple[int, str]], held: Mapping[int, str]) -> int | str:
    """How far the numbers of a file's spoken ``lines`` (number, :func:`line_print`) lie from
    those the store ``held`` them under: 0 for a log read the first time or grown, ``k`` for one
    whose line ``n`` the store holds as line ``n + k`` (its first ``k`` lines cut off), or why
    the file is not read when its lines moved some other way.

    Each line votes for the shifts that put it on a held line of its speaker and text (a text
    held on many lines, such as "ok", does not vote); the best shifts are tried in turn, and
    one is taken when it leaves few lines misplaced: on a held line of another speaker or
    text, or past the held lines while their text is held elsewhere.
    """
    overlap = [(n, said) for n, said in lines if n in held]
    if sum(held[n] != said for n, said in overlap) <= _MOVED_SHARE * len(overlap):
        return 0
    places: dict[str, list[int]] = {}
    for n, said in held.items():
        places.setdefault(said, []).append(n)
    known = {said for said, where in places.items() if len(where) <= _MAX_PLACES}
    votes: Counter[int] = Counter()
    for n, said in lines:
        if said in known:
            votes.update(m - n for m in places[said])
    for shift, _ in votes.most_common(3):
        misplaced = 0
        for n, said in lines:
            at = held.get(n + shift)
            misplaced += at != said if at is not None else said in known
        if misplaced <= _SHIFT_MISFIT * len(lines):
            return shift
    keep = (
        "not read, so that the messages stored under those numbers are not overwritten; "
        "ingest it under another name or scope to keep both, or forget the source first to "
        "replace what it holds"
    )
    if votes:
        return (
            "most of its lines are stored under other line numbers, and no shift of the "
            f"numbers matches them (lines removed or moved inside the log): {keep}"
        )
    return (
        "most of its lines differ from the messages stored under the same line numbers "
        f"(another log saved under this name?): {keep}"
    )


def _parse_file(file: Path, shown: str, ctx: ReadContext) -> list[tuple[int, _Line]]:
    """The parsed lines of a file with their numbers; each line is decoded as UTF-8 or else
    Latin-1 (old logs mix them). Lines that fail are reported and left out."""
    parsed: list[tuple[int, _Line]] = []
    problems: list[tuple[str, str]] = []
    not_utf8: list[int] = []
    with open_regular(file) as handle:
        for number, raw in enumerate(capped_lines(handle, ctx.max_item_bytes), start=1):
            if isinstance(raw, int):
                problems.append((f"line {number}", ctx.size_reason(raw)))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("latin-1")
                not_utf8.append(number)
            line = line.strip()
            if not line:
                continue
            try:
                entry = _parse(line)
            except ValueError as exc:  # an impossible time or zone: that line only
                problems.append((f"line {number}", f"{exc}; line skipped"))
                continue
            except Exception as exc:
                problems.append((f"line {number}", describe_failure(exc)))
                continue
            if entry is None:
                problems.append((f"line {number}", "unrecognised line"))
            else:
                parsed.append((number, entry))
    if not_utf8:
        reason = f"{len(not_utf8)} line(s) not UTF-8, read as Latin-1; the first is here"
        ctx.skip(shown, f"line {not_utf8[0]}", reason)
    for where, reason in problems:
        ctx.skip(shown, where, reason)
    return parsed


def _note_presence(text: str, present: dict[str, str]) -> None:
    body = text.split(None, 1)[1] if " " in text else ""
    seen = _RENAMED.match(body) or _JOINED.match(body)
    if seen is not None:
        present.setdefault(seen["nick"].lower(), seen["nick"])


def _mentions(entry: _Line, speakers: dict[str, str], present: dict[str, str]) -> tuple[str, ...]:
    """Nicks this line addresses: ``nick:``/``nick,`` first, then any known speaker in it.

    The addressee at the start may be anyone in the file (who speaks later, or joined); elsewhere
    in the text only nicks that have already spoken count, so that a common word that is also a
    nick is not taken for a mention before its owner has said anything.
    """
    author = entry.nick.lower() if entry.nick else ""
    found: list[str] = []
    tokens = entry.text.split()
    if tokens and tokens[0][-1:] in (":", ","):
        key = tokens[0][:-1].lstrip("@").lower()
        nick = speakers.get(key) or present.get(key)
        if nick is not None and key != author:
            found.append(nick)
    for token in tokens:
        key = token.strip(_TOKEN_EDGES).lower()
        nick = speakers.get(key)
        if nick is not None and key != author:
            found.append(nick)
    return tuple(dict.fromkeys(found))


def _times(
    file: Path, shown: str, parsed: list[tuple[int, _Line]], ctx: ReadContext
) -> list[datetime | None]:
    """The UTC time of each entry (None for system lines without one); see the module doc."""
    entries = [entry for _, entry in parsed]
    clocks = [entry.hour for entry in entries if entry.stamp is None and entry.hour is not None]
    period = 12 * 3600 if _twelve_hour_clock(clocks) else 24 * 3600
    named = _name_date(file.name)
    if named is not None:
        base_day, anchor_hour = named
    else:
        try:
            base_day = from_epoch(file.stat().st_mtime).date()
        except (OSError, OverflowError, ValueError):
            base_day = datetime.now(UTC).date()
        anchor_hour = None
        if clocks:
            ctx.skip(shown, "file", "no date in the file name or lines; took the file's date")

    times: list[datetime | None] = []
    current: datetime | None = None
    previous_clock: int | None = None
    clock_based: list[int] = []
    anchor: tuple[int, int] | None = None
    lost: int | None = None
    for index, entry in enumerate(entries):
        if entry.stamp is not None:
            current, previous_clock = entry.stamp, None
        elif entry.clock is not None and lost is not None and current is None:
            pass  # past the calendar's end: no time until a line states a full one
        elif entry.clock is not None:
            clock = entry.clock % period
            if current is None:
                current = _later(datetime.combine(base_day, time(), tzinfo=UTC), clock)
            elif previous_clock is None:
                current = _next_at(current, entry.clock)
            else:
                current = _later(current, (clock - previous_clock) % period)
            if current is None:
                lost = index if lost is None else lost
                times.append(None)
                continue
            previous_clock = clock
            clock_based.append(index)
            if (
                anchor is None
                and anchor_hour is not None
                and entry.hour is not None
                and entry.hour % (period // 3600) == anchor_hour % (period // 3600)
            ):
                anchor = (index, entry.clock - entry.hour * 3600 + anchor_hour * 3600)
        times.append(current if entry.nick is not None else None)

    if anchor is not None:
        index, seconds = anchor
        computed = times[index]
        wanted = _later(datetime.combine(base_day, time(), tzinfo=UTC), seconds)
        if computed is not None and wanted is not None and wanted != computed:
            shift = (wanted - computed).total_seconds()
            for i in clock_based:
                moved = times[i]
                if moved is not None:
                    times[i] = _later(moved, shift)
                    if times[i] is None:
                        lost = i if lost is None else min(lost, i)
    if lost is not None:
        reason = "time outside the calendar; this line and the next without a date have none"
        ctx.skip(shown, f"line {parsed[lost][0]}", reason)
    return times


def _twelve_hour_clock(hours: list[int]) -> bool:
    """Hours only from 1 to 12, and 12 followed by 1: a 12-hour clock passing noon or midnight.

    On a 24-hour clock 12 then 1 would be a silence of 13 hours; hours from 1 to 12 alone do
    not decide it (a morning log), nor does a step back such as 10 then 9 (the next day).
    """
    if not hours or min(hours) < 1 or max(hours) > 12:
        return False
    return any(a == 12 and b == 1 for a, b in itertools.pairwise(hours))


def _name_date(name: str) -> tuple[date, int | None] | None:
    """The date in a file name, and the hour after it (``2011-11-13_02``) if any."""
    found = _NAME_DATE.search(name)
    if found is None:
        return None
    try:
        day = date.fromisoformat(found["date"])
    except ValueError:
        return None
    hour = int(found["h"]) if found["h"] and int(found["h"]) < 24 else None
    return day, hour


def _next_at(after: datetime, clock: int) -> datetime | None:
    """The first moment at or after ``after`` whose clock reads ``clock`` seconds into the day;
    None past the end of the calendar."""
    candidate = _later(datetime.combine(after.date(), time(), tzinfo=UTC), clock)
    if candidate is None or candidate >= after:
        return candidate
    return _later(candidate, 24 * 3600)


def _later(moment: datetime, seconds: float) -> datetime | None:
    """``moment`` plus ``seconds``, or None past the calendar's end (or before its start)."""
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return None


CONNECTOR = ConnectorSpec(
    NAME,
    IrcConnector,
    detect,
    "IRC logs ([12:18] <nick> text), one .txt/.log file or a folder of them",
)
