"""Bad input in the Markdown, IRC and mail connectors costs only the item it is in.

Each test reproduces one way a notes folder, a log or a mailbox used to abort the whole ingest
(or run out of bounds) and checks that the item is skipped with its file and place, and that
the rest of the source and the other sources are read.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.ingest.connectors import email as mail
from stratamem.ingest.connectors import irc, markdown
from stratamem.ingest.connectors.eml import EmlConnector
from stratamem.ingest.connectors.mailbody import html_to_text
from stratamem.ingest.connectors.maildir import MaildirConnector
from stratamem.ingest.connectors.mbox import MboxConnector
from stratamem.ingest.model import Connector, ReadContext, Record
from stratamem.ingest.pipeline import IngestReport
from suite import hang_guard

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")

BOMB = (
    "---\n"
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
    "j: &j [*i,*i,*i,*i,*i,*i,*i,*i,*i]\n"
    "---\n"
    "The body survives.\n"
)
MESSAGE = (
    "From: Ann <ann@example.org>\nTo: bob@example.org\nSubject: {subject}\n"
    "Message-ID: <{id}@example.org>\nDate: {date}\n{headers}\n{body}\n"
)


def message(
    id: str = "m1",
    *,
    subject: str = "hello",
    date: str = "Mon, 4 Mar 2024 09:15:00 -0500",
    headers: str = "",
    body: str = "text",
) -> str:
    return MESSAGE.format(id=id, subject=subject, date=date, headers=headers, body=body)


def mbox(*messages: str) -> bytes:
    return "".join(f"From x@example.org Mon Mar  4 14:15:00 2024\n{m}\n" for m in messages).encode(
        "utf-8", "surrogateescape"
    )


def ingest(memory: stratamem.Memory, path: Path, kind: str, **options: Any) -> IngestReport:
    report = memory.ingest(path, format=kind, trees=False, parallel=False, **options)
    assert all(p.where for p in report.problems), report.problems
    return report


def read(
    connector: Connector, path: Path, ctx: ReadContext | None = None
) -> tuple[list[Record], ReadContext]:
    ctx = ctx or ReadContext()
    records = [record for stream in connector.read(path, ctx) for record in stream.records]
    assert all(p.where for p in ctx.problems), ctx.problems
    return records, ctx


def places(ctx: ReadContext) -> list[tuple[str, str]]:
    return [(p.path, p.where) for p in ctx.problems]


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def utf8(record: Record) -> None:
    for text in (record.text, record.ref, record.title or "", record.id or "", record.quoted):
        text.encode("utf-8")  # no lone surrogates: the store could not write them


# -- dates at the edge of the calendar -------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01 00:00:00+05:00",
        "'0001-01-01T00:00:00+05:00'",
        "9999-12-31 23:59:59-05:00",
        "'9999-12-31T23:59:59-05:00'",
    ],
)
def test_front_matter_date_off_the_calendar_keeps_the_note(
    tmp_memory: stratamem.Memory, tmp_path: Path, value: str
) -> None:
    notes = tmp_path / "notes"
    edge = write(notes / "edge.md", f"---\ndate: {value}\ntitle: Edge\n---\nat the edge\n")
    write(notes / "next.md", "# Next\nread after it\n")
    when = datetime(2024, 1, 5, tzinfo=UTC).timestamp()
    os.utime(edge, (when, when))
    records, ctx = read(markdown.MarkdownConnector(), notes)
    assert [r.title for r in records] == ["Edge", "Next"]
    assert records[0].time == datetime(2024, 1, 5, tzinfo=UTC)  # the file's time instead
    assert places(ctx) == [(str(edge), "front matter")]
    assert "outside the calendar" in ctx.problems[0].reason

    report = ingest(tmp_memory, notes, "markdown")
    assert report.records == 2
    assert not report.failed


@pytest.mark.parametrize("stamp", ["0001-01-01 00:10:00+05:00", "9999-12-31 23:59:59-05:00"])
def test_irc_line_off_the_calendar_is_one_skipped_line(tmp_path: Path, stamp: str) -> None:
    file = write(
        tmp_path / "2024-03-18.log", f"[10:00] <a> before\n[{stamp}] <b> x\n[10:05] <c> after\n"
    )
    records, ctx = read(irc.IrcConnector(), file)
    assert [r.text for r in records] == ["before", "after"]
    assert places(ctx) == [(str(file), "line 2")]
    assert "outside the calendar" in ctx.problems[0].reason


def test_irc_impossible_zone_is_one_skipped_line(tmp_path: Path) -> None:
    file = write(tmp_path / "2024-03-18.log", "[2024-03-18 10:00+9999] <b> x\n[10:05] <c> y\n")
    records, ctx = read(irc.IrcConnector(), file)
    assert [r.text for r in records] == ["y"]
    assert [(p.where, p.reason) for p in ctx.problems] == [
        ("line 1", "no such time zone: +9999; line skipped")
    ]


def test_irc_clock_running_off_the_last_day_keeps_the_lines_without_a_time(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    late = write(
        logs / "9999-12-31.log", "[23:58] <a> x\n[23:59] <b> y\n[00:01] <a> z\n[00:02] <b> w\n"
    )
    write(logs / "early" / "0001-01-01_05.log", "[23:00] <a> evening\n[05:00] <b> morning\n")
    records, ctx = read(irc.IrcConnector(), logs)
    assert [(r.text, r.time) for r in records] == [
        ("x", datetime(9999, 12, 31, 23, 58, tzinfo=UTC)),
        ("y", datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
        ("z", None),
        ("w", None),
        ("evening", None),  # the evening before the first day of the calendar
        ("morning", datetime(1, 1, 1, 5, tzinfo=UTC)),
    ]
    assert places(ctx) == [
        (str(late), "line 3"),
        (str(logs / "early" / "0001-01-01_05.log"), "line 1"),
    ]

    report = ingest(tmp_memory, logs, "irc")
    assert report.records == 6
    assert not report.failed


def test_mail_dates_off_the_calendar_keep_the_message(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.mbox",
        mbox(
            message("m1", date="Mon, 1 Jan 0001 00:00:00 +0500"),
            message("m2", date="Fri, 31 Dec 9999 23:59:59 -0500"),
        ),
    )
    records, ctx = read(MboxConnector(), path)
    assert [r.id for r in records] == ["m1@example.org", "m2@example.org"]
    assert records[1].time is None
    assert ctx.problems == []


# -- YAML alias bombs ------------------------------------------------------------------------


def test_yaml_alias_bomb_is_refused_fast_and_the_note_kept_as_text(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    bomb = write(notes / "bomb.md", BOMB)
    write(notes / "other.md", "---\ntags: [a]\n---\nanother note\n")
    # Nine billion values would take hours and terabytes.
    with hang_guard("reading an alias bomb"):
        records, ctx = read(markdown.MarkdownConnector(), notes)
    assert [r.text for r in records] == [BOMB, "another note\n"]
    assert records[0].meta["front_matter"] == {}
    assert records[1].tags == ("a",)
    [problem] = ctx.problems
    assert (problem.path, problem.where) == (str(bomb), "front matter")
    assert "aliases" in problem.reason
    assert problem.reason.endswith("kept as text")

    report = ingest(tmp_memory, notes, "markdown")
    assert report.records == 2


@pytest.mark.parametrize(
    ("front", "reason"),
    [
        ("a: &a [1, *a]\n", "an alias refers to a collection it is part of"),
        ("x: &x {k: *x}\n", "an alias refers to a collection it is part of"),
        ("tags: " + "[" * 500 + "]" * 500 + "\n", "nested more than 32 levels deep"),
        ("tags: [" + ", ".join(map(str, range(20_000))) + "]\n", "more than 10,000 values"),
        ("date: 2024-02-30\n", "day is out of range for month"),
    ],
)
def test_front_matter_past_the_bounds_is_kept_as_text(
    tmp_path: Path, front: str, reason: str
) -> None:
    file = write(tmp_path / "n.md", f"---\n{front}---\nbody\n")
    records, ctx = read(markdown.MarkdownConnector(), file)
    assert [r.text for r in records] == [file.read_text("utf-8")]
    [problem] = ctx.problems
    assert problem.where == "front matter"
    assert reason in problem.reason


def test_front_matter_values_of_odd_types_are_read_as_text(tmp_path: Path) -> None:
    huge = "0x" + "f" * 5000  # an integer str() refuses to write
    front = f"title: {huge}\ntags: {{a: [1, 2]}}\nauthor: {{x: 1}}\naliases: 12\ndate: [1]\n"
    file = write(tmp_path / "n.md", f"---\n{front}---\nbody\n")
    [record], ctx = read(markdown.MarkdownConnector(), file)
    assert record.title == hex(int(huge, 16))
    assert record.meta["aliases"] == ["12"]
    assert ctx.problems == []


# -- lone surrogates -------------------------------------------------------------------------


def test_names_that_are_not_utf8_are_cited_with_replacement_characters(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    name = os.fsdecode(b"caf\xe9.md")
    write(notes / name, "# Caf\nnote\n")
    [record], _ = read(markdown.MarkdownConnector(), notes)
    assert record.ref == "notes/caf\ufffd.md"
    utf8(record)
    assert ingest(tmp_memory, notes, "markdown").records == 1

    logs = tmp_path / "logs"
    write(logs / os.fsdecode(b"2024-03-18-\xff.log"), "[10:00] <a> hi\n")
    [line], _ = read(irc.IrcConnector(), logs)
    assert line.ref == "logs/2024-03-18-\ufffd.log:1"
    utf8(line)
    assert ingest(tmp_memory, logs, "irc").records == 1

    box = tmp_path / "Maildir"
    write(box / "new" / os.fsdecode(b"17\xff.host"), message())
    (box / "cur").mkdir()
    [mailed], _ = read(MaildirConnector(), box)
    assert mailed.meta["file"] == "new/17\ufffd.host"
    utf8(mailed)
    assert ingest(tmp_memory, box, "maildir").records == 1


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ('Content-Type: text/plain; charset="utf-7"', "+2AA- lone"),
        ('Content-Type: text/plain; charset="unicode_escape"', "\\ud800 escaped"),
        ("", "=?utf-7?B?K2RBQS0=?= body"),
    ],
)
def test_mail_charsets_that_yield_lone_surrogates(
    tmp_memory: stratamem.Memory, tmp_path: Path, headers: str, body: str
) -> None:
    subject = "=?utf-7?Q?+2AA-?= subject"
    path = write(tmp_path / "a.mbox", mbox(message(headers=headers, body=body, subject=subject)))
    [record], ctx = read(MboxConnector(), path)
    utf8(record)
    assert ctx.problems == []
    assert ingest(tmp_memory, path, "mbox").records == 1


# -- regular files only ----------------------------------------------------------------------


@needs_fifo
def test_a_fifo_in_a_maildir_is_reported_not_opened(
    tmp_memory: stratamem.Memory, fixtures_dir: Path, tmp_path: Path
) -> None:
    box = Path(shutil.copytree(fixtures_dir / "email" / "Maildir", tmp_path / "Maildir"))
    expected, _ = read(MaildirConnector(), box)
    fifo = box / "new" / "1709990001.M5P1.laptop"
    os.mkfifo(fifo)
    records, ctx = read(MaildirConnector(), box)
    assert records == expected
    assert places(ctx) == [(str(fifo), "file")]
    assert ctx.problems[0].reason == "not a regular file (a FIFO)"
    report = ingest(tmp_memory, box, "maildir")
    assert report.records == len(expected)


@needs_fifo
def test_fifos_in_notes_logs_and_eml_folders_are_reported_not_opened(
    tmp_memory: stratamem.Memory, fixtures_dir: Path, tmp_path: Path
) -> None:
    notes = Path(shutil.copytree(fixtures_dir / "markdown" / "til-like", tmp_path / "notes"))
    os.mkfifo(notes / "git" / "pipe.md")
    os.mkfifo(notes / "_file_added_dates.tsv.new")
    report = ingest(tmp_memory, notes, "markdown")
    assert [(p.path, p.where, p.reason) for p in report.problems] == [
        (str(notes / "git" / "pipe.md"), "file", "not a regular file (a FIFO)")
    ]
    assert report.records == 4

    logs = Path(shutil.copytree(fixtures_dir / "irc" / "phoenix-dev", tmp_path / "logs"))
    os.mkfifo(logs / "2024-03-20.log")
    records, ctx = read(irc.IrcConnector(), logs)
    assert (str(logs / "2024-03-20.log"), "file") in places(ctx)
    assert len(records) == 13

    folder = Path(shutil.copytree(fixtures_dir / "email" / "eml", tmp_path / "eml"))
    os.mkfifo(folder / "pipe.eml")
    records, ctx = read(EmlConnector(), folder)
    assert len(records) == 2
    assert places(ctx) == [(str(folder / "pipe.eml"), "file")]


@needs_fifo
@pytest.mark.parametrize(
    ("kind", "name"), [("markdown", "x.md"), ("irc", "x.log"), ("mbox", "x.mbox"), ("eml", "x.eml")]
)
def test_a_fifo_given_as_the_path_is_refused(
    tmp_memory: stratamem.Memory, tmp_path: Path, kind: str, name: str
) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    report = ingest(tmp_memory, fifo, kind)
    [failed] = report.sources
    assert failed.error is not None
    assert "not a regular file (a FIFO)" in failed.error


# -- items over the size limit ---------------------------------------------------------------


def test_note_over_the_limit_is_skipped_and_named(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    big = write(notes / "big.md", "# Big\n" + "x" * 5000)
    write(notes / "small.md", "# Small\nfits\n")
    records, ctx = read(markdown.MarkdownConnector(), notes, ReadContext(max_item_bytes=1000))
    assert [r.title for r in records] == ["Small"]
    assert places(ctx) == [(str(big), "file")]
    assert ctx.problems[0].reason.startswith("5,006 bytes is over the 1,000-byte limit")


def test_mbox_message_over_the_limit_is_skipped_and_named(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.mbox",
        mbox(
            message("m1"), message("m2", body="y" * 5000), message("m3", body="z" * 90 + "\n" * 9)
        ),
    )
    records, ctx = read(MboxConnector(), path, ReadContext(max_item_bytes=1000))
    assert [r.id for r in records] == ["m1@example.org", "m3@example.org"]
    assert places(ctx) == [(str(path), "message 2 (line 10)")]
    assert "1,000-byte limit" in ctx.problems[0].reason


def test_mbox_line_over_the_limit_is_never_held(tmp_path: Path) -> None:
    path = write(tmp_path / "a.mbox", mbox(message("m1", body="w" * 50_000), message("m2")))
    records, ctx = read(MboxConnector(), path, ReadContext(max_item_bytes=4096))
    assert [r.id for r in records] == ["m2@example.org"]
    assert places(ctx) == [(str(path), "message 1 (line 1)")]


def test_maildir_and_eml_files_over_the_limit(tmp_path: Path) -> None:
    box = tmp_path / "Maildir"
    big = write(box / "new" / "1.big", message("m1", body="b" * 5000))
    write(box / "new" / "2.small", message("m2"))
    records, ctx = read(MaildirConnector(), box, ReadContext(max_item_bytes=1000))
    assert [r.id for r in records] == ["m2@example.org"]
    assert places(ctx) == [(str(big), "file")]

    eml = write(tmp_path / "big.eml", message("m3", body="c" * 5000))
    records, ctx = read(EmlConnector(), eml, ReadContext(max_item_bytes=1000))
    assert records == []
    assert places(ctx) == [(str(eml), "file")]


def test_irc_line_over_the_limit_is_skipped(tmp_path: Path) -> None:
    file = write(tmp_path / "2024-03-18.log", f"[10:00] <a> {'x' * 5000}\n[10:01] <b> short\n")
    records, ctx = read(irc.IrcConnector(), file, ReadContext(max_item_bytes=1000))
    assert [r.text for r in records] == ["short"]
    assert places(ctx) == [(str(file), "line 1")]
    assert "5,013 bytes" in ctx.problems[0].reason


# -- any failure of one item -----------------------------------------------------------------


def test_any_failure_of_one_note_skips_only_that_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = markdown._mask_code

    def failing(text: str) -> str:
        if "explode" in text:
            raise TypeError("unexpected")
        return real(text)

    monkeypatch.setattr(markdown, "_mask_code", failing)
    notes = tmp_path / "notes"
    bad = write(notes / "a.md", "explode\n")
    write(notes / "b.md", "fine\n")
    records, ctx = read(markdown.MarkdownConnector(), notes)
    assert [r.text for r in records] == ["fine\n"]
    assert [(p.path, p.where, p.reason) for p in ctx.problems] == [
        (str(bad), "file", "cannot be read (TypeError: unexpected)")
    ]


def test_any_failure_of_one_irc_line_skips_only_that_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = irc._mentions

    def failing(entry: Any, speakers: Any, present: Any) -> tuple[str, ...]:
        if entry.text == "explode":
            raise KeyError("boom")
        return real(entry, speakers, present)

    monkeypatch.setattr(irc, "_mentions", failing)
    file = write(tmp_path / "2024-03-18.log", "[10:00] <a> explode\n[10:01] <b> fine\n")
    records, ctx = read(irc.IrcConnector(), file)
    assert [r.text for r in records] == ["fine"]
    assert places(ctx) == [(str(file), "line 1")]


def test_any_failure_of_one_message_names_its_message_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = mail._body_parts

    def failing(msg: Any) -> tuple[str, str, str, list[str]]:
        if msg["Subject"] == "explode":
            raise RecursionError
        return real(msg)

    monkeypatch.setattr(mail, "_body_parts", failing)
    path = write(tmp_path / "a.mbox", mbox(message("m1", subject="explode"), message("m2")))
    records, ctx = read(MboxConnector(), path)
    assert [r.id for r in records] == ["m2@example.org"]
    assert [(p.where, p.reason) for p in ctx.problems] == [
        ("message 1 (line 1) <m1@example.org>", "nested too deeply to read")
    ]

    eml = write(tmp_path / "x.eml", message("m3", subject="explode"))
    records, ctx = read(EmlConnector(), eml)
    assert records == []
    assert places(ctx) == [(str(eml), "<m3@example.org>")]


@pytest.mark.parametrize(
    ("depth", "reason"),
    [
        (65, "MIME parts nested more than 64 deep"),
        (1000, "MIME parts nested more than 64 deep"),
        (3000, "more than 2,000 MIME boundaries"),
    ],
)
def test_deeply_nested_multipart_costs_only_its_message(
    tmp_path: Path, depth: int, reason: str
) -> None:
    opening = "".join(
        f'Content-Type: multipart/mixed; boundary="b{i}"\n\n--b{i}\n' for i in range(depth)
    )
    nested = opening + "Content-Type: text/plain\n\ninner\n"
    path = write(tmp_path / "a.mbox", mbox(message("m1", headers=nested, body=""), message("m2")))
    with hang_guard("reading nested multiparts"):
        records, ctx = read(MboxConnector(), path)
    assert [r.id for r in records] == ["m2@example.org"]
    assert [(p.where, p.reason) for p in ctx.problems] == [("message 1 (line 1)", reason)]


def test_many_sibling_multiparts_are_read(tmp_path: Path) -> None:
    parts = "".join(
        f'--top\nContent-Type: multipart/alternative; boundary="a{i}"\n\n'
        f"--a{i}\nContent-Type: text/plain\n\npart {i}\n--a{i}--\n"
        for i in range(100)
    )
    headers = 'Content-Type: multipart/digest; boundary="top"\n'
    path = write(tmp_path / "a.mbox", mbox(message("m1", headers=headers, body=parts + "--top--")))
    [record], ctx = read(MboxConnector(), path)
    assert "part 99" in record.text
    assert ctx.problems == []


# -- linear time -----------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["<a b='", "<a", '<a b="<c>"', "<!--", "</", "<?"])
def test_html_that_never_closes_reads_in_linear_time(unit: str) -> None:
    # html.parser took minutes for 200 KB of these (it rescans the rest at every "<"), so
    # hours for 800 KB.
    with hang_guard("reading HTML that never closes"):
        html_to_text(unit * (800_000 // len(unit)))


def test_headers_built_to_backtrack_read_fast(tmp_path: Path) -> None:
    headers = (
        "X-Subject-Too: x\n"
        f"Cc: {'a' * 200_000}@{'b' * 1000}\n"
        f"In-Reply-To: {'=?a?q?' * 30_000}\n"
        f"References: {' '.join(f'<{i}@x>' for i in range(5000))}"
    )
    path = write(
        tmp_path / "a.mbox", mbox(message("m1", subject="=?a?q?" * 30_000, headers=headers))
    )
    with hang_guard("reading backtracking headers"):
        [record], _ = read(MboxConnector(), path)
    assert len(record.meta["references"]) == 5000


@pytest.mark.parametrize("unit", ["`a``b```c", "[a](b (", "[a](<", "[[a", "# ", "[a](b"])
def test_one_long_note_line_reads_in_linear_time(tmp_path: Path, unit: str) -> None:
    file = write(tmp_path / "n.md", "# T\n" + unit * (4_000_000 // len(unit)) + "\n")
    with hang_guard("reading one long note line"):
        read(markdown.MarkdownConnector(), file)
