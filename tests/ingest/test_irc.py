from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import stratamem
from stratamem.access.writes import admit_source
from stratamem.ingest import registry
from stratamem.ingest.connectors import irc
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.ingest.pipeline import SourceResult
from stratamem.store.sources import source_id_for
from stratamem.types import Source, SourceKind


@pytest.fixture
def logs(fixtures_dir: Path) -> Path:
    return fixtures_dir / "irc" / "phoenix-dev"


def stream_of(path: Path, ctx: ReadContext | None = None) -> SourceStream:
    streams = list(irc.IrcConnector().read(path, ctx or ReadContext()))
    assert len(streams) == 1
    return streams[0]


def records_of(path: Path, ctx: ReadContext | None = None) -> list[Record]:
    return list(stream_of(path, ctx).records)


def log(tmp_path: Path, name: str, *lines: str) -> Path:
    file = tmp_path / name
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return file


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


def test_registers_itself() -> None:
    spec = registry.spec("irc")
    assert spec.detect is irc.detect
    assert isinstance(spec.factory(), irc.IrcConnector)


def test_detect(logs: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    assert irc.detect(logs) == 70
    assert irc.detect(logs / "2024-03-18.log") == 70
    assert irc.detect(logs / "2024-03-19.log") == 70  # full timestamps
    assert irc.detect(logs / "README.txt") == 0
    assert irc.detect(fixtures_dir / "markdown" / "vault") == 0
    assert irc.detect(fixtures_dir / "markdown" / "vault" / "inbox.txt") == 0
    assert irc.detect(fixtures_dir / "jsonl" / "export.jsonl") == 0
    assert irc.detect(tmp_path) == 0
    assert irc.detect(tmp_path / "missing.log") == 0


def test_one_chat_stream_for_the_folder(logs: Path) -> None:
    stream = stream_of(logs)
    assert stream.kind is SourceKind.CHAT
    assert stream.platform == "irc"
    assert stream.scope == "irc:phoenix-dev"
    assert stream.title == "phoenix-dev"
    assert stream.location == str(logs)
    assert isinstance(stream.records, Iterator)
    assert stream_of(logs, ReadContext(scope="team")).scope == "team"


def test_messages_actions_and_refs(logs: Path) -> None:
    records = records_of(logs)
    assert [(r.ref, r.author) for r in records] == [
        ("phoenix-dev/2024-03-18.log:2", "alice"),
        ("phoenix-dev/2024-03-18.log:3", "bob"),
        ("phoenix-dev/2024-03-18.log:4", "carol"),
        ("phoenix-dev/2024-03-18.log:5", "carol"),
        ("phoenix-dev/2024-03-18.log:6", "dan"),  # <@dan>: the op sign is not part of the nick
        ("phoenix-dev/2024-03-18.log:7", "alice"),
        # line 8 is an empty message, 9 a nick change, 10 junk, 11 blank
        ("phoenix-dev/2024-03-18.log:12", "carol"),
        ("phoenix-dev/2024-03-18.log:13", "alice"),
        ("phoenix-dev/2024-03-18.log:14", "carol"),
        ("phoenix-dev/2024-03-19.log:1", "carol"),
        ("phoenix-dev/2024-03-19.log:2", "alice"),
        ("phoenix-dev/2024-03-19.log:3", "bob"),
        ("phoenix-dev/2024-03-19.log:4", "dan_oncall"),
    ]
    first = records[0]
    assert first.text == "deploy of 2.0-rc3 is out, watching the queue"
    assert first.id == "2024-03-18:2"
    assert first.author_id == "alice"
    assert first.meta == {"action": False}
    action = records[2]
    assert action.text == "pulls up the worker logs"
    assert action.meta == {"action": True}


def test_clock_times_take_the_date_from_the_name_and_wrap_past_midnight(logs: Path) -> None:
    times = [r.time for r in records_of(logs)][:9]
    assert times == [
        utc(2024, 3, 18, 21, 58),
        utc(2024, 3, 18, 22, 3),
        utc(2024, 3, 18, 22, 4),
        utc(2024, 3, 18, 22, 5),
        utc(2024, 3, 18, 22, 5),
        utc(2024, 3, 18, 22, 6),
        utc(2024, 3, 18, 23, 59),
        utc(2024, 3, 19, 0, 2),
        utc(2024, 3, 19, 0, 3),
    ]


def test_full_timestamps_with_and_without_offsets(logs: Path) -> None:
    times = [r.time for r in records_of(logs)][9:]
    assert times == [
        utc(2024, 3, 19, 9, 15, 2),  # [2024-03-19 09:15:02]
        utc(2024, 3, 19, 9, 16, 30),  # 2024-03-19T09:16:30Z
        utc(2024, 3, 19, 9, 0),  # [2024-03-19 10:00:00+01:00]
        utc(2024, 3, 19, 9, 20),
    ]


def test_mentions(logs: Path) -> None:
    mentions = {r.ref.rsplit("/", 1)[1]: r.mentions for r in records_of(logs) if r.mentions}
    assert mentions == {
        "2024-03-18.log:3": ("alice",),  # "alice: ..."
        "2024-03-18.log:5": ("bob",),  # "bob, ..."
        "2024-03-18.log:7": ("dan", "carol"),  # addressed, then named in the text
        "2024-03-18.log:13": ("carol",),  # "nice. carol, ..."
        "2024-03-19.log:2": ("carol",),
    }


def test_bad_lines_and_non_logs_are_reported(logs: Path) -> None:
    ctx = ReadContext()
    records_of(logs, ctx)
    assert [(p.path, p.where, p.reason) for p in ctx.problems] == [
        (str(logs / "2024-03-18.log"), "line 10", "unrecognised line"),
        (str(logs / "README.txt"), "file", "does not look like an IRC log; skipped"),
    ]


def test_records_are_read_lazily_one_file_at_a_time(logs: Path) -> None:
    ctx = ReadContext()
    records = iter(stream_of(logs, ctx).records)
    assert ctx.problems == []  # nothing read yet
    next(records)
    assert len(ctx.problems) == 1  # the first file only
    list(records)
    assert len(ctx.problems) == 2


def test_single_file(logs: Path) -> None:
    stream = stream_of(logs / "2024-03-19.log")
    assert stream.scope == "irc:2024-03-19"
    assert [r.ref for r in stream.records] == [f"2024-03-19.log:{n}" for n in (1, 2, 3, 4)]


def test_name_hour_anchors_the_date_when_the_log_starts_the_evening_before(
    tmp_path: Path,
) -> None:
    # As in the Ubuntu logs: 2011-11-13_02 names the day and hour of a line inside the file.
    file = log(tmp_path, "2011-11-13_02.txt", "[23:59] <a> x", "[00:30] <b> y", "[02:00] <a> z")
    assert [r.time for r in records_of(file)] == [
        utc(2011, 11, 12, 23, 59),
        utc(2011, 11, 13, 0, 30),
        utc(2011, 11, 13, 2, 0),
    ]


def test_twelve_hour_clock_without_am_pm(tmp_path: Path) -> None:
    # Hours never reach 13 and 12:59 is followed by 01:00: a 12-hour clock, one minute apart.
    lines = ("[11:29] <a> x", "[12:59] <b> y", "[01:00] <a> z", "[01:20] <b> w")
    file = log(tmp_path, "2005-08-08_01.raw.txt", *lines)
    assert [r.time for r in records_of(file)] == [
        utc(2005, 8, 7, 23, 29),
        utc(2005, 8, 8, 0, 59),
        utc(2005, 8, 8, 1, 0),
        utc(2005, 8, 8, 1, 20),
    ]


def test_name_hour_that_matches_no_line_leaves_the_first_line_on_the_date(
    tmp_path: Path,
) -> None:
    file = log(tmp_path, "2024-01-02_07.log", "[22:00] <a> x", "[01:00] <b> y")
    assert [r.time for r in records_of(file)] == [utc(2024, 1, 2, 22), utc(2024, 1, 3, 1)]


def test_no_date_anywhere_uses_the_file_time_and_says_so_once(tmp_path: Path) -> None:
    file = log(tmp_path, "channel.log", "[10:00:05] <a> x", "[09:00] <b> y", "[09:30] <a> z")
    when = utc(2024, 1, 5, 12).timestamp()
    os.utime(file, (when, when))
    ctx = ReadContext()
    assert [r.time for r in records_of(file, ctx)] == [
        utc(2024, 1, 5, 10, 0, 5),
        utc(2024, 1, 6, 9),
        utc(2024, 1, 6, 9, 30),
    ]
    assert [(p.path, p.reason) for p in ctx.problems] == [
        (str(file), "no date in the file name or lines; took the file's date")
    ]


def test_lines_that_are_not_utf8_are_read_as_latin1(tmp_path: Path) -> None:
    file = tmp_path / "2024-02-01.log"
    file.write_bytes(b"[10:00] <jos\xe9> ol\xe9\n[10:01] <ana> \xc3\xa9 ok\n")
    ctx = ReadContext()
    records = records_of(file, ctx)
    assert [(r.author, r.text) for r in records] == [("josé", "olé"), ("ana", "é ok")]
    assert [(p.where, p.reason) for p in ctx.problems] == [
        ("line 1", "1 line(s) not UTF-8, read as Latin-1; the first is here")
    ]


@pytest.mark.parametrize(
    ("line", "nick", "text", "action"),
    [
        ("[12:18] <nick> hello there", "nick", "hello there", False),
        ("[12:18:02] <+voiced> hi", "voiced", "hi", False),
        ("[12:18]  * nick waves", "nick", "waves", True),
        ("12:18 <irssi> default irssi format", "irssi", "default irssi format", False),
        ("[2024-03-11 12:18:02] <n> full", "n", "full", False),
        ("2024-03-11T12:18:02.123Z < spaced > x", "spaced", "x", False),
        ("[12:18] <Matt|> |trey|, top", "Matt|", "|trey|, top", False),
    ],
)
def test_line_forms(line: str, nick: str, text: str, action: bool) -> None:
    parsed = irc._parse(line)
    assert parsed is not None
    assert (parsed.nick, parsed.text, parsed.action) == (nick, text, action)


@pytest.mark.parametrize(
    "line",
    [
        "=== topyli [~juha@host]  has left #ubuntu []",
        "[12:18] -!- nick [u@h] has joined #chan",
        "*** nick is now known as other",
        "--- Day changed Mon Mar 11 2024",
    ],
)
def test_system_lines(line: str) -> None:
    parsed = irc._parse(line)
    assert parsed is not None
    assert parsed.nick is None


@pytest.mark.parametrize("line", ["hello", "1002 1003 -", "[99:99] <a> b", "[12:00] nobody"])
def test_not_irc_lines(line: str) -> None:
    assert irc._parse(line) is None


@pytest.mark.slow
def test_real_ubuntu_logs(shared_data: Path) -> None:
    folder = shared_data / "chat" / "ubuntu-irc" / "dev"
    ctx = ReadContext()
    records = records_of(folder, ctx)
    # 12,500 lines in the 10 logs: 856 system lines (joins, parts, nick changes), 3 empty
    # messages (`[12:15] <opteron>`) and 2 empty actions (`* homejoe`) carry no text.
    assert len(records) == 12_500 - 856 - 3 - 2 == 11_639
    # The reply-link annotations beside the logs are not logs.
    assert len(ctx.problems) == 10
    assert all(p.path.endswith(".annotation.txt") for p in ctx.problems)

    by_file: dict[str, list[Record]] = {}
    for record in records:
        by_file.setdefault(record.ref.rsplit(":", 1)[0], []).append(record)
    assert len(by_file) == 10
    late = by_file["dev/2011-11-13_02.raw.txt"]
    assert len(late) == 1219
    # The log starts the evening before the day in its name and runs past midnight.
    first, last = late[0], late[-1]
    assert (first.time, first.ref, first.author) == (
        utc(2011, 11, 12, 21, 29),
        "dev/2011-11-13_02.raw.txt:1",
        "monsemannen",
    )
    assert first.mentions == ("guntbert",)  # "@guntbert: here's my sources.list"
    assert (last.time, last.ref, last.author, last.text) == (
        utc(2011, 11, 13, 3, 26),
        "dev/2011-11-13_02.raw.txt:1250",
        "sean_",
        "Hello.",
    )
    old = by_file["dev/2004-11-15_03.raw.txt"]  # a 12-hour clock: 12:18 ... 12:59, 01:00 ...
    assert (old[0].time, old[-1].time) == (utc(2004, 11, 15, 0, 18), utc(2004, 11, 15, 4, 51))
    assert (old[0].author, old[0].text) == ("|trey|", "usual, quite stable though  :)")
    assert old[0].mentions == ("usual",)

    for name, file_records in by_file.items():
        times = [r.time for r in file_records]
        assert times == sorted(times), name  # type: ignore[type-var]
        # The annotated part starts at line 1001 (message 1000, counted from 0) at the hour
        # and on the date that the file's name gives.
        stem = name.rsplit("/", 1)[1]
        day, hour = stem[:10], int(stem[11:13])
        first_annotated = next(r for r in file_records if int(r.ref.rsplit(":", 1)[1]) >= 1001)
        assert first_annotated.time is not None
        assert (first_annotated.time.date().isoformat(), first_annotated.time.hour) == (day, hour)

    authors = Counter(r.author for r in records)
    assert authors.most_common(3) == [("ikonia", 283), ("ActionParsnip", 275), ("bob2", 231)]
    assert sum(r.meta["action"] for r in records) == 27


# -- a log saved again from a later line -------------------------------------------------------


def said(*texts: str) -> list[tuple[int, str]]:
    return [(n, irc.line_print("a", text)) for n, text in enumerate(texts, 1)]


def held_of(lines: list[tuple[int, str]]) -> dict[int, str]:
    return dict(lines)


LOG = [f"message {n}" for n in range(1, 41)]


@pytest.mark.parametrize(
    ("lines", "shift"),
    [
        (said(*LOG), 0),  # read again as it was
        (said(*LOG, "later", "and later"), 0),  # grown
        (said(*LOG[10:]), 10),  # its first ten lines cut off
        (said(*LOG[10:], "later"), 10),  # cut and grown
        (said("earlier", *LOG), -1),  # a line put before its first
        (said(*LOG[:3], "edited", *LOG[4:]), 0),  # one line changed: an edit, as always
    ],
)
def test_shift_of_a_log_against_what_the_store_holds(
    lines: list[tuple[int, str]], shift: int
) -> None:
    assert irc.shift_of(lines, held_of(said(*LOG))) == shift


def test_shift_of_nothing_held_is_none_needed() -> None:
    assert irc.shift_of(said(*LOG), {}) == 0
    assert irc.shift_of([], held_of(said(*LOG))) == 0


def test_a_log_moved_otherwise_is_refused_with_the_way_on() -> None:
    held = held_of(said(*LOG))
    scrambled = irc.shift_of(said(*LOG[20:], *LOG[:20]), held)
    assert isinstance(scrambled, str)
    assert scrambled.startswith("most of its lines are stored under other line numbers")
    other = irc.shift_of(said(*(f"other {n}" for n in range(40))), held)
    assert isinstance(other, str)
    assert other.startswith("most of its lines differ from the messages stored")
    for reason in (scrambled, other):
        assert "under another name or scope" in reason
        assert "forget the source" in reason


def test_common_texts_do_not_outvote_the_shift() -> None:
    log = [("ok" if n % 3 == 0 else f"message {n}") for n in range(1, 61)]
    assert irc.shift_of(said(*log[7:]), held_of(said(*log))) == 7


def test_a_held_log_cut_at_its_start_keys_its_lines_by_their_first_numbers(
    tmp_path: Path,
) -> None:
    lines = [f"[10:{n:02d}] <{'ab'[n % 2]}> line {n}" for n in range(1, 31)]
    whole = log(tmp_path, "2024-01-02.log", *lines)
    stored = {r.id or "": r for r in records_of(whole)}
    held = {int(k.rsplit(":", 1)[1]): irc.line_print(r.author, r.text) for k, r in stored.items()}
    cut = tmp_path / "later"
    cut.mkdir()
    saved = log(cut, "2024-01-02.log", *lines[5:], "[10:59] <a> new")
    calls: list[tuple[str, str]] = []

    def of_source(scope: str) -> irc.LogLines:
        def of_log(stem: str) -> dict[int, str]:
            calls.append((scope, stem))
            return held

        return of_log

    [stream] = irc.IrcConnector(held=of_source).read(saved, ReadContext())
    assert calls == []  # nothing is looked up before the records are read
    read = list(stream.records)
    assert calls == [("irc:2024-01-02", "2024-01-02")]
    assert [r.id for r in read] == [f"2024-01-02:{n}" for n in range(6, 32)]
    assert all(r.text == stored[r.id or ""].text for r in read[:-1])
    # Where it was read from is where the line is now.
    assert [r.ref for r in read[:2]] == ["2024-01-02.log:1", "2024-01-02.log:2"]
    assert (read[-1].ref, read[-1].text) == ("2024-01-02.log:26", "new")


def test_a_held_log_that_moved_otherwise_is_reported_and_not_read(tmp_path: Path) -> None:
    lines = [f"[10:{n:02d}] <a> line {n}" for n in range(1, 31)]
    held = {n: irc.line_print("a", f"line {n}") for n in range(1, 31)}
    saved = log(tmp_path, "2024-01-02.log", *lines[15:], *lines[:15])
    ctx = ReadContext()
    [stream] = irc.IrcConnector(held=lambda scope: lambda stem: held).read(saved, ctx)
    assert list(stream.records) == []
    [problem] = ctx.problems
    assert (problem.path, problem.where) == (str(saved), "file")
    assert "not read, so that the messages stored under those numbers" in problem.reason


def test_an_ingest_of_a_log_saved_from_a_later_line_keeps_what_the_store_holds(
    tmp_path: Path,
) -> None:
    """Through the ingest a user runs (no reader built by hand): a store that holds a log
    binds the IRC reader to it, and a copy cut at its start changes nothing."""
    lines = [f"[10:{n:02d}] <{'abc'[n % 3]}> said line {n}" for n in range(1, 41)]
    (tmp_path / "first").mkdir()
    (tmp_path / "cut").mkdir()
    log(tmp_path / "first", "2024-01-02.log", *lines)
    log(tmp_path / "cut", "2024-01-02.log", *lines[12:], "[10:59] <a> a new line")
    with stratamem.open(tmp_path / "store.db", embedder=None) as memory:
        memory.ingest(tmp_path / "first" / "2024-01-02.log")
        before = _stored_texts(memory, "irc:2024-01-02")
        [again] = memory.ingest(tmp_path / "cut" / "2024-01-02.log").sources
        assert (again.new, again.updated) == (1, 0)
        after = _stored_texts(memory, "irc:2024-01-02")
        assert {key: after[key] for key in before} == before


def _stored_texts(memory: stratamem.Memory, scope: str) -> dict[str, str]:
    sid = source_id_for(scope)
    keys = list(memory.store.record_keys(sid))
    return {s.key: s.record.text for s in memory.store.records_by_key(sid, keys)}


@pytest.mark.slow
def test_a_real_log_saved_again_from_a_later_line_rewrites_nothing(
    shared_data: Path, tmp_path: Path
) -> None:
    real = shared_data / "chat" / "ubuntu-irc" / "dev" / "2011-11-13_02.raw.txt"
    lines = real.read_bytes().splitlines(keepends=True)
    first, again, later = (tmp_path / name for name in ("first", "again", "later"))
    # Each part holds line 1001, the first at the hour its name gives (02:00): the lines are put
    # on the same days in all of them.
    for folder, part in ((first, lines[:1100]), (again, lines[100:1100]), (later, lines[100:])):
        folder.mkdir()
        (folder / real.name).write_bytes(b"".join(part))
    scope = "irc:2011-11-13_02.raw"
    with stratamem.open(tmp_path / "store.db", embedder=None) as memory:

        def ingest(folder: Path) -> SourceResult:
            # As `stratamem ingest` does: the reader is bound to what the store holds.
            report = memory.ingest(folder / real.name)
            assert report.problems == []
            [result] = report.sources
            assert result.scope == scope
            return result

        ingest(first)
        before = _stored_texts(memory, scope)
        assert len(before) > 800
        # The first 100 lines cut off: every record is one the store holds, none is changed.
        cut = ingest(again)
        assert (cut.new, cut.updated) == (0, 0)
        assert _stored_texts(memory, scope) == before
        # Cut and grown: only the lines after the first 1,100 are new.
        grown = ingest(later)
        after = _stored_texts(memory, scope)
        assert grown.new == len(after) - len(before) > 100
        assert grown.updated == 0
        assert {key: after[key] for key in before} == before
        # The same log read whole adds nothing: its lines are keyed as they were.
        whole = memory.ingest(real)
        assert [(s.new, s.updated) for s in whole.sources] == [(0, 0)]


def test_a_writers_ingest_says_nothing_of_a_hidden_log_of_the_same_name(tmp_path: Path) -> None:
    """The check against what the store holds looks only at sources the writer may write: a
    write principal's ingest (as the server runs it: the owner's store, the writer's admit)
    of a reordered copy of a log the owner holds privately reports what it would in a store
    without the owner's log."""
    lines = [f"[10:{n:02d}] <{'abc'[n % 3]}> private line {n}" for n in range(1, 41)]
    (tmp_path / "owner").mkdir()
    (tmp_path / "moved").mkdir()
    owner_log = log(tmp_path / "owner", "2024-01-02.log", *lines)
    moved = log(tmp_path / "moved", "2024-01-02.log", *lines[20:], *lines[:20])

    def writer_report(db: Path, *, held: bool) -> list[str]:
        with stratamem.open(db, embedder=None) as memory:
            memory.ingest(owner_log, access="private", scope=None if held else "irc:other")
            memory.principals.add("bot", "team", write=True)
            bot = memory.store.get_principal("bot")

            def admit(before: Source | None, after: Source) -> tuple[str, ...] | None:
                return admit_source(bot, before, after, named=False)

            report = memory.ingest(moved, parallel=False, admit=admit)
            # (Whether the write itself is refused is the write policy's, not the reader's.)
            return [str(p) for p in report.problems]

    assert writer_report(tmp_path / "a.db", held=True) == writer_report(
        tmp_path / "b.db", held=False
    )
