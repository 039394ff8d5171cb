"""Folders of mailboxes: a folder of mbox files (one per month, as list archives come) and a
Maildir++ tree, read through the connector, the Python API and the CLI."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click.testing
import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.errors import SourceFormatError
from stratamem.ingest import registry
from stratamem.ingest.connectors.maildir import MaildirConnector
from stratamem.ingest.connectors.mbox import MboxConnector, detect_mbox
from stratamem.ingest.model import ReadContext, Record, SourceStream

FOLDERS = Path(__file__).resolve().parents[1] / "fixtures" / "email" / "folders"
MONTHLY = FOLDERS / "monthly"
ARCHIVE = FOLDERS / "archive"
MAILDIRPP = FOLDERS / "maildirpp"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"

MONTHLY_SCOPES = {
    "mbox:monthly/2001-December": 1,
    "mbox:monthly/2001-November": 3,
    "mbox:monthly/2001-October": 2,
}
RELEASE_PLAN = "20011001091502.A1234@example.org"  # October; answered in November

Run = Callable[..., click.testing.Result]


def read_all(
    connector: MboxConnector | MaildirConnector, path: Path, ctx: ReadContext
) -> list[tuple[SourceStream, list[Record]]]:
    return [(stream, list(stream.records)) for stream in connector.read(path, ctx)]


@pytest.fixture
def memory(store_location: str, locations: Any) -> Iterator[stratamem.Memory]:
    where = store_location if locations.is_postgres(store_location) else ":memory:"
    with stratamem.open(where, embedder=None) as opened:
        yield opened


@pytest.fixture
def run(store_location: str) -> Run:
    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", store_location, *args])

    return invoke


def mbox_message(sender: str, subject: str, message_id: str, day: int) -> str:
    return (
        f"From {sender} Mon Oct {day:2d} 09:00:00 2001\n"
        f"From: {sender}\n"
        f"Date: Mon, {day:02d} Oct 2001 09:00:00 +0000\n"
        f"Subject: {subject}\n"
        f"Message-ID: <{message_id}>\n"
        "\n"
        f"About {subject}.\n"
        "\n"
    )


# --------------------------------------------------------------------------- detection


def test_a_folder_of_monthly_mbox_files_is_mbox() -> None:
    assert detect_mbox(MONTHLY) == 65
    assert registry.detect(MONTHLY).name == "mbox"
    assert registry.detect(ARCHIVE).name == "mbox"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (EXAMPLES / "notes", "markdown"),
        (EXAMPLES / "mail" / "team.mbox", "mbox"),
        (FOLDERS.parent / "eml", "eml"),
        (FOLDERS.parent / "Maildir", "maildir"),
        (MAILDIRPP, "maildir"),
    ],
)
def test_other_folders_keep_their_connector(path: Path, name: str) -> None:
    assert registry.detect(path).name == name
    if path.is_dir() and name != "mbox":
        assert detect_mbox(path) == 0


def test_a_markdown_vault_holding_mbox_files_stays_markdown(tmp_path: Path) -> None:
    (tmp_path / ".obsidian").mkdir()
    shutil.copy(MONTHLY / "2001-October.txt", tmp_path)
    shutil.copy(MONTHLY / "2001-November.txt", tmp_path)
    (tmp_path / "Index.md").write_text("# Lists\n")
    assert registry.detect(tmp_path).name == "markdown"


def test_a_folder_holding_a_maildir_or_eml_files_is_not_mbox(tmp_path: Path) -> None:
    shutil.copytree(MONTHLY, tmp_path / "lists")
    shutil.copytree(FOLDERS.parent / "eml", tmp_path / "lists" / "saved")
    assert detect_mbox(tmp_path / "lists") == 0
    shutil.copytree(MONTHLY, tmp_path / "mail")
    (tmp_path / "mail" / "INBOX" / "cur").mkdir(parents=True)
    assert detect_mbox(tmp_path / "mail") == 0


def test_a_folder_of_mostly_other_files_is_not_mbox(tmp_path: Path) -> None:
    shutil.copy(MONTHLY / "2001-December", tmp_path)
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("From the desk of Alice: notes about Phoenix.\n")
    assert detect_mbox(tmp_path) == 0


# --------------------------------------------------------------------------- one source per file


def test_each_mbox_file_of_a_folder_is_one_source() -> None:
    ctx = ReadContext()
    read = read_all(MboxConnector(), MONTHLY, ctx)
    assert ctx.problems == []
    assert {stream.scope: len(records) for stream, records in read} == MONTHLY_SCOPES
    assert [(stream.title, stream.location) for stream, _ in read] == [
        ("2001-December", str(MONTHLY / "2001-December")),
        ("2001-November.txt", str(MONTHLY / "2001-November.txt")),
        ("2001-October.txt", str(MONTHLY / "2001-October.txt")),
    ]
    records = {record.id: record for _, found in read for record in found}
    release = records[RELEASE_PLAN]
    # The record shape of a single mbox file: id = Message-ID, ref = <file path>#<id>.
    assert release.ref == f"{MONTHLY / '2001-October.txt'}#{RELEASE_PLAN}"
    assert release.author == "Alice Chen"
    assert release.meta["file"] == "2001-October.txt"
    assert release.meta["index"] == 1
    # The November reply finds its October root: the folder's sources share one thread map.
    reply = records["20011101083000.GA77@carol.example.org"]
    assert reply.thread == RELEASE_PLAN
    assert "\nFrom now on the manual is frozen." in reply.text  # ">From " unescaped
    # A message without a Message-ID keeps the content-hash id.
    [unnamed] = [record for record in records.values() if record.title == "[dev] Mirror list"]
    assert (unnamed.id or "").startswith("sha256:")
    assert unnamed.ref == f"{MONTHLY / '2001-November.txt'}#{unnamed.id}"


def test_a_month_with_a_stray_first_line_is_still_read(tmp_path: Path) -> None:
    folder = tmp_path / "monthly"
    shutil.copytree(MONTHLY, folder)
    october = folder / "2001-October.txt"
    october.write_bytes(b"Content-Type: text/plain\n" + october.read_bytes())
    november = folder / "2001-November.txt"
    november.write_bytes(b"\n" * 14 + b"<pre>\n" + november.read_bytes())  # line 16: still in
    assert detect_mbox(folder) == 65
    ctx = ReadContext()
    read = read_all(MboxConnector(), folder, ctx)
    assert {stream.scope: len(records) for stream, records in read} == MONTHLY_SCOPES
    assert [(Path(p.path).name, p.where, p.reason) for p in ctx.problems] == [
        (
            "2001-November.txt",
            "lines 1-15",
            "15 lines (20 bytes) before the first 'From ' line skipped: not part of any message",
        ),
        (
            "2001-October.txt",
            "line 1",
            "1 line (25 bytes) before the first 'From ' line skipped: not part of any message",
        ),
    ]
    records = {record.id: record for _, found in read for record in found}
    assert records["20011101083000.GA77@carol.example.org"].thread == RELEASE_PLAN


def test_records_of_a_folder_match_the_files_read_alone() -> None:
    read = read_all(MboxConnector(), MONTHLY, ReadContext())
    for stream, records in read:
        alone = read_all(MboxConnector(), Path(stream.location), ReadContext())
        [(single, single_records)] = alone
        assert single.scope == "mbox:" + Path(stream.location).stem
        assert [(r.id, r.ref, r.text, r.time) for r in records] == [
            (r.id, r.ref, r.text, r.time) for r in single_records
        ]


def test_sub_folders_hidden_files_and_other_files() -> None:
    ctx = ReadContext()
    read = read_all(MboxConnector(), ARCHIVE, ctx)
    assert {stream.scope: len(records) for stream, records in read} == {
        "mbox:archive/2002-January": 2,
        "mbox:archive/old/2001-December": 1,
    }
    titles = [stream.title for stream, _ in read]
    assert titles == ["2002-January.txt", "old/2001-December.txt"]
    ids = {record.id for _, records in read for record in records}
    assert ids.isdisjoint({"pending-1@example.org", "hidden-1@example.org"})
    # The README is named once; hidden files and folders are passed over without a word.
    assert [(Path(p.path).name, p.reason) for p in ctx.problems] == [
        ("README", "not an mbox file (no 'From ' line); skipped")
    ]


def test_files_that_would_share_a_scope_keep_their_suffix(tmp_path: Path) -> None:
    folder = tmp_path / "dev"
    folder.mkdir()
    (folder / "2001-10.txt").write_text(mbox_message("a@example.org", "one", "1@x.org", 1))
    (folder / "2001-10.mbox").write_text(mbox_message("b@example.org", "two", "2@x.org", 2))
    (folder / "2001-11.txt").write_text(mbox_message("c@example.org", "three", "3@x.org", 3))
    scopes = [stream.scope for stream, _ in read_all(MboxConnector(), folder, ReadContext())]
    assert scopes == ["mbox:dev/2001-10.mbox", "mbox:dev/2001-10.txt", "mbox:dev/2001-11"]


def test_a_single_mbox_file_keeps_its_scope(fixtures_dir: Path) -> None:
    [(stream, records)] = read_all(
        MboxConnector(), fixtures_dir / "email" / "sample.mbox", ReadContext()
    )
    assert stream.scope == "mbox:sample"
    assert all("file" not in record.meta for record in records)


# --------------------------------------------------------------------------- with a scope


def test_a_scope_makes_the_folder_one_source_in_name_order() -> None:
    ctx = ReadContext(scope="lists:dev")
    [(stream, records)] = read_all(MboxConnector(), MONTHLY, ctx)
    assert (stream.scope, stream.title, stream.location) == ("lists:dev", "monthly", str(MONTHLY))
    assert stream.meta == {"files": 3}
    assert [record.meta["file"] for record in records] == [
        "2001-December",
        "2001-November.txt",
        "2001-November.txt",
        "2001-November.txt",
        "2001-October.txt",
        "2001-October.txt",
    ]
    assert records[-2].ref == f"{MONTHLY / '2001-October.txt'}#{RELEASE_PLAN}"


def test_a_scope_over_sub_folders() -> None:
    [(stream, records)] = read_all(MboxConnector(), ARCHIVE, ReadContext(scope="dev"))
    assert stream.scope == "dev"
    assert [record.meta["file"] for record in records] == [
        "2002-January.txt",
        "2002-January.txt",
        "old/2001-December.txt",
    ]


# --------------------------------------------------------------------------- API and CLI


def test_memory_ingests_a_folder_as_one_source_per_file(memory: stratamem.Memory) -> None:
    report = memory.ingest(MONTHLY)
    assert report.connector == "mbox"
    assert {s.scope: s.records for s in report.sources} == MONTHLY_SCOPES
    assert all(s.error is None for s in report.sources)
    assert sorted(source.scope for source in memory.sources.list()) == sorted(MONTHLY_SCOPES)


def test_memory_ingests_a_folder_with_a_scope_as_one_source(memory: stratamem.Memory) -> None:
    report = memory.ingest(MONTHLY, format="mbox", scope="lists:dev")
    assert [(s.scope, s.records, s.error) for s in report.sources] == [("lists:dev", 6, None)]


def test_cli_ingests_a_folder(run: Run) -> None:
    result = run("ingest", "--json", str(MONTHLY))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["connector"] == "mbox"
    assert {s["scope"]: s["records"] for s in report["sources"]} == MONTHLY_SCOPES
    # Named with --format too (it said "not a file" before folders were read).
    again = json.loads(run("ingest", "--json", "--format", "mbox", str(MONTHLY)).output)
    assert {s["scope"] for s in again["sources"]} == set(MONTHLY_SCOPES)
    assert again["added"] == 0


def test_cli_ingests_a_folder_with_a_scope(run: Run) -> None:
    result = run("ingest", "--json", "--format", "mbox", "--scope", "lists:dev", str(MONTHLY))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [(s["scope"], s["records"]) for s in report["sources"]] == [("lists:dev", 6)]


def test_cli_ingests_a_tree_with_other_files(run: Run) -> None:
    result = run("ingest", "--json", str(ARCHIVE))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [s["scope"] for s in report["sources"]] == [
        "mbox:archive/2002-January",
        "mbox:archive/old/2001-December",
    ]
    assert len(report["problems"]) == 1


# --------------------------------------------------------------------------- errors


def test_a_folder_without_mailboxes_is_a_one_line_error(run: Run, tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    (empty / "notes.txt").write_text("just a note\n")
    result = run("ingest", "--format", "mbox", str(empty))
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: nothing was ingested from ")
    assert f"{empty}: no mbox file in this folder" in lines[0]


def test_a_folder_without_mailboxes_raises_naming_it(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("just a note\n")
    (tmp_path / "2001-May.txt.gz").write_bytes(gzip.compress(b"From a@b.org Tue May  1 ..."))
    ctx = ReadContext()
    [stream] = MboxConnector().read(tmp_path, ctx)
    assert stream.scope == f"mbox:{tmp_path.name}"
    with pytest.raises(SourceFormatError, match="no mbox file in this folder") as raised:
        list(stream.records)
    assert raised.value.path == str(tmp_path)
    assert "1 gzip-compressed file(s)" in raised.value.reason
    # The one line says it all: no line for each file that is not mbox.
    assert ctx.problems == []


def test_a_maildir_read_as_mbox_says_so(fixtures_dir: Path) -> None:
    path = fixtures_dir / "email" / "Maildir"
    [stream] = MboxConnector().read(path, ReadContext(scope="mine"))
    assert stream.scope == "mine"
    with pytest.raises(SourceFormatError, match="a Maildir, not a folder of mbox files"):
        list(stream.records)


def test_odd_files_in_a_folder_are_reported_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "dev"
    folder.mkdir()
    shutil.copy(MONTHLY / "2001-October.txt", folder)
    (folder / "2001-September.txt.gz").write_bytes(
        gzip.compress((MONTHLY / "2001-October.txt").read_bytes())
    )
    (folder / "broken.mbox").write_text("<html>not mail</html>\n")
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe")
    ctx = ReadContext()
    read = read_all(MboxConnector(), folder, ctx)
    # broken.mbox passes the name test, so it gets a source that turns out empty.
    assert [(stream.scope, len(records)) for stream, records in read] == [
        ("mbox:dev/2001-October", 2),
        ("mbox:dev/broken", 0),
    ]
    reasons = {Path(p.path).name: p.reason for p in ctx.problems}
    assert reasons["2001-September.txt.gz"].startswith("compressed with gzip")
    assert reasons["broken.mbox"] == "not an mbox file (no 'From ' line)"
    if hasattr(os, "mkfifo"):
        assert reasons["pipe"] == "not a regular file (a FIFO)"


def test_an_unreadable_sub_folder_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(MONTHLY, tmp_path / "dev")
    locked = tmp_path / "dev" / "locked"
    locked.mkdir()
    scandir = os.scandir

    def refusing(path: str) -> Iterator[os.DirEntry[str]]:
        # Denied the way chmod 000 denies it, also where the tests run as root.
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    ctx = ReadContext()
    read = read_all(MboxConnector(), tmp_path / "dev", ctx)
    assert len(read) == 3
    assert [(p.path, p.where, p.reason) for p in ctx.problems] == [
        (str(locked), "folder", "cannot be read: Permission denied")
    ]


def test_a_maildir_inside_is_reported_when_mbox_is_named(tmp_path: Path) -> None:
    shutil.copytree(MONTHLY, tmp_path / "mail")
    shutil.copytree(FOLDERS.parent / "Maildir", tmp_path / "mail" / "INBOX")
    ctx = ReadContext()
    scopes = [stream.scope for stream, _ in read_all(MboxConnector(), tmp_path / "mail", ctx)]
    assert scopes == [scope.replace("monthly", "mail") for scope in MONTHLY_SCOPES]
    assert [(Path(p.path).name, p.where) for p in ctx.problems] == [("INBOX", "folder")]


# --------------------------------------------------------------------------- Maildir++


MAILDIRPP_SCOPES = {
    "maildir:maildirpp": 2,
    "maildir:maildirpp/Lists.dev": 2,
    "maildir:maildirpp/Sent": 1,
}


def test_maildir_plus_plus_is_one_source_per_folder() -> None:
    ctx = ReadContext()
    read = read_all(MaildirConnector(), MAILDIRPP, ctx)
    assert ctx.problems == []
    assert [(stream.scope, stream.title, stream.location) for stream, _ in read] == [
        ("maildir:maildirpp", "maildirpp", str(MAILDIRPP)),
        ("maildir:maildirpp/Lists.dev", "Lists.dev", str(MAILDIRPP / ".Lists.dev")),
        ("maildir:maildirpp/Sent", "Sent", str(MAILDIRPP / ".Sent")),
    ]
    # meta["folder"] and meta["file"] stay relative to the tree's root.
    assert [[(r.meta["folder"], r.id) for r in records] for _, records in read] == [
        [("", "lunch-1@example.org"), ("", "leave-7@hr.example.org")],
        [(".Lists.dev", "ci-runners@example.org"), (".Lists.dev", "ci-runners-2@example.org")],
        [(".Sent", "lunch-2@example.org")],
    ]
    [(_, [sent])] = [(stream, records) for stream, records in read if stream.title == "Sent"]
    assert sent.meta["file"] == ".Sent/cur/1709290000.M3P100.laptop:2,S"
    assert sent.ref == f"{MAILDIRPP / sent.meta['file']}#lunch-2@example.org"
    # A sent reply threads with the message it answers in the root folder.
    assert sent.thread == "lunch-1@example.org"


def test_maildir_plus_plus_folders_hold_the_records_of_the_whole_tree() -> None:
    [(_, whole)] = read_all(MaildirConnector(), MAILDIRPP, ReadContext(scope="all"))
    split = [
        record
        for _, records in read_all(MaildirConnector(), MAILDIRPP, ReadContext())
        for record in records
    ]
    assert sorted(split, key=lambda record: record.ref) == sorted(whole, key=lambda r: r.ref)


def test_a_reply_joins_its_thread_whatever_folder_is_read_first(tmp_path: Path) -> None:
    tree = Path(shutil.copytree(MAILDIRPP, tmp_path / "mail"))
    # An inbox answer to the sent reply, and a list reply that reaches the inbox thread.
    (tree / "cur" / "1709300000.M6P100.laptop:2,S").write_text(
        "Date: Fri, 01 Mar 2024 12:00:00 +0000\n"
        "Subject: Re: Re: Lunch on Friday?\n"
        "Message-ID: <lunch-3@example.org>\n"
        "In-Reply-To: <lunch-2@example.org>\n"
        "\n"
        "See you there.\n"
    )
    records = {
        record.id: record
        for _, found in read_all(MaildirConnector(), tree, ReadContext())
        for record in found
    }
    assert records["lunch-3@example.org"].thread == "lunch-1@example.org"
    assert records["lunch-2@example.org"].thread == "lunch-1@example.org"


def test_only_hidden_maildirs_are_folders(tmp_path: Path) -> None:
    tree = Path(shutil.copytree(MAILDIRPP, tmp_path / "mail"))
    (tree / ".notmuch" / "xapian").mkdir(parents=True)  # hidden, but not a Maildir
    shutil.copytree(MAILDIRPP / ".Sent", tree / "Drafts")  # a plain sub-Maildir
    shutil.copytree(MAILDIRPP / ".Sent", tree / ".Empty")
    for message in (tree / ".Empty" / "cur").iterdir():
        message.unlink()
    read = read_all(MaildirConnector(), tree, ReadContext())
    assert [(stream.scope, len(records)) for stream, records in read] == [
        ("maildir:mail", 3),  # Drafts/ stays with the root's own messages
        ("maildir:mail/Empty", 0),
        ("maildir:mail/Lists.dev", 2),
        ("maildir:mail/Sent", 1),
    ]


def test_a_folder_of_maildirs_is_still_one_source(tmp_path: Path) -> None:
    shutil.copytree(MAILDIRPP, tmp_path / "Mail" / "work")
    shutil.copytree(MAILDIRPP / ".Sent", tmp_path / "Mail" / "sent")
    assert registry.detect(tmp_path / "Mail").name == "maildir"
    [(stream, records)] = read_all(MaildirConnector(), tmp_path / "Mail", ReadContext())
    assert stream.scope == "maildir:Mail"
    assert {record.meta["folder"] for record in records} == {
        "sent",
        "work",
        "work/.Lists.dev",
        "work/.Sent",
    }


def test_memory_ingests_maildir_plus_plus_as_one_source_per_folder(
    memory: stratamem.Memory,
) -> None:
    report = memory.ingest(MAILDIRPP)
    assert report.connector == "maildir"
    assert [(s.scope, s.records, s.error) for s in report.sources] == [
        (scope, records, None) for scope, records in MAILDIRPP_SCOPES.items()
    ]
    assert sorted(source.scope for source in memory.sources.list()) == sorted(MAILDIRPP_SCOPES)


def test_cli_ingests_maildir_plus_plus(run: Run) -> None:
    result = run("ingest", "--json", str(MAILDIRPP))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {s["scope"]: s["records"] for s in report["sources"]} == MAILDIRPP_SCOPES


def test_maildir_plus_plus_with_a_scope(run: Run) -> None:
    result = run("ingest", "--json", "--scope", "mail:dana", str(MAILDIRPP))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["connector"] == "maildir"
    assert [(s["scope"], s["records"]) for s in report["sources"]] == [("mail:dana", 5)]


# --------------------------------------------------------------------------- real data


def test_lkml_maildir_still_ingests_as_before(shared_data: Path, memory: stratamem.Memory) -> None:
    path = shared_data / "email" / "lkml-maildir"
    if not path.is_dir():
        pytest.skip("the LKML Maildir is not present")
    assert detect_mbox(path) == 0
    report = memory.ingest(path)
    assert report.connector == "maildir"
    assert [(s.scope, s.records, s.error) for s in report.sources] == [
        ("maildir:lkml-maildir", 210, None)
    ]
